//! The metrics of health: readiness, leadership and each route's sink reachability.

use std::sync::OnceLock;

use metrics::Gauge;

use crate::telemetry::metrics::{self as m, label};

/// The gauges of the process's health, each registered when first set: without leader
/// election there is no `deltaship_leader`, and a route's reachability shows once probed.
#[derive(Debug)]
pub struct HealthMeters {
    ready: OnceLock<Gauge>,
    leader: OnceLock<Gauge>,
    /// Each route's name and sink reachability, by route position.
    reachable: Vec<(String, OnceLock<Gauge>)>,
}

impl HealthMeters {
    /// The gauges of a process with `routes`, by route position.
    pub fn new(routes: impl Iterator<Item = String>) -> HealthMeters {
        HealthMeters { ready: OnceLock::new(), leader: OnceLock::new(), reachable: routes.map(|r| (r, OnceLock::new())).collect() }
    }

    pub fn ready(&self, ready: bool) {
        self.ready.get_or_init(|| metrics::gauge!(m::READY)).set(one_if(ready));
    }

    pub fn leader(&self, leading: bool) {
        self.leader.get_or_init(|| metrics::gauge!(m::LEADER)).set(one_if(leading));
    }

    /// Whether the sink of the route at `index` answers its probes.
    pub fn reachable(&self, index: usize, reachable: bool) {
        let (route, gauge) = &self.reachable[index];
        gauge.get_or_init(|| metrics::gauge!(m::SINK_REACHABLE, label::ROUTE => route.clone())).set(one_if(reachable));
    }
}

fn one_if(yes: bool) -> f64 {
    if yes { 1.0 } else { 0.0 }
}
