//! The metrics of a watch's decoding: objects it could not read, or shipped as truncated
//! references because they nest too deep.

use std::sync::Arc;

use super::counters::Counters;
use crate::telemetry::metrics::{self as m, label};

/// The handles of one watch's decoding, each registered on the first object it counts.
pub struct DecodeMeters {
    resource: Arc<str>,
    /// By reason (`decode`, `too_deep`).
    bad: Counters<&'static str>,
}

impl DecodeMeters {
    /// The handles of a watch of `resource` (its metric label).
    pub fn new(resource: Arc<str>) -> DecodeMeters {
        DecodeMeters { resource, bad: Counters::default() }
    }

    /// An object that could not be decoded, skipped.
    pub fn undecodable(&mut self) {
        self.bad("decode");
    }

    /// An object nested deeper than the JSON limit, shipped as a truncated reference.
    pub fn too_deep(&mut self) {
        self.bad("too_deep");
    }

    fn bad(&mut self, reason: &'static str) {
        let resource = &self.resource;
        self.bad.increment(reason, 1, |r| metrics::counter!(m::BAD_OBJECTS, label::RESOURCE => resource.clone(), label::REASON => r));
    }
}
