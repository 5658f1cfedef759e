//! A dispatcher's metric handles, registered once per route (and per resource and type):
//! looking a metric up by its labels allocates the labels, which the per-event path must
//! not do.

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram};

use crate::telemetry::metrics as m;

pub struct Meters {
    route: String,
    pub in_flight: Gauge,
    pub held: Gauge,
    pub queued: Gauge,
    pub latency: Histogram,
    /// From the watch event's arrival to the acknowledgement.
    pub lag: Histogram,
    /// By type label, then resource: looked up by a borrowed resource, without a copy.
    acknowledged: HashMap<&'static str, HashMap<Arc<str>, Counter>>,
}

impl Meters {
    /// Registers the handles of `route` delivering to `sink`. Call it once the metrics
    /// recorder is installed (handles taken before it are no-ops).
    pub fn new(route: &str, sink: &'static str) -> Meters {
        let route = route.to_string();
        Meters {
            in_flight: metrics::gauge!(m::IN_FLIGHT, "route" => route.clone()),
            held: metrics::gauge!(m::HELD, "route" => route.clone()),
            queued: metrics::gauge!(m::QUEUED, "route" => route.clone()),
            latency: metrics::histogram!(m::PUBLISH_LATENCY, "sink" => sink, "route" => route.clone()),
            lag: metrics::histogram!(m::EVENT_LAG, "route" => route.clone()),
            acknowledged: HashMap::new(),
            route,
        }
    }

    /// Counts an event of `resource` and `ty` (its type label) acknowledged by the sink.
    pub fn acknowledged(&mut self, resource: &Arc<str>, ty: &'static str) {
        let by_resource = self.acknowledged.entry(ty).or_default();
        match by_resource.get(&**resource) {
            Some(c) => c.increment(1),
            None => {
                let c = metrics::counter!(m::EVENTS, "resource" => resource.to_string(), "type" => ty, "route" => self.route.clone());
                c.increment(1);
                by_resource.insert(resource.clone(), c);
            }
        }
    }
}
