//! Readiness: every initial sync delivered, and the sink reachable.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// The sink's reachability: not probed yet, reachable, unreachable.
const UNKNOWN: u8 = 0;
const REACHABLE: u8 = 1;
const UNREACHABLE: u8 = 2;

#[derive(Debug)]
pub struct Health {
    initial_syncs_pending: AtomicUsize,
    sink: AtomicU8,
    /// A standby replica (leader election, not the leader) is ready: it is healthy and
    /// waiting, and rollouts must not wait for it to lead.
    standby: AtomicBool,
}

impl Health {
    pub fn new(watches: usize) -> Health {
        Health {
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

    pub fn initial_syncs_pending(&self) -> usize {
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
