//! Readiness: every initial sync delivered, and the sink reachable.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The sink's reachability: not probed yet, reachable, unreachable.
const UNKNOWN: u8 = 0;
const REACHABLE: u8 = 1;
const UNREACHABLE: u8 = 2;

#[derive(Debug)]
pub struct Health {
    /// When delivery last made progress (an acknowledgement), and how many events wait for
    /// one: /healthz fails when events wait and nothing was acknowledged for `stall`.
    started: Instant,
    progress_ms: AtomicU64,
    outstanding: AtomicUsize,
    stall: Option<Duration>,
    initial_syncs_pending: AtomicUsize,
    sink: AtomicU8,
    /// A standby replica (leader election, not the leader) is ready: it is healthy and
    /// waiting, and rollouts must not wait for it to lead.
    standby: AtomicBool,
}

impl Health {
    pub fn new(watches: usize) -> Health {
        Health::with_stall_timeout(watches, None)
    }

    /// `stall`: after how long without any acknowledgement, while events wait, the bridge
    /// counts as stuck (None: never).
    pub fn with_stall_timeout(watches: usize, stall: Option<Duration>) -> Health {
        Health {
            started: Instant::now(),
            progress_ms: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            stall,
            initial_syncs_pending: AtomicUsize::new(watches),
            sink: AtomicU8::new(UNKNOWN),
            standby: AtomicBool::new(false),
        }
    }

    /// The sink acknowledged the `sync.completed` of one watch's initial sync.
    pub fn initial_sync_delivered(&self) {
        let _ = self
            .initial_syncs_pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        self.publish();
    }

    /// The sink acknowledged an event.
    pub fn progressed(&self) {
        self.progress_ms.store(self.started.elapsed().as_millis() as u64, Ordering::Release);
    }

    /// Events sent or held, not yet acknowledged.
    pub fn set_outstanding(&self, n: usize) {
        if n > 0 && self.outstanding.load(Ordering::Acquire) == 0 {
            // Waiting starts now: an idle bridge is never stalled.
            self.progressed();
        }
        self.outstanding.store(n, Ordering::Release);
    }

    /// `Ok` while alive; an error when events have waited for the stall timeout without any
    /// acknowledgement (the client is stuck: a restart re-delivers with an initial sync).
    pub fn liveness(&self) -> Result<(), String> {
        let Some(stall) = self.stall else { return Ok(()) };
        let waiting = self.outstanding.load(Ordering::Acquire);
        let since = self.started.elapsed().saturating_sub(Duration::from_millis(self.progress_ms.load(Ordering::Acquire)));
        if waiting > 0 && since >= stall {
            Err(format!("{waiting} event(s) not acknowledged for {}s", since.as_secs()))
        } else {
            Ok(())
        }
    }

    /// Records whether the sink is reachable; returns true when that changed (the first
    /// probe always does, so a sink that is down from the start is reported too).
    pub fn set_sink_connected(&self, connected: bool) -> bool {
        let state = if connected { REACHABLE } else { UNREACHABLE };
        let changed = self.sink.swap(state, Ordering::AcqRel) != state;
        self.publish();
        changed
    }

    pub fn set_standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::Release);
        metrics::gauge!(super::metrics::LEADER).set(if standby { 0.0 } else { 1.0 });
        self.publish();
    }

    fn initial_syncs_pending(&self) -> usize {
        self.initial_syncs_pending.load(Ordering::Acquire)
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.standby.load(Ordering::Acquire) {
            return Ok(());
        }
        let pending = self.initial_syncs_pending();
        let connected = self.sink.load(Ordering::Acquire) == REACHABLE;
        match (pending, connected) {
            (0, true) => Ok(()),
            (0, false) => Err("the sink is not reachable".into()),
            (n, true) => Err(format!("{n} initial sync(s) not yet delivered")),
            (n, false) => Err(format!("the sink is not reachable; {n} initial sync(s) not yet delivered")),
        }
    }

    fn publish(&self) {
        metrics::gauge!(super::metrics::READY).set(if self.readiness().is_ok() { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alive_unless_events_wait_without_acknowledgement_for_the_stall_timeout() {
        let h = Health::with_stall_timeout(0, Some(Duration::from_millis(50)));
        std::thread::sleep(Duration::from_millis(60));
        assert!(h.liveness().is_ok(), "idle is not stalled");
        h.set_outstanding(3);
        assert!(h.liveness().is_ok());
        std::thread::sleep(Duration::from_millis(60));
        assert!(h.liveness().unwrap_err().contains("3 event(s)"));
        h.progressed();
        assert!(h.liveness().is_ok());
        assert!(Health::new(0).liveness().is_ok(), "no timeout, never stalled");
    }

    #[test]
    fn ready_only_when_synced_and_connected() {
        let h = Health::new(2);
        assert!(h.readiness().unwrap_err().contains("2 initial"));
        assert!(h.set_sink_connected(true), "the first probe is a change");
        assert!(!h.set_sink_connected(true));
        h.initial_sync_delivered();
        h.initial_sync_delivered();
        h.initial_sync_delivered();
        assert_eq!(h.readiness(), Ok(()));
        assert!(h.set_sink_connected(false));
        assert_eq!(h.readiness().unwrap_err(), "the sink is not reachable");
        assert!(Health::new(0).set_sink_connected(false), "down from the start is a change");
    }
}
