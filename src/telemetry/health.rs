//! Readiness and liveness: per route, every initial sync delivered and the sink reachable,
//! and no delivery stalled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A sink's reachability: not probed yet, reachable, unreachable.
const UNKNOWN: u8 = 0;
const REACHABLE: u8 = 1;
const UNREACHABLE: u8 = 2;

#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// After how long without any acknowledgement, while events wait, a route counts as
    /// stuck (None: never).
    stall: Option<Duration>,
    routes: Vec<RouteState>,
    /// A standby replica (leader election, not the leader) is ready: it is healthy and
    /// waiting, and rollouts must not wait for it to lead.
    standby: AtomicBool,
}

#[derive(Debug)]
struct RouteState {
    name: String,
    /// When delivery last made progress (an acknowledgement), in ms since `started`, and
    /// how many events wait for one.
    progress_ms: AtomicU64,
    outstanding: AtomicUsize,
    initial_syncs_pending: AtomicUsize,
    sink: AtomicU8,
}

/// One route's handle on the shared health: what its dispatcher and probe report.
#[derive(Debug, Clone)]
pub struct RouteHealth {
    health: Arc<Health>,
    index: usize,
}

impl Health {
    /// `routes`: each route's name and the number of watches feeding it (initial syncs it
    /// must deliver before it is ready).
    pub fn new(routes: Vec<(String, usize)>, stall: Option<Duration>) -> Arc<Health> {
        Arc::new(Health {
            started: Instant::now(),
            stall,
            routes: routes
                .into_iter()
                .map(|(name, watches)| RouteState {
                    name,
                    progress_ms: AtomicU64::new(0),
                    outstanding: AtomicUsize::new(0),
                    initial_syncs_pending: AtomicUsize::new(watches),
                    sink: AtomicU8::new(UNKNOWN),
                })
                .collect(),
            standby: AtomicBool::new(false),
        })
    }

    /// One route named `default` fed by `watches` watches, never stalled.
    pub fn single(watches: usize) -> Arc<Health> {
        Health::new(vec![(crate::config::DEFAULT_ROUTE.into(), watches)], None)
    }

    /// The handle of the route at `index`.
    pub fn route(self: &Arc<Self>, index: usize) -> RouteHealth {
        assert!(index < self.routes.len(), "route {index} is not in the health table");
        RouteHealth { health: self.clone(), index }
    }

    pub fn set_standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::Release);
        metrics::gauge!(super::metrics::LEADER).set(if standby { 0.0 } else { 1.0 });
        self.publish();
    }

    /// What is wrong with each route, prefixed by the route's name when there are several.
    fn problems(&self, check: impl Fn(&RouteState) -> Option<String>) -> Result<(), String> {
        let several = self.routes.len() > 1;
        let found: Vec<String> = self
            .routes
            .iter()
            .filter_map(|r| check(r).map(|p| if several { format!("route {}: {p}", r.name) } else { p }))
            .collect();
        if found.is_empty() { Ok(()) } else { Err(found.join("; ")) }
    }

    /// `Ok` while alive; an error when a route's events have waited for the stall timeout
    /// without any acknowledgement (its client is stuck: a restart re-delivers with an
    /// initial sync).
    pub fn liveness(&self) -> Result<(), String> {
        let Some(stall) = self.stall else { return Ok(()) };
        self.problems(|r| {
            let waiting = r.outstanding.load(Ordering::Acquire);
            let since = self.started.elapsed().saturating_sub(Duration::from_millis(r.progress_ms.load(Ordering::Acquire)));
            (waiting > 0 && since >= stall).then(|| format!("{waiting} event(s) not acknowledged for {}s", since.as_secs()))
        })
    }

    /// `Ok` when ready (or standing by), else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.standby.load(Ordering::Acquire) {
            return Ok(());
        }
        self.problems(RouteState::not_ready)
    }

    fn publish(&self) {
        metrics::gauge!(super::metrics::READY).set(if self.readiness().is_ok() { 1.0 } else { 0.0 });
    }

    fn progressed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

impl RouteState {
    fn not_ready(&self) -> Option<String> {
        let pending = self.initial_syncs_pending.load(Ordering::Acquire);
        let connected = self.sink.load(Ordering::Acquire) == REACHABLE;
        match (pending, connected) {
            (0, true) => None,
            (0, false) => Some("the sink is not reachable".into()),
            (n, true) => Some(format!("{n} initial sync(s) not yet delivered")),
            (n, false) => Some(format!("the sink is not reachable; {n} initial sync(s) not yet delivered")),
        }
    }
}

impl RouteHealth {
    /// The route's name.
    pub fn name(&self) -> &str {
        &self.state().name
    }

    fn state(&self) -> &RouteState {
        &self.health.routes[self.index]
    }

    /// The sink acknowledged the `sync.completed` of one watch's initial sync.
    pub fn initial_sync_delivered(&self) {
        let _ = self
            .state()
            .initial_syncs_pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        self.health.publish();
    }

    /// The sink acknowledged an event.
    pub fn progressed(&self) {
        self.state().progress_ms.store(self.health.progressed_ms(), Ordering::Release);
    }

    /// Events sent or held, not yet acknowledged.
    pub fn set_outstanding(&self, n: usize) {
        if n > 0 && self.state().outstanding.load(Ordering::Acquire) == 0 {
            // Waiting starts now: an idle route is never stalled.
            self.progressed();
        }
        self.state().outstanding.store(n, Ordering::Release);
    }

    /// Records whether the sink is reachable; returns true when that changed (the first
    /// probe always does, so a sink that is down from the start is reported too).
    pub fn set_sink_connected(&self, connected: bool) -> bool {
        let state = if connected { REACHABLE } else { UNREACHABLE };
        let changed = self.state().sink.swap(state, Ordering::AcqRel) != state;
        metrics::gauge!(super::metrics::SINK_REACHABLE, "route" => self.state().name.clone()).set(if connected { 1.0 } else { 0.0 });
        self.health.publish();
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alive_unless_events_wait_without_acknowledgement_for_the_stall_timeout() {
        let h = Health::new(vec![("default".into(), 0)], Some(Duration::from_millis(50)));
        let r = h.route(0);
        std::thread::sleep(Duration::from_millis(60));
        assert!(h.liveness().is_ok(), "idle is not stalled");
        r.set_outstanding(3);
        assert!(h.liveness().is_ok());
        std::thread::sleep(Duration::from_millis(60));
        assert!(h.liveness().unwrap_err().contains("3 event(s)"));
        r.progressed();
        assert!(h.liveness().is_ok());
        assert!(Health::single(0).liveness().is_ok(), "no timeout, never stalled");
    }

    #[test]
    fn ready_only_when_synced_and_connected() {
        let h = Health::single(2);
        let r = h.route(0);
        assert!(h.readiness().unwrap_err().contains("2 initial"));
        assert!(r.set_sink_connected(true), "the first probe is a change");
        assert!(!r.set_sink_connected(true));
        r.initial_sync_delivered();
        r.initial_sync_delivered();
        r.initial_sync_delivered();
        assert_eq!(h.readiness(), Ok(()));
        assert!(r.set_sink_connected(false));
        assert_eq!(h.readiness().unwrap_err(), "the sink is not reachable");
        assert!(Health::single(0).route(0).set_sink_connected(false), "down from the start is a change");
    }

    #[test]
    fn each_route_is_reported_by_name() {
        let h = Health::new(vec![("audit".into(), 1), ("trigger".into(), 1)], Some(Duration::from_millis(10)));
        let (audit, trigger) = (h.route(0), h.route(1));
        audit.set_sink_connected(true);
        audit.initial_sync_delivered();
        trigger.set_sink_connected(false);
        assert_eq!(h.readiness().unwrap_err(), "route trigger: the sink is not reachable; 1 initial sync(s) not yet delivered");
        trigger.set_sink_connected(true);
        trigger.initial_sync_delivered();
        assert_eq!(h.readiness(), Ok(()));
        trigger.set_outstanding(1);
        std::thread::sleep(Duration::from_millis(20));
        let stalled = h.liveness().unwrap_err();
        assert!(stalled.starts_with("route trigger: 1 event(s)"), "{stalled}");
        h.set_standby(true);
        assert_eq!(h.readiness(), Ok(()), "a standby is ready");
    }
}
