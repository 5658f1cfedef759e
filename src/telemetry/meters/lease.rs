//! The metrics of leader election: its failed Lease API calls.

use crate::telemetry::metrics::{self as m, label};

/// The counter of the elector's failed Lease calls. They are rare (a retry period apart at
/// most): each is counted through a lookup by its labels, without handles kept.
#[derive(Debug, Clone, Copy)]
pub struct LeaseMeters;

impl LeaseMeters {
    /// A Lease call failed with an error of `kind` (`LeaseErrorKind::as_str`), retried.
    pub fn failed(self, kind: &'static str) {
        metrics::counter!(m::LEASE_ERRORS, label::ERROR_KIND => kind).increment(1);
    }
}
