//! One route's share of a watch: which changes it ships, their shape and where they go.

use std::sync::Arc;

use super::{Candidate, Filter};
use crate::address::Address;
use crate::config::PayloadMode;

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
    /// `dataschema_base`: where the schemas of the data are published; markers and
    /// references then carry a `dataschema` attribute.
    pub dataschema_base: Option<Arc<str>>,
    pub address: Address,
}

impl Output {
    pub fn passes(&self, candidate: Candidate) -> bool {
        self.filters.iter().all(|f| f.passes(candidate))
    }

    /// Whether every change of the watch is shipped (no filter leaves one out): only then
    /// do consumers hold the watch's whole state.
    pub fn ships_everything(&self) -> bool {
        self.filters.iter().all(Filter::is_empty)
    }

    /// Whether a filter compares paths of the previous and current content (its
    /// candidates need the contents as trees).
    pub fn compares_paths(&self) -> bool {
        self.filters.iter().any(Filter::needs_previous)
    }

    /// Whether shaping or filtering needs each object's previously shipped content.
    pub fn needs_previous(&self) -> bool {
        self.payload == PayloadMode::Patch || self.filters.iter().any(Filter::needs_previous)
    }
}
