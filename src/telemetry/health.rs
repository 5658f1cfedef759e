//! Readiness: every initial sync delivered, and the sink reachable.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[derive(Debug)]
pub struct Health {
    initial_syncs_pending: AtomicUsize,
    sink_connected: AtomicBool,
}

impl Health {
    pub fn new(watches: usize) -> Health {
        Health {
            initial_syncs_pending: AtomicUsize::new(watches),
            sink_connected: AtomicBool::new(false),
        }
    }

    /// The sink acknowledged the `sync.completed` of one watch's initial sync.
    pub fn initial_sync_delivered(&self) {
        let _ = self
            .initial_syncs_pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        self.publish();
    }

    /// Records whether the sink is reachable; returns true when that changed.
    pub fn set_sink_connected(&self, connected: bool) -> bool {
        let changed = self.sink_connected.swap(connected, Ordering::AcqRel) != connected;
        self.publish();
        changed
    }

    pub fn initial_syncs_pending(&self) -> usize {
        self.initial_syncs_pending.load(Ordering::Acquire)
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        let pending = self.initial_syncs_pending();
        let connected = self.sink_connected.load(Ordering::Acquire);
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
        assert!(h.set_sink_connected(true));
        assert!(!h.set_sink_connected(true));
        h.initial_sync_delivered();
        h.initial_sync_delivered();
        h.initial_sync_delivered();
        assert_eq!(h.readiness(), Ok(()));
        h.set_sink_connected(false);
        assert_eq!(h.readiness().unwrap_err(), "the sink is not reachable");
    }
}
