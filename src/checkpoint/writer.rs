//! The writer of one route's checkpoint: what its progress recorded, written to its store
//! on an interval and once more when stopping; records a write could not store are kept
//! and written first next time, so nothing is skipped and the order holds.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Progress, Records, Seal, Store};
use crate::telemetry::metrics as m;

pub struct Writer {
    pub store: Arc<Store>,
    pub progress: Arc<Progress>,
    pub interval: Duration,
    /// What every record is sealed with before it is written.
    pub seal: Seal,
    /// The `route` metric label.
    pub route: String,
}

impl Writer {
    /// Writes until `stop`, then once more (the final progress of a drained route).
    pub async fn run(self, stop: CancellationToken) {
        let mut unwritten: Records = Vec::new();
        let mut failing = false;
        let pending = metrics::gauge!(m::CHECKPOINT_PENDING, "route" => self.route.clone());
        let behind = metrics::gauge!(m::CHECKPOINT_UNWRITTEN, "route" => self.route.clone());
        let report = |progress: &Progress, unwritten: &Records| {
            let (events, records) = progress.backlog();
            pending.set(events as f64);
            behind.set((records + unwritten.len()) as f64);
        };
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = tokio::time::sleep(self.interval) => false,
            };
            unwritten.extend(self.progress.take().into_iter().map(|(key, value)| {
                let value = value.map(|v| self.seal.seal(&key, v));
                (key, value)
            }));
            // Reported before the write too: a write in flight is not written yet.
            report(&self.progress, &unwritten);
            if !unwritten.is_empty() {
                match self.store.write(&unwritten).await {
                    Ok(()) => {
                        metrics::counter!(m::CHECKPOINT_WRITES, "route" => self.route.clone(), "outcome" => "ok").increment(1);
                        metrics::counter!(m::CHECKPOINT_RECORDS, "route" => self.route.clone()).increment(unwritten.len() as u64);
                        if std::mem::take(&mut failing) {
                            tracing::info!(route = %self.route, "Checkpoint written again");
                        }
                        unwritten.clear();
                    }
                    Err(e) => {
                        metrics::counter!(m::CHECKPOINT_WRITES, "route" => self.route.clone(), "outcome" => "failed").increment(1);
                        if !std::mem::replace(&mut failing, true) || stopping {
                            tracing::warn!(route = %self.route, error = %e, records = unwritten.len(), "Cannot write the checkpoint; retrying (a restart meanwhile resumes from an older checkpoint and re-delivers)");
                        }
                    }
                }
            }
            report(&self.progress, &unwritten);
            if stopping {
                return;
            }
        }
    }
}
