//! The metrics of the Kubernetes client: its requests to the API server by verb and answer.

use crate::telemetry::metrics::{self as m, label};

/// The counter of the client's requests. Requests are few (lists, watch starts, leases,
/// never one per event) and their status codes many: each is counted through a lookup by
/// its labels, without handles kept.
#[derive(Debug, Clone, Copy)]
pub struct RequestMeters;

impl RequestMeters {
    /// A request of `verb` answered with the HTTP status `code`, or with no answer (None).
    pub fn answered(self, verb: &'static str, code: Option<u16>) {
        let code = code.map_or_else(|| "error".to_string(), |c| c.to_string());
        metrics::counter!(m::KUBE_REQUESTS, label::VERB => verb, label::CODE => code).increment(1);
    }
}
