//! The scope of one watch: a resource, one namespace (or all), selectors and shaping.

use std::sync::Arc;
use std::time::Duration;

use super::Output;
use crate::json::Scanner;
use crate::model::{ResourceType, SyncMode};
use crate::redact::Redaction;

/// One watch and everything the later stages need to know about it. Shared (`Arc`) by
/// all events of the watch.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Position of the resource in the config's `resources`, for error messages.
    pub index: usize,
    pub resource: ResourceType,
    /// The watched namespace; `None` for all namespaces or a cluster-scoped kind.
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// The resource's redaction, shared by its watches.
    pub redaction: Arc<Redaction>,
    pub ignore_fields: Vec<String>,
    /// Reads the resource's objects: their fingerprints leave out `ignore_fields` and the
    /// fields that are always ignored.
    pub scanner: Scanner,
    /// How relists are shipped.
    pub relist: SyncMode,
    /// Period of resyncs, when on.
    pub resync: Option<Duration>,
    /// Period of state markers, when on.
    pub state_markers: Option<Duration>,
    /// The routes that ship this resource, with their filters and shapes.
    pub outputs: Vec<Output>,
}

impl Scope {
    /// Whether the index must keep shipped content (resyncs and patch payloads need it).
    pub fn keeps_content(&self) -> bool {
        self.resync.is_some() || self.outputs.iter().any(Output::needs_previous)
    }

    /// For logs: `configmaps` or `configmaps in ns`.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} in {ns}", self.resource.label()),
            None => self.resource.label(),
        }
    }
}
