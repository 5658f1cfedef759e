//! Wires the stages with a bounded queue per route; owns start-up checks, backpressure
//! and the shutdown order.

mod dispatch;
mod meters;
mod resume;
mod retry;
mod sequencer;
mod startup;
mod tail;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::checkpoint;
use crate::config::{Config, SinkConfig};
use crate::leader::{Elector, LeaderError};
use crate::plan;
use crate::sink::{Publisher, Sink, SinkError};
use crate::telemetry::{self, Health, RouteHealth};
use crate::watch::{self, access::AccessError, client::ClientError, discovery::DiscoveryError};

pub use dispatch::{DispatchError, Dispatcher};
pub use retry::RetryPolicy;
pub use startup::{Started, start};
pub use worker::Worker;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("API server unreachable: {0}")]
    ApiServer(#[source] kube::Error),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error("{at}: {source}")]
    Sink { at: String, source: SinkError },
    #[error(transparent)]
    Http(#[from] telemetry::HttpError),
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    #[error("resume.key_file: {0}")]
    CheckpointKey(#[source] crate::config::DigestKeyError),
    #[error("cannot listen for signals: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("leadership lost: stopped publishing; restart to stand by again")]
    LeadershipLost,
    #[error("the task `{task}` panicked ({message}); stopped: this is a bug, please report it")]
    TaskPanicked { task: String, message: String },
}

/// The names of spawned tasks by id, so that a panic names its task.
#[derive(Default)]
struct TaskNames(HashMap<tokio::task::Id, String>);

impl TaskNames {
    fn spawn<T: Send + 'static>(&mut self, set: &mut JoinSet<T>, name: String, task: impl Future<Output = T> + Send + 'static) {
        self.0.insert(set.spawn(task).id(), name);
    }

    /// The result of a joined task; a panic (or an abort, outside shutdown) as an error
    /// naming it.
    fn joined<T>(&self, joined: Result<(tokio::task::Id, T), JoinError>) -> Result<T, RunError> {
        joined.map(|(_, t)| t).map_err(|e| {
            let task = self.0.get(&e.id()).cloned().unwrap_or_else(|| "unnamed".into());
            let message = if e.is_panic() {
                let payload = e.into_panic();
                payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned()).unwrap_or_default()
            } else {
                "cancelled".into()
            };
            RunError::TaskPanicked { task, message }
        })
    }

    /// Waits for the first of `set`'s tasks to panic (tasks that end normally are let go);
    /// never returns while none does.
    async fn first_panic<T: 'static>(&self, set: &mut JoinSet<T>) -> RunError {
        loop {
            match set.join_next_with_id().await {
                Some(joined) => {
                    if let Err(e) = self.joined(joined) {
                        return e;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
    }
}

/// How often the sink's reachability is probed for /readyz: often until it is reachable
/// (a client connecting in the background becomes ready within a second or two), then
/// less often.
const PROBE_UNTIL_REACHABLE: Duration = Duration::from_secs(1);
const PROBE_WHILE_REACHABLE: Duration = Duration::from_secs(10);
/// How long the start waits for the routes' first checkpoint writes before it ships.
const FIRST_WRITE_FOR: Duration = Duration::from_secs(10);

/// Runs the bridge until SIGTERM/SIGINT (or `stop`), then drains within the configured
/// timeout. Start-up problems (credentials, unknown kinds, missing RBAC, sink config) are
/// errors before anything is watched.
pub async fn run(config: Config, stop: CancellationToken) -> Result<(), RunError> {
    // Signals cancel `stop` from the very start, so that start-up waits (a broker that is
    // not up yet) end on SIGTERM too.
    forward_signals(stop.clone())?;
    let metrics = telemetry::install_recorder()?;
    let mut report = |step: Result<&str, &RunError>| {
        if let Ok(passed) = step {
            tracing::debug!("{passed}");
        }
    };
    let started = start(&config, &mut report);
    // An API server that does not answer holds each start-up step up to the client's
    // timeouts: a SIGTERM meanwhile ends the start-up at once (nothing is watched yet).
    let Started { client, scopes } = tokio::select! {
        started = started => started?,
        () = stop.cancelled() => {
            tracing::info!("Stopped during start-up, before anything was watched");
            return Ok(());
        }
    };
    let routes = config.effective_routes();
    let mut sinks = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        sinks.push(Sink::from_config(&route.sink).await.map_err(|source| RunError::Sink { at: sink_key(&config, i), source })?);
    }

    let stall = Some(Duration::from_secs(config.delivery.stall_timeout_secs)).filter(|d| !d.is_zero());
    let watch_grace = Some(Duration::from_secs(config.kubernetes.watch_failure_grace_secs)).filter(|d| !d.is_zero());
    let health = Health::new(routes.iter().enumerate().map(|(i, r)| (r.name.clone(), plan::watches_of(&scopes, i))).collect(), stall, watch_grace);
    let http_stop = CancellationToken::new();
    let request_timeout = Duration::from_secs(config.http.request_timeout_secs);
    let http = telemetry::serve(config.http.listen, config.http.max_connections, request_timeout, metrics, health.clone(), http_stop.clone()).await?;
    // Every task is joined: a panic in any of them stops the bridge with an error naming it.
    let mut names = TaskNames::default();
    let mut background = JoinSet::new();
    for (i, sink) in sinks.iter().enumerate() {
        let route = &routes[i].name;
        names.spawn(&mut background, format!("sink probe of route {route}"), probe_sink(sink.clone(), health.route(i), http_stop.clone()));
        names.spawn(&mut background, format!("sink supervisor of route {route}"), sink.clone().supervise(route.clone(), http_stop.clone()));
    }
    names.spawn(&mut background, "memory trim".into(), crate::memory::trim_periodically(http_stop.clone()));

    // With leader election, only the leader goes on; it starts with a full initial sync.
    let lost = CancellationToken::new();
    let elector = config.leader_election.enabled.then(|| Arc::new(Elector::new(client.clone(), &config.leader_election)));
    if let Some(elector) = &elector {
        health.set_standby(true);
        if !elector.acquire(&stop).await? {
            http_stop.cancel();
            let _ = http.await;
            return Ok(());
        }
        health.set_standby(false);
        let (elector, stop, lost) = (elector.clone(), stop.clone(), lost.clone());
        names.spawn(&mut background, "leader election".into(), async move { elector.hold(&stop, &lost).await });
    }

    // A new leader claims its routes before it reads what they hold (sink::fence): from
    // here on, nothing a deposed leader still sends is stored.
    let retry = RetryPolicy { initial: Duration::from_millis(config.delivery.retry_initial_ms), max: Duration::from_millis(config.delivery.retry_max_ms) };
    if let Some(elector) = elector.as_ref().filter(|_| config.leader_election.fence) {
        let (namespace, name, holder) = elector.lease();
        let lease = crate::sink::fence::Lease { cluster: config.cluster.clone(), namespace: namespace.into(), name: name.into(), holder: holder.into() };
        // A replica that lost the lease while it waited for a broker must not fence its
        // successor: claiming ends with the lease too.
        let claiming = stop.child_token();
        let on_lost = tokio::spawn({
            let (lost, claiming) = (lost.clone(), claiming.clone());
            async move {
                lost.cancelled().await;
                claiming.cancel()
            }
        });
        for (i, (route, sink)) in routes.iter().zip(&sinks).enumerate() {
            let delivery = Delivery { sink: sink.clone(), config: route.sink.clone(), at: sink_key(&config, i), topics: plan::topics(&scopes, i), retry };
            if !delivery.claim(&lease, &route.name, &claiming).await? {
                on_lost.abort();
                http_stop.cancel();
                let _ = http.await;
                return if lost.is_cancelled() { Err(RunError::LeadershipLost) } else { Ok(()) };
            }
        }
        on_lost.abort();
    }

    // Where each watch starts: the routes' checkpoints, read once leading.
    let key = config.resume.key_file.as_deref().map(crate::config::read_digest_key).transpose().map_err(RunError::CheckpointKey)?;
    let seal = checkpoint::Seal::new(key.as_deref());
    let starts = resume::load(&config, &seal, &client, &routes, &scopes, retry, &stop).await;
    let checkpoint_stop = CancellationToken::new();
    let mut writers = JoinSet::new();
    let mut first_writes = Vec::new();
    for (route, tracked) in routes.iter().zip(&starts.routes) {
        let Some((store, progress)) = tracked else { continue };
        let interval = Duration::from_millis(config.resume.interval_ms);
        let (first, written) = tokio::sync::oneshot::channel();
        first_writes.push(written);
        let writer = checkpoint::Writer {
            store: store.clone(),
            progress: progress.clone(),
            interval,
            seal: seal.clone(),
            route: route.name.clone(),
            first: Some(first),
        };
        names.spawn(&mut writers, format!("checkpoint writer of route {}", route.name), writer.run(checkpoint_stop.clone()));
    }
    // The start's records stored before anything is shipped (a store that does not answer
    // holds the start back for FIRST_WRITE_FOR at most).
    if tokio::time::timeout(FIRST_WRITE_FOR, futures::future::join_all(first_writes)).await.is_err() {
        tracing::warn!(
            "The first checkpoint write did not finish within {FIRST_WRITE_FOR:?}; shipping starts all the same (a crash before it is written restarts with a full sync)"
        );
    }

    // Each route: its own bounded queue, then its sink's preparation and dispatcher, so
    // that a route whose sink is down holds back the others by its queue at most.
    let mut queues = Vec::new();
    let mut deliveries = JoinSet::new();
    for (i, (route, sink)) in routes.iter().zip(&sinks).enumerate() {
        let (tx, rx) = mpsc::channel(config.delivery.queue_capacity);
        queues.push(tx);
        let delivery = Delivery { sink: sink.clone(), config: route.sink.clone(), at: sink_key(&config, i), topics: plan::topics(&scopes, i), retry };
        let mut dispatcher = Dispatcher::new(sink.clone(), config.delivery.max_in_flight, config.delivery.oversize, retry, health.route(i));
        if let Some((_, progress)) = &starts.routes[i] {
            dispatcher = dispatcher.with_progress(progress.clone());
        }
        let stop = stop.clone();
        names.spawn(&mut deliveries, format!("delivery of route {}", route.name), async move {
            if !delivery.prepare(&stop).await? {
                return Ok(());
            }
            dispatcher.run(rx).await.map_err(RunError::from)
        });
    }

    let watch_stop = CancellationToken::new();
    let cluster: Arc<str> = config.cluster.as_str().into();
    let mut watches = JoinSet::new();
    let progress = starts.progress();
    for ((slot, scope), (resume, continue_from)) in scopes.into_iter().enumerate().zip(starts.watches) {
        let observed = watch::observe(client.clone(), &scope, &config.kubernetes, continue_from);
        let name = format!("watch of {}", scope.describe());
        let worker = Worker {
            cluster: cluster.clone(),
            health: health.watch(scope.describe()),
            queues: queues.clone(),
            scope,
            slot,
            progress: progress.clone(),
            resume,
        };
        names.spawn(&mut watches, name, worker.run(observed, watch_stop.clone()));
    }
    // The watches hold the only senders: a route's queue closes when they end.
    drop(queues);
    let sink_names: Vec<&str> = sinks.iter().map(Publisher::name).collect();
    if !stop.is_cancelled() {
        tracing::info!(watches = watches.len(), routes = routes.len(), sinks = ?sink_names, "deltaship started");
    }

    let result = tokio::select! {
        Some(r) = deliveries.join_next_with_id() => Some(names.joined(r).and_then(|r| r)),
        e = names.first_panic(&mut watches) => Some(Err(e)),
        e = names.first_panic(&mut background) => Some(Err(e)),
        e = names.first_panic(&mut writers) => Some(Err(e)),
        _ = stop.cancelled() => None,
        _ = lost.cancelled() => {
            // Another replica may take over soon: stop publishing now, without draining,
            // and leave the checkpoint to it.
            watch_stop.cancel();
            deliveries.abort_all();
            writers.abort_all();
            for sink in &sinks {
                sink.purge();
            }
            http_stop.cancel();
            return Err(RunError::LeadershipLost);
        }
    };
    // Shutdown in one place: stop the watches, let the queues drain, flush the sinks.
    watch_stop.cancel();
    let mut outcome = result.unwrap_or(Ok(()));
    while let Some(joined) = watches.join_next_with_id().await {
        if let (Ok(()), Err(e)) = (&outcome, names.joined(joined)) {
            outcome = Err(e);
        }
    }
    let timeout = Duration::from_secs(config.delivery.shutdown_timeout_secs);
    let drained = tokio::time::timeout(timeout, async {
        while let Some(joined) = deliveries.join_next_with_id().await {
            let r = names.joined(joined).and_then(|r| r);
            if outcome.is_ok() {
                outcome = r;
            }
        }
    })
    .await;
    if drained.is_err() {
        deliveries.abort_all();
        tracing::error!(
            timeout_secs = timeout.as_secs(),
            "Queued events not delivered within the shutdown timeout; they are re-delivered by the next run's initial sync"
        );
    }
    for sink in &sinks {
        if let Err(e) = sink.flush(Duration::from_secs(5)).await {
            tracing::warn!(sink = sink.name(), error = %e, "Final flush of the sink failed");
        }
    }
    // What was acknowledged, written before the lease goes: a replica taking over resumes
    // from it.
    checkpoint_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(10), async { while writers.join_next().await.is_some() {} }).await.is_err() {
        tracing::warn!("The last checkpoint write did not finish within 10 s; the next start resumes from an older checkpoint");
    }
    if let Some(elector) = &elector {
        elector.release().await;
    }
    http_stop.cancel();
    let _ = http.await;
    tracing::info!("deltaship stopped");
    outcome
}

/// The configuration key of route `i`'s sink, for errors: `sink` without `routes`, else
/// `routes[i].sink (name)`.
fn sink_key(config: &Config, i: usize) -> String {
    match config.routes.get(i) {
        Some(route) => format!("routes[{i}].sink ({})", route.name),
        None => "sink".into(),
    }
}

/// Cancels `stop` on SIGTERM or SIGINT.
fn forward_signals(stop: CancellationToken) -> Result<(), RunError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(RunError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RunError::Signals)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; draining"),
            _ = int.recv() => tracing::info!("SIGINT received; draining"),
            _ = stop.cancelled() => return,
        }
        stop.cancel();
    });
    Ok(())
}

/// What a route's delivery task needs to prepare its sink.
struct Delivery {
    sink: Sink,
    config: SinkConfig,
    /// The sink's configuration key, for logs and errors.
    at: String,
    topics: Vec<String>,
    retry: RetryPolicy,
}

impl Delivery {
    /// Prepares the sink's destinations (topics, stream), retrying while the brokers
    /// cannot be reached: an unreachable broker keeps the route not ready, never crashes
    /// the bridge. False when stopped before the sink was ready.
    async fn prepare(&self, stop: &CancellationToken) -> Result<bool, RunError> {
        self.retrying(stop, "Cannot prepare the sink yet; retrying with backoff", || self.sink.prepare(&self.config, &self.topics)).await
    }

    /// Prepares the route's destinations and claims them for this leader's term
    /// (sink::fence), retrying while the brokers cannot be reached. False when stopped first.
    async fn claim(&self, lease: &crate::sink::fence::Lease, route: &str, stop: &CancellationToken) -> Result<bool, RunError> {
        if !self.prepare(stop).await? {
            return Ok(false);
        }
        let fence = || async { self.sink.fence(&self.config, lease, route).await.map_err(SinkError::Request) };
        self.retrying(stop, "Cannot fence the route yet; retrying with backoff (nothing is shipped before)", fence).await
    }

    /// `attempt` until it succeeds (true), fails for good (the error), or `stop` (false);
    /// retryable failures wait the retry policy's backoff, the first logged as `warning`.
    async fn retrying<F: Future<Output = Result<(), SinkError>>>(
        &self,
        stop: &CancellationToken,
        warning: &str,
        attempt: impl Fn() -> F,
    ) -> Result<bool, RunError> {
        let mut failures = 0;
        loop {
            match attempt().await {
                Ok(()) => return Ok(true),
                Err(e) if e.is_retryable() => {
                    if failures == 0 {
                        tracing::warn!(sink = self.sink.name(), at = %self.at, error = %e, "{warning}");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(self.retry.delay(failures)) => {}
                        _ = stop.cancelled() => return Ok(false),
                    }
                    failures += 1;
                }
                Err(source) => return Err(RunError::Sink { at: self.at.clone(), source }),
            }
        }
    }
}

/// Probes the sink periodically; logs once per change of state.
async fn probe_sink(sink: Sink, health: RouteHealth, stop: CancellationToken) {
    let mut next = PROBE_UNTIL_REACHABLE;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(next) => {}
        }
        let result = sink.probe().await;
        next = if result.is_ok() { PROBE_WHILE_REACHABLE } else { PROBE_UNTIL_REACHABLE };
        if health.set_sink_connected(result.is_ok()) {
            match result {
                Ok(()) => tracing::info!(sink = sink.name(), route = health.name(), "Sink reachable"),
                Err(e) => tracing::warn!(sink = sink.name(), route = health.name(), error = %e, "Sink unreachable; retrying"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_an_error_naming_it_and_tasks_that_end_are_let_go() {
        let mut names = TaskNames::default();
        let mut set = JoinSet::new();
        names.spawn(&mut set, "ends".into(), async {});
        names.spawn(&mut set, "watch of configmaps".into(), async {
            tokio::task::yield_now().await;
            panic!("overflow when adding duration to instant");
        });
        match names.first_panic(&mut set).await {
            RunError::TaskPanicked { task, message } => {
                assert_eq!(task, "watch of configmaps");
                assert_eq!(message, "overflow when adding duration to instant");
            }
            other => panic!("expected a panic, got {other}"),
        }
        names.spawn(&mut set, "delivery".into(), async { panic!("{}", String::from("formatted")) });
        let e = names.joined(set.join_next_with_id().await.unwrap()).unwrap_err().to_string();
        assert!(e.contains("the task `delivery` panicked (formatted)"), "{e}");
        let pending = tokio::time::timeout(Duration::from_millis(50), names.first_panic(&mut set)).await;
        assert!(pending.is_err(), "no task left: waits");
    }
}
