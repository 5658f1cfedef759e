//! One route's share of a watch: which changes it ships, their shape and where they go.

use std::sync::Arc;

use crate::change::{Change, Filter};
use crate::config::PayloadMode;
use crate::route::Route;

#[derive(Debug, Clone)]
pub struct Output {
    /// Position of the route among the configuration's routes: the queue events go to.
    pub route: usize,
    /// The route's name, the `route` metric label.
    pub route_name: Arc<str>,
    pub payload: PayloadMode,
    /// The resource's filter, then the route's: a change is shipped when both pass.
    pub filters: [Filter; 2],
    /// Set when object events are shaped as Knative's ApiServerSource emits them: the
    /// API server's URL, their `source`.
    pub knative_source: Option<Arc<str>>,
    pub destination: Route,
}

impl Output {
    pub fn passes(&self, change: &Change) -> bool {
        self.filters.iter().all(|f| f.passes(change))
    }

    /// Whether shaping or filtering needs each object's previously shipped content.
    pub fn needs_previous(&self) -> bool {
        self.payload == PayloadMode::Patch || self.filters.iter().any(Filter::needs_previous)
    }
}
