//! The metrics of a watch's worker: the watch's index and freshness, its errors and stalls,
//! and what each of its routes' filters left out.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use metrics::Gauge;

use super::counters::Counters;
use crate::model::{ChangeType, StallReason};
use crate::telemetry::metrics::{self as m, label};

/// The handles of one watch's worker, registered once per watch and route.
pub struct WorkerMeters {
    resource: Arc<str>,
    indexed: Gauge,
    /// Unix times of the last observation and of the last completed sync.
    last_event: Gauge,
    last_sync: Gauge,
    /// Each output's route, by output position.
    routes: Vec<Arc<str>>,
    /// Each output's filtered events, by output position and change type.
    filtered: Vec<Counters<ChangeType>>,
    /// By error kind (`FailureKind::as_str`).
    watch_errors: Counters<&'static str>,
    stalls: Counters<StallReason>,
}

impl WorkerMeters {
    /// The handles of the watch of `resource` in `namespace` (None: every namespace, or a
    /// cluster-scoped kind) feeding `routes`, by output position.
    pub fn new(resource: &Arc<str>, namespace: Option<&str>, routes: Vec<Arc<str>>) -> WorkerMeters {
        // Each namespace's watch has its own gauges: one that stalls is not hidden by another.
        let ns: Arc<str> = namespace.unwrap_or_default().into();
        WorkerMeters {
            indexed: metrics::gauge!(m::INDEXED, label::RESOURCE => resource.clone(), label::WATCH_NAMESPACE => ns.clone()),
            last_event: metrics::gauge!(m::WATCH_LAST_EVENT, label::RESOURCE => resource.clone(), label::WATCH_NAMESPACE => ns.clone()),
            last_sync: metrics::gauge!(m::WATCH_LAST_SYNC, label::RESOURCE => resource.clone(), label::WATCH_NAMESPACE => ns),
            filtered: routes.iter().map(|_| Counters::default()).collect(),
            routes,
            watch_errors: Counters::default(),
            stalls: Counters::default(),
            resource: resource.clone(),
        }
    }

    /// The watch received something from the API server (an object, a change, a bookmark).
    pub fn observed(&self) {
        self.last_event.set(unix_now());
    }

    /// The watch completed a sync.
    pub fn synced(&self) {
        self.last_sync.set(unix_now());
    }

    /// The watch's index holds `objects`.
    pub fn indexed(&self, objects: usize) {
        self.indexed.set(objects as f64);
    }

    /// An object event of type `change` left out of output `i` by its filter.
    pub fn filtered(&mut self, i: usize, change: ChangeType) {
        let (resource, route) = (&self.resource, &self.routes[i]);
        self.filtered[i].increment(
            change,
            1,
            |t| metrics::counter!(m::FILTERED, label::RESOURCE => resource.clone(), label::TYPE => t.as_str(), label::ROUTE => route.clone()),
        );
    }

    /// The watch was given up for `reason` and lists again.
    pub fn stalled(&mut self, reason: StallReason) {
        let resource = &self.resource;
        self.stalls.increment(reason, 1, |r| metrics::counter!(m::WATCH_STALLS, label::RESOURCE => resource.clone(), label::REASON => r.as_str()));
    }

    /// A watch error of `kind` (`FailureKind::as_str`).
    pub fn watch_error(&mut self, kind: &'static str) {
        let resource = &self.resource;
        self.watch_errors.increment(kind, 1, |k| metrics::counter!(m::WATCH_ERRORS, label::RESOURCE => resource.clone(), label::ERROR_KIND => k));
    }
}

/// The wall clock in Unix seconds, for the freshness gauges.
fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
