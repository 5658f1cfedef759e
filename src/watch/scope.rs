//! The scope of one watch: a resource, one namespace (or all), selectors and shaping.

use crate::config::PayloadMode;
use crate::resource::Resource;
use crate::route::Route;

/// One watch and everything the later stages need to know about it. Shared (`Arc`) by
/// all events of the watch.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Position of the resource in the config's `resources`, for error messages.
    pub index: usize,
    pub resource: Resource,
    /// The watched namespace; `None` for all namespaces or a cluster-scoped kind.
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub payload: PayloadMode,
    pub redact: bool,
    pub ignore_fields: Vec<String>,
    pub route: Route,
}

impl Scope {
    /// For logs: `configmaps` or `configmaps in ns`.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} in {ns}", self.resource.label()),
            None => self.resource.label(),
        }
    }
}
