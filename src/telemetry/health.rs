//! Readiness and liveness: per route, every initial sync delivered and the sink reachable,
//! no watch failing for longer than its grace, and no delivery stalled.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's clock, so that the tests can pause and advance it.
use tokio::time::Instant;

use super::meters::HealthMeters;

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
    /// How long a watch may keep failing before the process is not ready (None: never).
    watch_grace: Option<Duration>,
    watches: Mutex<Vec<Arc<WatchState>>>,
    meters: HealthMeters,
}

/// `failing_since_ms` of a watch that works.
const NOT_FAILING: u64 = u64::MAX;

#[derive(Debug)]
struct WatchState {
    /// The watch, as logs name it (e.g. `configmaps in namespace shop`).
    name: String,
    /// Since when its errors have lasted, in ms since `started` (`NOT_FAILING`: it works).
    failing_since_ms: AtomicU64,
    /// The kind of its last error (a bounded label, e.g. `forbidden`).
    last_error: Mutex<&'static str>,
}

/// One watch's handle on the shared health: its errors and recoveries.
#[derive(Debug, Clone)]
pub struct WatchHealth {
    health: Arc<Health>,
    state: Arc<WatchState>,
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
    /// must deliver before it is ready). `watch_grace`: how long a watch may keep failing
    /// before the process is not ready (None: it never makes it not ready).
    pub fn new(routes: Vec<(String, usize)>, stall: Option<Duration>, watch_grace: Option<Duration>) -> Arc<Health> {
        let meters = HealthMeters::new(routes.iter().map(|(name, _)| name.clone()));
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
            watch_grace,
            watches: Mutex::new(Vec::new()),
            meters,
        })
    }

    /// One route named `default` fed by `watches` watches, never stalled, and no grace
    /// for failing watches.
    pub fn single(watches: usize) -> Arc<Health> {
        Health::new(vec![(crate::config::DEFAULT_ROUTE.into(), watches)], None, None)
    }

    /// Registers a watch, named as logs name it.
    pub fn watch(self: &Arc<Self>, name: String) -> WatchHealth {
        let state = Arc::new(WatchState { name, failing_since_ms: AtomicU64::new(NOT_FAILING), last_error: Mutex::new("") });
        self.watches.lock().expect("never poisoned").push(state.clone());
        WatchHealth { health: self.clone(), state }
    }

    /// The handle of the route at `index`.
    pub fn route(self: &Arc<Self>, index: usize) -> RouteHealth {
        assert!(index < self.routes.len(), "route {index} is not in the health table");
        RouteHealth { health: self.clone(), index }
    }

    pub fn set_standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::Release);
        self.meters.leader(!standby);
        self.publish();
    }

    /// What is wrong with each route, prefixed by the route's name when there are several.
    fn problems(&self, check: impl Fn(&RouteState) -> Option<String>) -> Result<(), String> {
        let several = self.routes.len() > 1;
        let found: Vec<String> = self.routes.iter().filter_map(|r| check(r).map(|p| if several { format!("route {}: {p}", r.name) } else { p })).collect();
        if found.is_empty() { Ok(()) } else { Err(found.join("; ")) }
    }

    /// `Ok` while alive; an error when a route's events have waited for the stall timeout
    /// without any acknowledgement while its sink answered the probes (its client is stuck:
    /// a restart resumes from the checkpoint). A sink that does not answer is an outage,
    /// which a restart would not end: not ready, but alive, so that the pod is not
    /// restarted again and again while the brokers are down.
    pub fn liveness(&self) -> Result<(), String> {
        let Some(stall) = self.stall else { return Ok(()) };
        self.problems(|r| {
            let waiting = r.outstanding.load(Ordering::Acquire);
            let since = self.started.elapsed().saturating_sub(Duration::from_millis(r.progress_ms.load(Ordering::Acquire)));
            let outage = r.sink.load(Ordering::Acquire) == UNREACHABLE;
            (waiting > 0 && since >= stall && !outage).then(|| format!("{waiting} event(s) not acknowledged for {}s", since.as_secs()))
        })
    }

    /// `Ok` when ready (or standing by), else why not: the routes' problems, then each
    /// watch failing for longer than the grace.
    pub fn readiness(&self) -> Result<(), String> {
        if self.standby.load(Ordering::Acquire) {
            return Ok(());
        }
        let routes = self.problems(RouteState::not_ready);
        let Some(grace) = self.watch_grace else { return routes };
        let now = self.progressed_ms();
        let mut found: Vec<String> = routes.err().into_iter().collect();
        for w in self.watches.lock().expect("never poisoned").iter() {
            let since = w.failing_since_ms.load(Ordering::Acquire);
            let failing = Duration::from_millis(now.saturating_sub(since));
            if since != NOT_FAILING && failing >= grace {
                let kind = *w.last_error.lock().expect("never poisoned");
                found.push(format!("watch of {} failing for {}s (last error: {kind})", w.name, failing.as_secs()));
            }
        }
        if found.is_empty() { Ok(()) } else { Err(found.join("; ")) }
    }

    fn publish(&self) {
        self.meters.ready(self.readiness().is_ok());
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
        let _ = self.state().initial_syncs_pending.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
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
        let was = self.state().sink.swap(state, Ordering::AcqRel);
        if was == UNREACHABLE && connected {
            // After an outage the client gets the whole stall timeout to deliver again.
            self.progressed();
        }
        let changed = was != state;
        self.health.meters.reachable(self.index, connected);
        self.health.publish();
        changed
    }
}

impl WatchHealth {
    /// The watch failed with an error of `kind` (a bounded label, e.g. `forbidden`); it
    /// keeps retrying. Its errors last from the first one after it last worked.
    pub fn failed(&self, kind: &'static str) {
        *self.state.last_error.lock().expect("never poisoned") = kind;
        let now = self.health.progressed_ms();
        let _ = self.state.failing_since_ms.compare_exchange(NOT_FAILING, now, Ordering::AcqRel, Ordering::Acquire);
        self.health.publish();
    }

    /// The watch works: it delivered an event or completed a list. Cheap when it was not
    /// failing (called for every event).
    pub fn worked(&self) {
        if self.state.failing_since_ms.load(Ordering::Acquire) != NOT_FAILING {
            self.state.failing_since_ms.store(NOT_FAILING, Ordering::Release);
            self.health.publish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn alive_unless_events_wait_without_acknowledgement_for_the_stall_timeout() {
        let h = Health::new(vec![("default".into(), 0)], Some(Duration::from_millis(50)), None);
        let r = h.route(0);
        tokio::time::advance(Duration::from_millis(60)).await;
        assert!(h.liveness().is_ok(), "idle is not stalled");
        r.set_outstanding(3);
        assert!(h.liveness().is_ok());
        tokio::time::advance(Duration::from_millis(49)).await;
        assert!(h.liveness().is_ok(), "1 ms before the stall timeout");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(h.liveness().unwrap_err().contains("3 event(s)"), "stalled at the timeout");
        r.progressed();
        assert!(h.liveness().is_ok());
        assert!(Health::single(0).liveness().is_ok(), "no timeout, never stalled");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sink_outage_is_not_ready_but_alive_and_the_stall_timeout_starts_again_after_it() {
        let h = Health::new(vec![("default".into(), 0)], Some(Duration::from_millis(50)), None);
        let r = h.route(0);
        r.set_sink_connected(true);
        r.set_outstanding(3);
        tokio::time::advance(Duration::from_millis(30)).await;
        r.set_sink_connected(false);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(h.liveness().is_ok(), "events wait, but the brokers are down: a restart would not help");
        assert_eq!(h.readiness().unwrap_err(), "the sink is not reachable");
        r.set_sink_connected(true);
        assert_eq!(h.readiness(), Ok(()), "reachable again");
        tokio::time::advance(Duration::from_millis(49)).await;
        assert!(h.liveness().is_ok(), "the client has the whole stall timeout after the outage");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(h.liveness().unwrap_err().contains("3 event(s) not acknowledged"), "reachable and still stuck: stalled");
    }

    #[tokio::test(start_paused = true)]
    async fn ready_only_when_synced_and_connected() {
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

    #[tokio::test(start_paused = true)]
    async fn each_route_is_reported_by_name() {
        let h = Health::new(vec![("audit".into(), 1), ("trigger".into(), 1)], Some(Duration::from_millis(10)), None);
        let (audit, trigger) = (h.route(0), h.route(1));
        audit.set_sink_connected(true);
        audit.initial_sync_delivered();
        trigger.set_sink_connected(false);
        assert_eq!(h.readiness().unwrap_err(), "route trigger: the sink is not reachable; 1 initial sync(s) not yet delivered");
        trigger.set_sink_connected(true);
        trigger.initial_sync_delivered();
        assert_eq!(h.readiness(), Ok(()));
        trigger.set_outstanding(1);
        tokio::time::advance(Duration::from_millis(20)).await;
        let stalled = h.liveness().unwrap_err();
        assert!(stalled.starts_with("route trigger: 1 event(s)"), "{stalled}");
        h.set_standby(true);
        assert_eq!(h.readiness(), Ok(()), "a standby is ready");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_longer_than_the_grace_is_not_ready_until_it_works_again() {
        let h = Health::new(vec![("default".into(), 0)], None, Some(Duration::from_millis(50)));
        h.route(0).set_sink_connected(true);
        let pods = h.watch("pods".into());
        let cms = h.watch("configmaps in namespace shop".into());
        pods.worked();
        cms.failed("connection");
        cms.failed("forbidden");
        assert_eq!(h.readiness(), Ok(()), "within the grace");
        tokio::time::advance(Duration::from_millis(49)).await;
        assert_eq!(h.readiness(), Ok(()), "1 ms before the grace ends");
        tokio::time::advance(Duration::from_millis(1)).await;
        cms.failed("forbidden");
        let why = h.readiness().unwrap_err();
        assert!(why.starts_with("watch of configmaps in namespace shop failing for 0s (last error: forbidden)"), "{why}");
        assert!(!why.contains("pods"), "{why}");
        cms.worked();
        assert_eq!(h.readiness(), Ok(()), "recovered");
        cms.failed("not_found");
        assert_eq!(h.readiness(), Ok(()), "a new streak starts its own grace");
        h.set_standby(true);
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(h.readiness(), Ok(()), "a standby is ready");
        h.set_standby(false);
        assert!(h.readiness().unwrap_err().contains("(last error: not_found)"));
        let never = Health::single(0);
        never.route(0).set_sink_connected(true);
        never.watch("pods".into()).failed("forbidden");
        assert_eq!(never.readiness(), Ok(()), "no grace: watches never make it not ready");
    }
}
