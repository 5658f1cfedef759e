//! The metrics of a route's checkpoint writer: what waits to be written, and its writes.

use metrics::Gauge;

use super::counters::Counters;
use crate::telemetry::metrics::{self as m, label};

/// The handles of one route's checkpoint writer; the counters registered on the first write.
pub struct CheckpointMeters {
    route: String,
    pending: Gauge,
    unwritten: Gauge,
    /// By outcome (`ok`, `failed`).
    writes: Counters<&'static str>,
    records: Counters<()>,
}

impl CheckpointMeters {
    pub fn new(route: &str) -> CheckpointMeters {
        CheckpointMeters {
            pending: metrics::gauge!(m::CHECKPOINT_PENDING, label::ROUTE => route.to_string()),
            unwritten: metrics::gauge!(m::CHECKPOINT_UNWRITTEN, label::ROUTE => route.to_string()),
            writes: Counters::default(),
            records: Counters::default(),
            route: route.to_string(),
        }
    }

    /// Events of the route not yet acknowledged, and records acknowledged and not yet
    /// written.
    pub fn backlog(&self, events: usize, records: usize) {
        self.pending.set(events as f64);
        self.unwritten.set(records as f64);
    }

    /// A write of `records` records was stored.
    pub fn written(&mut self, records: usize) {
        self.write("ok");
        let route = &self.route;
        self.records.increment((), records as u64, |()| metrics::counter!(m::CHECKPOINT_RECORDS, label::ROUTE => route.clone()));
    }

    /// A write failed (it is retried).
    pub fn failed(&mut self) {
        self.write("failed");
    }

    fn write(&mut self, outcome: &'static str) {
        let route = &self.route;
        self.writes.increment(outcome, 1, |o| metrics::counter!(m::CHECKPOINT_WRITES, label::ROUTE => route.clone(), label::OUTCOME => o));
    }
}
