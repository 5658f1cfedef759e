//! The metrics of a route's dispatcher: what it sends, holds and has queued, what the sink
//! acknowledged, refused or was too small for.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Gauge, Histogram};

use super::counters::{Counters, PerResource};
use crate::telemetry::metrics::{self as m, label};

/// The handles of one route's dispatcher, the only writer of its series: registered once
/// per route (and per resource and type), so that the per-event path only counts.
pub struct DispatchMeters {
    route: Arc<str>,
    sink: &'static str,
    in_flight: Gauge,
    held: Gauge,
    queued: Gauge,
    latency: Histogram,
    /// From the watch event's arrival to the acknowledgement.
    lag: Histogram,
    /// By type label, then resource.
    acknowledged: HashMap<&'static str, PerResource>,
    /// By error kind (`ErrorKind::as_str`).
    failed: Counters<&'static str>,
    /// By reason (`rejected`, `too_large`), then resource.
    dropped: HashMap<&'static str, PerResource>,
    truncated: PerResource,
}

impl DispatchMeters {
    /// Registers the handles of `route` delivering to `sink`. Call it once the metrics
    /// recorder is installed (handles taken before it are no-ops).
    pub fn new(route: &str, sink: &'static str) -> DispatchMeters {
        let route: Arc<str> = route.into();
        DispatchMeters {
            in_flight: metrics::gauge!(m::IN_FLIGHT, label::ROUTE => route.clone()),
            held: metrics::gauge!(m::HELD, label::ROUTE => route.clone()),
            queued: metrics::gauge!(m::QUEUED, label::ROUTE => route.clone()),
            latency: metrics::histogram!(m::PUBLISH_LATENCY, label::SINK => sink, label::ROUTE => route.clone()),
            lag: metrics::histogram!(m::EVENT_LAG, label::ROUTE => route.clone()),
            acknowledged: HashMap::new(),
            failed: Counters::default(),
            dropped: HashMap::new(),
            truncated: PerResource::default(),
            route,
            sink,
        }
    }

    /// What the route has not delivered: events sent and not acknowledged, events waiting
    /// behind an earlier one of their object, and events queued between the watches and
    /// the sends (in the route's queue, or received and not yet taken in).
    pub fn outstanding(&self, in_flight: usize, held: usize, queued: usize) {
        self.in_flight.set(in_flight as f64);
        self.held.set(held as f64);
        self.queued.set(queued as f64);
    }

    /// An event of `resource` and `ty` (its type label) acknowledged `sent` after its send,
    /// and `since_observed` after what it was built from arrived (when known).
    pub fn acknowledged(&mut self, resource: &Arc<str>, ty: &'static str, sent: Duration, since_observed: Option<Duration>) {
        let route = &self.route;
        self.acknowledged
            .entry(ty)
            .or_default()
            .increment(resource, |r| metrics::counter!(m::EVENTS, label::RESOURCE => r, label::TYPE => ty, label::ROUTE => route.clone()));
        self.latency.record(sent.as_secs_f64());
        if let Some(lag) = since_observed {
            self.lag.record(lag.as_secs_f64());
        }
    }

    /// A send failed with an error of `kind` (`ErrorKind::as_str`), retried or not.
    pub fn failed(&mut self, kind: &'static str) {
        let (sink, route) = (self.sink, &self.route);
        self.failed.increment(kind, 1, |k| metrics::counter!(m::SINK_ERRORS, label::SINK => sink, label::ROUTE => route.clone(), label::ERROR_KIND => k));
    }

    /// An event of `resource` the sink rejected, skipped by policy.
    pub fn rejected(&mut self, resource: &Arc<str>) {
        self.dropped(resource, "rejected");
    }

    /// An event of `resource` too large for the sink, skipped by policy.
    pub fn too_large(&mut self, resource: &Arc<str>) {
        self.dropped(resource, "too_large");
    }

    fn dropped(&mut self, resource: &Arc<str>, reason: &'static str) {
        let route = &self.route;
        self.dropped
            .entry(reason)
            .or_default()
            .increment(resource, |r| metrics::counter!(m::DROPPED, label::RESOURCE => r, label::REASON => reason, label::ROUTE => route.clone()));
    }

    /// An event of `resource` too large for the sink, shipped as a truncated reference.
    pub fn truncated(&mut self, resource: &Arc<str>) {
        let route = &self.route;
        self.truncated.increment(resource, |r| metrics::counter!(m::TRUNCATED, label::RESOURCE => r, label::ROUTE => route.clone()));
    }
}
