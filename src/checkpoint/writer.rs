//! The writer of one route's checkpoint: what its progress recorded, written to its store
//! on an interval and once more when stopping; records a write could not store are kept
//! and written first next time, so nothing is skipped and the order holds. A store that
//! could not be read at start-up is opened as soon as it can be.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::holder::{Holder, now_ms};
use super::store::Refusal;
use super::{Progress, Records, Seal, Store};
use crate::config::{ResumeConfig, SinkConfig};
use crate::telemetry::meters::CheckpointMeters;

/// Where a route's checkpoint is written.
#[derive(Clone)]
pub enum Destination {
    Open(Arc<Store>),
    /// The store could not be read at start-up: the writer opens it once it can, deletes
    /// the old records of the watches it tracks (they started with full syncs) and then
    /// writes everything recorded since the start. `prefix` is the route's key prefix.
    Later {
        sink: Box<SinkConfig>,
        resume: Box<ResumeConfig>,
        route: String,
        prefix: String,
    },
}

/// How long one attempt to open a store that was down may take.
const OPEN_FOR: Duration = Duration::from_secs(30);

impl Destination {
    /// The open store, opening it first if need be: with the records that must go before
    /// anything else (the deletes of the old records). `None` while it cannot be opened.
    async fn open(&mut self, progress: &Progress, route: &str) -> Option<(Arc<Store>, Records)> {
        match self {
            Destination::Open(store) => Some((store.clone(), Vec::new())),
            Destination::Later { sink, resume, route: name, prefix } => {
                let opened = tokio::time::timeout(OPEN_FOR, async {
                    let store = Store::open(sink, resume, name)
                        .await?
                        .ok_or_else(|| super::StoreError::Refused { store: format!("route {name}"), reason: Refusal::NoCheckpoint })?;
                    let old = store.load(prefix).await?;
                    Ok::<_, super::StoreError>((store, old))
                })
                .await;
                match opened {
                    Ok(Ok((store, old))) => {
                        let watches: Vec<String> = progress.prefixes().into_iter().map(|p| format!("{p}.")).collect();
                        let mut clear: Records = old.into_keys().filter(|k| watches.iter().any(|w| k.starts_with(w))).map(|k| (k, None)).collect();
                        clear.sort();
                        tracing::info!(route, cleared = clear.len(), "The checkpoint store can be read again; checkpointing from now on");
                        let store = Arc::new(store);
                        *self = Destination::Open(store.clone());
                        Some((store, clear))
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(route, error = %e, "The checkpoint store still cannot be read");
                        None
                    }
                    Err(_) => None,
                }
            }
        }
    }
}

pub struct Checkpointer {
    pub store: Destination,
    pub progress: Arc<Progress>,
    pub interval: Duration,
    /// What every record is sealed with before it is written.
    pub seal: Seal,
    /// The `route` metric label.
    pub route: String,
    /// The route's holder record (`checkpoint::holder`) and its key: renewed as it says,
    /// released when stopping.
    pub holder: (String, Holder),
    /// Told once the first write was tried, which the writer makes at once: a start's
    /// records (where each watch's log ends, what its log's tail taught) are then stored
    /// before the watches ship anything, so a crash at any moment leaves a checkpoint that
    /// says where to read what was delivered.
    pub first: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Checkpointer {
    /// Writes until `stop`, then once more (the final progress of a drained route).
    pub async fn run(mut self, stop: CancellationToken) {
        let mut unwritten: Records = Vec::new();
        let mut failing = false;
        let mut meters = CheckpointMeters::new(&self.route);
        let report = |meters: &CheckpointMeters, progress: &Progress, unwritten: &Records| {
            let (events, records) = progress.backlog();
            meters.backlog(events, records + unwritten.len());
        };
        let mut wait = Duration::ZERO;
        let mut renewed: Option<Instant> = None;
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = tokio::time::sleep(wait) => false,
            };
            wait = self.interval;
            // Until the store can be opened, the progress keeps what changed (the latest
            // state of each object): nothing is taken from it.
            let Some((store, first)) = self.store.open(&self.progress, &self.route).await else {
                self.first.take().map(|tell| tell.send(()));
                report(&meters, &self.progress, &unwritten);
                if stopping {
                    tracing::warn!(route = %self.route, "Stopping without a checkpoint: its store could not be read all along (the next start begins with a full sync)");
                    return;
                }
                continue;
            };
            unwritten.extend(first);
            let (key, holder) = &self.holder;
            if stopping || renewed.is_none_or(|at| at.elapsed().as_millis() as u64 >= holder.renew_ms) {
                let written = Holder { written_ms: now_ms(), released: stopping, ..holder.clone() };
                // Only the newest renewal is worth writing.
                unwritten.retain(|(k, _)| k != key);
                unwritten.push((key.clone(), Some(self.seal.seal(key, serde_json::to_vec(&written).unwrap_or_default()))));
                renewed = Some(Instant::now());
            }
            unwritten.extend(self.progress.take().into_iter().map(|(key, value)| {
                let value = value.map(|v| self.seal.seal(&key, v));
                (key, value)
            }));
            // Reported before the write too: a write in flight is not written yet.
            report(&meters, &self.progress, &unwritten);
            if !unwritten.is_empty() {
                match store.write(&unwritten).await {
                    Ok(()) => {
                        meters.written(unwritten.len());
                        if std::mem::take(&mut failing) {
                            tracing::info!(route = %self.route, "Checkpoint written again");
                        }
                        unwritten.clear();
                    }
                    Err(e) => {
                        meters.failed();
                        if !std::mem::replace(&mut failing, true) || stopping {
                            tracing::warn!(route = %self.route, error = %e, records = unwritten.len(), "Cannot write the checkpoint; retrying (a restart meanwhile resumes from an older checkpoint and re-delivers)");
                        }
                    }
                }
            }
            report(&meters, &self.progress, &unwritten);
            self.first.take().map(|tell| tell.send(()));
            if stopping {
                return;
            }
        }
    }
}
