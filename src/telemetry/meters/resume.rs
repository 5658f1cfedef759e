//! The metrics of a watch's start from its routes' checkpoints: why it did not resume, and
//! the reads of its log's tail.

use crate::telemetry::metrics::{self as m, label};

/// The counters of one watch's start. Each counts at most once per route at start-up:
/// counted through a lookup by its labels, without handles kept.
pub struct ResumeMeters<'a> {
    resource: &'a str,
}

impl<'a> ResumeMeters<'a> {
    /// The counters of a watch of `resource` (its metric label).
    pub fn new(resource: &'a str) -> ResumeMeters<'a> {
        ResumeMeters { resource }
    }

    /// The watch starts with a full initial sync for `reason` (`Unusable::as_str`).
    pub fn fell_back(&self, reason: &'static str) {
        metrics::counter!(m::RESUME_FALLBACKS, label::RESOURCE => self.resource.to_string(), label::REASON => reason).increment(1);
    }

    /// A read of the log's tail ended with `outcome` (`read`, `failed`, `untracked`).
    pub fn tail(&self, outcome: &'static str) {
        metrics::counter!(m::RESUME_TAILS, label::RESOURCE => self.resource.to_string(), label::OUTCOME => outcome).increment(1);
    }

    /// `n` records of the log's tail ahead of the API server's current version, ignored.
    pub fn ignored_ahead(&self, n: u64) {
        metrics::counter!(m::RESUME_TAIL_IGNORED, label::RESOURCE => self.resource.to_string(), label::REASON => "ahead").increment(n);
    }
}

/// Whether a start waits for another deployment to leave route `route` (`crate::checkpoint::holder`).
pub fn held_elsewhere(route: &str, waiting: bool) {
    metrics::gauge!(m::ROUTE_HELD_ELSEWHERE, label::ROUTE => route.to_string()).set(if waiting { 1.0 } else { 0.0 });
}
