//! The bridge's run: start (checks, sinks, the HTTP server, leadership, checkpoints, the
//! deliveries and watches), run until stopped, and one shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::checkpoint;
use crate::config::{Config, RouteConfig};
use crate::leader::Elector;
use crate::plan;
use crate::sink::{Publisher, Sink};
use crate::telemetry::{self, Health};
use crate::watch;

use super::delivery::{SinkSetup, probe_sink, sink_key};
use super::dispatch::Dispatcher;
use super::error::RunError;
use super::resume;
use super::retry::RetryPolicy;
use super::startup::{Started, start};
use super::tasks::TaskNames;
use super::worker::Worker;

/// How long the start waits for the routes' first checkpoint writes before it ships.
const FIRST_WRITE_FOR: Duration = Duration::from_secs(10);

/// Runs the bridge until SIGTERM/SIGINT (or `stop`), then drains within the configured
/// timeout. Start-up problems (credentials, unknown kinds, missing RBAC, sink config) are
/// errors before anything is watched.
pub async fn run(config: Config, stop: CancellationToken) -> Result<(), RunError> {
    // Signals cancel `stop` from the very start, so that start-up waits (a broker that is
    // not up yet) end on SIGTERM too.
    forward_signals(stop.clone())?;
    let Some((mut bridge, started)) = Bridge::start(&config, &stop).await? else { return Ok(()) };
    let end = match bridge.begin(&config, started, &stop).await {
        Ok(true) => bridge.until_stopped(&stop).await,
        Ok(false) => End::BeforeLeading(Ok(())),
        Err(e) => End::BeforeLeading(Err(e)),
    };
    bridge.shutdown(end).await
}

/// What the bridge runs once its start-up checks passed: each of its tasks is joined, and
/// stopped in [`Bridge::shutdown`].
struct Bridge {
    routes: Vec<RouteConfig>,
    sinks: Vec<Sink>,
    health: Arc<Health>,
    /// The metrics and health server, stopped last.
    http: tokio::task::JoinHandle<()>,
    http_stop: CancellationToken,
    /// A panic in any task stops the bridge with an error naming it.
    names: TaskNames,
    /// The sinks' probes and supervisors, the memory trim, the lease's renewal.
    background: JoinSet<()>,
    elector: Option<Arc<Elector>>,
    /// Cancelled when this replica loses the lease.
    lost: CancellationToken,
    writers: JoinSet<()>,
    checkpoint_stop: CancellationToken,
    deliveries: JoinSet<Result<(), RunError>>,
    watches: JoinSet<()>,
    watch_stop: CancellationToken,
    shutdown_timeout: Duration,
}

/// How the run ended, which decides what the shutdown waits for.
enum End {
    /// Before anything was watched (standing by, or claiming the routes).
    BeforeLeading(Result<(), RunError>),
    /// Stopped (`Ok`) or failed while running: the queues drain and the sinks flush.
    Running(Result<(), RunError>),
    /// Another replica may take over soon: publishing stops at once, without draining.
    LeadershipLost,
}

impl Bridge {
    /// The start-up checks, the sinks and the metrics and health server, with the sinks'
    /// background tasks. None when stopped before anything was watched.
    async fn start(config: &Config, stop: &CancellationToken) -> Result<Option<(Bridge, Started)>, RunError> {
        let metrics = telemetry::install_recorder()?;
        let mut report = |step: Result<&str, &RunError>| {
            if let Ok(passed) = step {
                tracing::debug!("{passed}");
            }
        };
        let started = start(config, &mut report);
        // An API server that does not answer holds each start-up step up to the client's
        // timeouts: a SIGTERM meanwhile ends the start-up at once (nothing is watched yet).
        let started = tokio::select! {
            started = started => started?,
            () = stop.cancelled() => {
                tracing::info!("Stopped during start-up, before anything was watched");
                return Ok(None);
            }
        };
        let routes = config.effective_routes();
        let mut sinks = Vec::new();
        for (i, route) in routes.iter().enumerate() {
            sinks.push(Sink::from_config(&route.sink).await.map_err(|source| RunError::Sink { at: sink_key(config, i), source })?);
        }

        let stall = Some(Duration::from_secs(config.delivery.stall_timeout_secs)).filter(|d| !d.is_zero());
        let watch_grace = Some(Duration::from_secs(config.kubernetes.watch_failure_grace_secs)).filter(|d| !d.is_zero());
        let health = Health::new(routes.iter().enumerate().map(|(i, r)| (r.name.clone(), plan::watches_of(&started.scopes, i))).collect(), stall, watch_grace);
        let http_stop = CancellationToken::new();
        let request_timeout = Duration::from_secs(config.http.request_timeout_secs);
        let http = telemetry::serve(config.http.listen, config.http.max_connections, request_timeout, metrics, health.clone(), http_stop.clone()).await?;
        let mut names = TaskNames::default();
        let mut background = JoinSet::new();
        for (i, sink) in sinks.iter().enumerate() {
            let route = &routes[i].name;
            names.spawn(&mut background, format!("sink probe of route {route}"), probe_sink(sink.clone(), health.route(i), http_stop.clone()));
            names.spawn(&mut background, format!("sink supervisor of route {route}"), sink.clone().supervise(route.clone(), http_stop.clone()));
        }
        names.spawn(&mut background, "memory trim".into(), crate::memory::trim_periodically(http_stop.clone()));
        let bridge = Bridge {
            routes,
            sinks,
            health,
            http,
            http_stop,
            names,
            background,
            elector: None,
            lost: CancellationToken::new(),
            writers: JoinSet::new(),
            checkpoint_stop: CancellationToken::new(),
            deliveries: JoinSet::new(),
            watches: JoinSet::new(),
            watch_stop: CancellationToken::new(),
            shutdown_timeout: Duration::from_secs(config.delivery.shutdown_timeout_secs),
        };
        Ok(Some((bridge, started)))
    }

    /// With leader election, waits to lead and claims the routes; then starts the
    /// checkpoint writers, the deliveries and the watches. False when stopped first.
    async fn begin(&mut self, config: &Config, Started { client, scopes }: Started, stop: &CancellationToken) -> Result<bool, RunError> {
        // With leader election, only the leader goes on; it starts with a full initial sync.
        self.elector = config.leader_election.enabled.then(|| Arc::new(Elector::new(client.clone(), &config.leader_election)));
        if let Some(elector) = &self.elector {
            self.health.set_standby(true);
            if !elector.acquire(stop).await? {
                return Ok(false);
            }
            self.health.set_standby(false);
            let (elector, stop, lost) = (elector.clone(), stop.clone(), self.lost.clone());
            self.names.spawn(&mut self.background, "leader election".into(), async move { elector.hold(&stop, &lost).await });
        }

        let retry = RetryPolicy { initial: Duration::from_millis(config.delivery.retry_initial_ms), max: Duration::from_millis(config.delivery.retry_max_ms) };
        if let Some(elector) = self.elector.as_ref().filter(|_| config.leader_election.fence)
            && !self.claim(config, elector, &scopes, retry, stop).await?
        {
            return if self.lost.is_cancelled() { Err(RunError::LeadershipLost) } else { Ok(false) };
        }

        // Where each watch starts: the routes' checkpoints, read once leading.
        let key = config.resume.key_file.as_deref().map(crate::config::read_digest_key).transpose().map_err(RunError::CheckpointKey)?;
        let seal = checkpoint::Seal::new(key.as_deref());
        let patience = resume::Patience { retry, stop, health: &self.health };
        let starts = resume::load(config, &seal, &client, &self.routes, &scopes, &patience).await;
        let mut first_writes = Vec::new();
        for (route, tracked) in self.routes.iter().zip(&starts.routes) {
            let Some(tracked) = tracked else { continue };
            let interval = Duration::from_millis(config.resume.interval_ms);
            let (first, written) = tokio::sync::oneshot::channel();
            first_writes.push(written);
            let writer = checkpoint::Checkpointer {
                store: tracked.store.clone(),
                progress: tracked.progress.clone(),
                interval,
                seal: seal.clone(),
                route: route.name.clone(),
                holder: tracked.holder.clone(),
                first: Some(first),
            };
            self.names.spawn(&mut self.writers, format!("checkpoint writer of route {}", route.name), writer.run(self.checkpoint_stop.clone()));
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
        for (i, (route, sink)) in self.routes.iter().zip(&self.sinks).enumerate() {
            let (tx, rx) = mpsc::channel(config.delivery.queue_capacity);
            queues.push(tx);
            let setup = SinkSetup { sink: sink.clone(), config: route.sink.clone(), at: sink_key(config, i), topics: plan::topics(&scopes, i), retry };
            let mut dispatcher = Dispatcher::new(sink.clone(), config.delivery.max_in_flight, config.delivery.oversize, retry, self.health.route(i));
            if let Some(tracked) = &starts.routes[i] {
                dispatcher = dispatcher.with_progress(tracked.progress.clone());
            }
            let stop = stop.clone();
            self.names.spawn(&mut self.deliveries, format!("delivery of route {}", route.name), async move {
                if !setup.prepare(&stop).await? {
                    return Ok(());
                }
                dispatcher.run(rx).await.map_err(RunError::from)
            });
        }

        let cluster: Arc<str> = config.cluster.as_str().into();
        let progress = starts.progress();
        for ((slot, scope), start) in scopes.into_iter().enumerate().zip(starts.watches) {
            let observed = watch::observe(client.clone(), &scope, &config.kubernetes, start.continue_from);
            let name = format!("watch of {}", scope.describe());
            let worker = Worker {
                cluster: cluster.clone(),
                health: self.health.watch(scope.describe()),
                queues: queues.clone(),
                scope,
                slot,
                progress: progress.clone(),
                resume: start.resume,
            };
            self.names.spawn(&mut self.watches, name, worker.run(observed, self.watch_stop.clone()));
        }
        // The watches hold the only senders: a route's queue closes when they end.
        drop(queues);
        let sink_names: Vec<&str> = self.sinks.iter().map(Publisher::name).collect();
        if !stop.is_cancelled() {
            tracing::info!(watches = self.watches.len(), routes = self.routes.len(), sinks = ?sink_names, "deltaship started");
        }
        Ok(true)
    }

    /// A new leader claims its routes before it reads what they hold (sink::fence): from
    /// here on, nothing a deposed leader still sends is stored. False when stopped, or the
    /// lease lost, first.
    async fn claim(
        &self,
        config: &Config,
        elector: &Elector,
        scopes: &[Arc<plan::Scope>],
        retry: RetryPolicy,
        stop: &CancellationToken,
    ) -> Result<bool, RunError> {
        let (namespace, name, holder) = elector.lease();
        let lease = crate::sink::fence::Lease { cluster: config.cluster.clone(), namespace: namespace.into(), name: name.into(), holder: holder.into() };
        // A replica that lost the lease while it waited for a broker must not fence its
        // successor: claiming ends with the lease too.
        let claiming = stop.child_token();
        let on_lost = tokio::spawn({
            let (lost, claiming) = (self.lost.clone(), claiming.clone());
            async move {
                lost.cancelled().await;
                claiming.cancel()
            }
        });
        let mut claimed = Ok(true);
        for (i, (route, sink)) in self.routes.iter().zip(&self.sinks).enumerate() {
            let setup = SinkSetup { sink: sink.clone(), config: route.sink.clone(), at: sink_key(config, i), topics: plan::topics(scopes, i), retry };
            claimed = setup.claim(&lease, &route.name, &claiming).await;
            if !matches!(claimed, Ok(true)) {
                break;
            }
        }
        on_lost.abort();
        claimed
    }

    /// Runs until stopped, a delivery ends, a task panics, or the lease is lost.
    async fn until_stopped(&mut self, stop: &CancellationToken) -> End {
        tokio::select! {
            Some(r) = self.deliveries.join_next_with_id() => End::Running(self.names.joined(r).and_then(|r| r)),
            e = self.names.first_panic(&mut self.watches) => End::Running(Err(e)),
            e = self.names.first_panic(&mut self.background) => End::Running(Err(e)),
            e = self.names.first_panic(&mut self.writers) => End::Running(Err(e)),
            _ = stop.cancelled() => End::Running(Ok(())),
            _ = self.lost.cancelled() => End::LeadershipLost,
        }
    }

    /// Shutdown in one place: stop the watches, let the queues drain, flush the sinks, write
    /// the checkpoint, release the lease, then stop the HTTP server. A replica that lost the
    /// lease drains nothing and leaves the checkpoint to its successor.
    async fn shutdown(mut self, end: End) -> Result<(), RunError> {
        self.watch_stop.cancel();
        let mut outcome = match end {
            End::BeforeLeading(outcome) => {
                self.http_stop.cancel();
                let _ = self.http.await;
                return outcome;
            }
            End::LeadershipLost => {
                self.deliveries.abort_all();
                self.writers.abort_all();
                for sink in &self.sinks {
                    sink.purge();
                }
                self.http_stop.cancel();
                return Err(RunError::LeadershipLost);
            }
            End::Running(outcome) => outcome,
        };
        while let Some(joined) = self.watches.join_next_with_id().await {
            if let (Ok(()), Err(e)) = (&outcome, self.names.joined(joined)) {
                outcome = Err(e);
            }
        }
        let timeout = self.shutdown_timeout;
        let drained = tokio::time::timeout(timeout, async {
            while let Some(joined) = self.deliveries.join_next_with_id().await {
                let r = self.names.joined(joined).and_then(|r| r);
                if outcome.is_ok() {
                    outcome = r;
                }
            }
        })
        .await;
        if drained.is_err() {
            self.deliveries.abort_all();
            tracing::error!(
                timeout_secs = timeout.as_secs(),
                "Queued events not delivered within the shutdown timeout; they are re-delivered by the next run's initial sync"
            );
        }
        for sink in &self.sinks {
            if let Err(e) = sink.flush(Duration::from_secs(5)).await {
                tracing::warn!(sink = sink.name(), error = %e, "Final flush of the sink failed");
            }
        }
        // What was acknowledged, written before the lease goes: a replica taking over resumes
        // from it.
        self.checkpoint_stop.cancel();
        if tokio::time::timeout(Duration::from_secs(10), async { while self.writers.join_next().await.is_some() {} }).await.is_err() {
            tracing::warn!("The last checkpoint write did not finish within 10 s; the next start resumes from an older checkpoint");
        }
        if let Some(elector) = &self.elector {
            elector.release().await;
        }
        self.http_stop.cancel();
        let _ = self.http.await;
        tracing::info!("deltaship stopped");
        outcome
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
