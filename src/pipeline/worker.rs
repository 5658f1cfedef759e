//! The per-watch worker: what one watch observed, classified against that watch's index,
//! built into each route's CloudEvents and put into the routes' queues. It takes any
//! stream of observations (kube-runtime's `reflector(writer, stream)` is the model), so
//! the watch stage, the benches and the tests below feed it alike.

use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::change::{Change, Classifier};
use crate::checkpoint::{Effect, Progress, Resume};
use crate::event::{self, Envelope, WatchAttributes};
use crate::model::{MarkerPhase, Observed, Stall};
use crate::plan::Scope;
use crate::telemetry::WatchHealth;
use crate::telemetry::meters::WorkerMeters;
use crate::watch::{FailureKind, WatchError};

/// Everything one watch's worker needs besides its observations.
pub struct Worker {
    pub cluster: Arc<str>,
    pub scope: Arc<Scope>,
    /// Where the worker reports the watch's errors and recoveries (for /readyz).
    pub health: WatchHealth,
    /// Each route's queue, by route position.
    pub queues: Vec<mpsc::Sender<Envelope>>,
    /// The watch's position in the plan (its slot in the routes' checkpoints).
    pub slot: usize,
    /// Each route's progress, by route position, where the route keeps a checkpoint of
    /// this watch (empty: none does).
    pub progress: Vec<Option<Arc<Progress>>>,
    /// The checkpoint the watch starts from; `None`: an initial sync.
    pub resume: Option<Resume>,
}

impl Worker {
    /// Runs until `stop` is cancelled, the observations end or a route's queue is closed.
    /// Watch errors never end it: they are logged and counted, and the watch stage resumes
    /// (or relists) after a backoff.
    pub async fn run(mut self, observed: impl Stream<Item = Result<Observed, WatchError>>, stop: CancellationToken) {
        let scope = self.scope.clone();
        let watch = WatchAttributes::new(self.cluster.clone(), &scope.resource);
        let routes = scope.outputs.iter().map(|o| o.route_name.clone()).collect();
        let mut meters = WorkerMeters::new(&watch.resource, scope.namespace.as_deref(), routes);
        let mut observed = std::pin::pin!(observed);
        let mut classifier = Classifier::new(watch.resource.clone(), scope.relist, scope.keeps_content());
        if let Some(resume) = self.resume.take() {
            classifier.resume_from(resume.entries, resume.resource_version, resume.delivered);
        }
        // Resyncs run in this task, between watch events: each object's resync event
        // carries its state at emission time, in order with its live events.
        let mut resync = scope.resync.map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
        // State markers too, so each one's count and digest is the state at its place.
        let mut state_markers = scope.state_markers.map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
        let mut changes = Vec::new();
        tracing::info!(watch = %scope.describe(), "Watch started");
        loop {
            let periodic = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick(&mut resync) => Err((classifier.resync(&mut changes), "Resync")),
                _ = tick(&mut state_markers) => Err((classifier.state_marker(&mut changes), "State marker")),
                item = observed.next() => Ok(item),
            };
            let item = match periodic {
                Ok(item) => item,
                Err((ran, what)) => {
                    if !ran {
                        tracing::debug!(watch = %scope.describe(), "{what} skipped: a sync is under way");
                    }
                    if !self.enqueue(&watch, &mut changes, &mut meters, Instant::now(), &stop).await {
                        return;
                    }
                    continue;
                }
            };
            let Some(item) = item else { return };
            let arrived = Instant::now();
            let event = match item {
                Ok(e) => e,
                Err(e) => {
                    let kind = FailureKind::of(&e).as_str();
                    meters.watch_error(kind);
                    self.health.failed(kind);
                    tracing::warn!(watch = %scope.describe(), error_kind = kind, error = %e, "Watch failed; backing off");
                    continue;
                }
            };
            if let Observed::Stalled(stall) = &event {
                self.stalled(stall, &mut meters);
            }
            // `Init` comes before each list is even tried, a stall is the opposite; anything
            // else proves the watch works (an object, a completed list, a live event).
            if !matches!(event, Observed::Init | Observed::Stalled(_)) {
                self.health.worked();
                meters.observed();
            }
            if let Observed::Bookmark(version) = &event {
                self.bookmark(version.clone());
            }
            classifier.handle(event, &mut changes);
            meters.indexed(classifier.index_len());
            if !self.enqueue(&watch, &mut changes, &mut meters, arrived, &stop).await {
                return;
            }
        }
    }

    /// The watch stage gave the watch up (see `watch::stall`) and lists again: counted, logged
    /// and reported to /readyz as a failure of kind `reason` until the list works. A history
    /// replaced under the watch (etcd restored from a backup) is an ERROR: consumers held
    /// state that the API server no longer has until the full relist that follows replaces it.
    fn stalled(&self, stall: &Stall, meters: &mut WorkerMeters) {
        let reason = stall.reason.as_str();
        meters.stalled(stall.reason);
        self.health.failed(reason);
        let watch = self.scope.describe();
        if stall.reason.rewound() {
            tracing::error!(watch = %watch, reason, position = %stall.position, current = %stall.current, "The API server's current version is behind the watch's position: its history was replaced (etcd restored from a backup?); listing in full to replace what was shipped");
        } else {
            tracing::warn!(watch = %watch, reason, position = %stall.position, current = %stall.current, silent_secs = crate::watch::stall::SILENCE_LIMIT.as_secs(), "The watch heard nothing while the API server's version moved on; listing again");
        }
    }

    /// The watch stands at `version` with everything before it observed: each route's
    /// checkpoint moves there once the route acknowledged what came before. Nothing ships.
    fn bookmark(&self, version: String) {
        let effect = Arc::new(Effect::Bookmark { resource_version: version });
        for output in &self.scope.outputs {
            if let Some(p) = self.progress.get(output.route).and_then(Option::as_ref) {
                p.register(self.slot, effect.clone(), true);
            }
        }
    }

    /// Builds and queues the events of `changes` for each route that ships them; false
    /// when stopping. A full route queue pauses this watch (and with it every route it
    /// feeds) until that route catches up: nothing is dropped. `arrived`: when what the
    /// changes come from arrived (a watch event, a resync tick).
    async fn enqueue(&self, watch: &WatchAttributes, changes: &mut Vec<Change>, meters: &mut WorkerMeters, arrived: Instant, stop: &CancellationToken) -> bool {
        let scope = &self.scope;
        for change in changes.drain(..) {
            if let Change::Marker(marker) = &change
                && marker.phase == MarkerPhase::Completed
            {
                meters.synced();
            }
            let last = scope.outputs.len().saturating_sub(1);
            // One effect per change, shared by its routes (not copied per route).
            let effect = (!self.progress.is_empty()).then(|| Arc::new(Effect::of(&change)));
            let mut change = Some(change);
            // Parsed once for all routes whose filters compare paths, if any.
            let mut trees = None;
            for (i, output) in scope.outputs.iter().enumerate() {
                let c = change.as_ref().expect("taken only by the last output");
                let progress = self.progress.get(output.route).and_then(Option::as_ref).zip(effect.as_ref());
                if let Change::Object(o) = c
                    && !output.passes(o.candidate(output.compares_paths().then(|| &*trees.get_or_insert_with(|| o.trees()))))
                {
                    meters.filtered(i, o.change);
                    // Left out of this route: its consumers' state moves on all the same.
                    if let Some((p, effect)) = progress {
                        p.register(self.slot, effect.clone(), true);
                    }
                    continue;
                }
                // The last output takes the change; the others build from a copy.
                let c = if i == last { change.take().expect("not taken yet") } else { c.clone() };
                let mut env = event::build(watch, scope, output, c, chrono::Utc::now());
                env.position = progress.and_then(|(p, effect)| p.register(self.slot, effect.clone(), false));
                env.observed = Some(arrived);
                let tx = &self.queues[output.route];
                tokio::select! {
                    _ = stop.cancelled() => return false,
                    sent = tx.send(env) => if sent.is_err() { return false },
                }
            }
        }
        true
    }
}

/// The next tick of an optional timer; never, without one.
async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::stream;
    use serde_json::json;

    use super::*;
    use crate::event::EnvelopeKind;
    use crate::model::fixtures::{configmap, configmaps};
    use crate::telemetry::Health;

    /// The scope of ConfigMaps as `run` plans it from `config` (the resource added).
    fn scope(mut config: serde_json::Value) -> Arc<Scope> {
        config["resources"] = json!([{"version": "v1", "kind": "ConfigMap"}]);
        let config = serde_json::from_value(config).unwrap();
        crate::plan::scopes(&config, &[configmaps()], "https://api").unwrap().remove(0)
    }

    fn two_routes() -> serde_json::Value {
        json!({"routes": [
            {"name": "all", "sink": {"type": "stdout"}},
            {"name": "updates", "sink": {"type": "stdout"}, "filter": {"types": ["updated"]}},
        ]})
    }

    /// A worker for `scope` with one queue per route; the receivers, by route.
    fn worker(scope: Arc<Scope>, routes: usize) -> (Worker, Vec<mpsc::Receiver<Envelope>>) {
        let (queues, receivers) = (0..routes).map(|_| mpsc::channel(64)).unzip();
        let health = Health::single(1).watch("configmaps".into());
        (Worker { cluster: "c".into(), scope, health, queues, slot: 0, progress: Vec::new(), resume: None }, receivers)
    }

    fn cm(name: &str, rv: &str, v: &str) -> crate::model::Object {
        configmap(name, &format!("uid-{name}"), rv, json!({"v": v}))
    }

    /// What a route received: `type key` per event, in order.
    async fn received(rx: &mut mpsc::Receiver<Envelope>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(e) = rx.recv().await {
            out.push(match e.kind {
                EnvelopeKind::Object(_) => format!("{} {}", e.kind.label(), e.key()),
                EnvelopeKind::Marker(_) => e.kind.label().to_string(),
            });
        }
        out
    }

    #[tokio::test]
    async fn each_route_gets_the_watch_in_order_through_its_own_filter() {
        let (w, mut rx) = worker(scope(two_routes()), 2);
        let observed = stream::iter([
            Observed::Init,
            Observed::InitApply(cm("a", "1", "x")),
            Observed::InitApply(cm("b", "2", "x")),
            Observed::InitDone,
            Observed::Apply(cm("a", "3", "y")),
            Observed::Apply(cm("c", "4", "x")),
            Observed::Delete(cm("b", "5", "x")),
        ])
        .map(Ok);
        w.run(observed, CancellationToken::new()).await;
        let all = received(&mut rx[0]).await;
        assert_eq!(all, ["sync.started", "synced ns/a", "synced ns/b", "sync.completed", "updated ns/a", "added ns/c", "deleted ns/b"]);
        let updates = received(&mut rx[1]).await;
        assert_eq!(updates, ["sync.started", "sync.completed", "updated ns/a"], "markers pass every filter");
    }

    #[tokio::test]
    async fn watch_errors_are_counted_and_the_watch_goes_on() {
        let (w, mut rx) = worker(scope(two_routes()), 2);
        let observed =
            stream::iter([Err(WatchError::NoResourceVersion), Ok(Observed::Init), Ok(Observed::InitApply(cm("a", "1", "x"))), Ok(Observed::InitDone)]);
        w.run(observed, CancellationToken::new()).await;
        assert_eq!(received(&mut rx[0]).await, ["sync.started", "synced ns/a", "sync.completed"]);
    }

    /// A stall makes the watch fail (for /readyz, past the grace) until its list works; a
    /// replaced history relists in full.
    #[tokio::test]
    async fn a_stalled_watch_fails_until_its_list_works() {
        let (mut w, mut rx) = worker(scope(json!({"sink": {"type": "stdout"}})), 1);
        let health = Health::new(vec![("default".into(), 0)], None, Some(Duration::ZERO));
        health.route(0).set_sink_connected(true);
        w.health = health.watch("configmaps".into());
        let stall = crate::model::Stall { reason: crate::model::StallReason::Ahead, position: "30".into(), current: "12".into() };
        let (tx, observed) = futures::channel::mpsc::unbounded();
        let task = tokio::spawn(w.run(observed.map(Ok), CancellationToken::new()));
        for o in [Observed::Init, Observed::InitApply(cm("a", "9", "x")), Observed::InitDone, Observed::Stalled(stall), Observed::Init] {
            tx.unbounded_send(o).unwrap();
        }
        let rx = &mut rx[0];
        let mut labels = Vec::new();
        while labels.len() < 4 {
            let e = rx.recv().await.unwrap();
            labels.push(e.kind.label().to_string());
        }
        assert_eq!(labels, ["sync.started", "synced", "sync.completed", "sync.started"]);
        let why = health.readiness().unwrap_err();
        assert!(why.contains("watch of configmaps failing") && why.contains("(last error: ahead)"), "{why}");
        tx.unbounded_send(Observed::InitApply(cm("a", "5", "x"))).unwrap();
        assert_eq!(rx.recv().await.map(|e| e.kind.label()), Some("synced"), "a full relist: the restored state, its older version included");
        assert_eq!(health.readiness(), Ok(()), "the list works");
        drop(tx);
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn resyncs_ship_the_index_between_observations_on_the_period() {
        let (w, rx) = worker(scope(json!({"kubernetes": {"resync_secs": 60}, "sink": {"type": "stdout"}})), 1);
        let mut rx = rx.into_iter().next().unwrap();
        let observed = stream::iter([Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitDone]).map(Ok).chain(stream::pending());
        let stop = CancellationToken::new();
        let task = tokio::spawn(w.run(observed, stop.clone()));
        for want in ["sync.started", "synced", "sync.completed"] {
            assert_eq!(rx.recv().await.map(|e| e.kind.label()), Some(want));
        }
        tokio::time::advance(Duration::from_secs(59)).await;
        tokio::task::yield_now().await;
        assert!(rx.is_empty(), "no resync before its period");
        tokio::time::advance(Duration::from_secs(1)).await;
        for want in ["sync.started", "synced", "sync.completed"] {
            assert_eq!(rx.recv().await.map(|e| e.kind.label()), Some(want), "the resync at 60 s");
        }
        stop.cancel();
        task.await.unwrap();
        assert!(rx.recv().await.is_none(), "stopping ends the worker and closes its queues");
    }

    #[tokio::test]
    async fn a_route_records_what_its_sink_acknowledged_and_what_its_filter_left_out() {
        let (mut w, mut rx) = worker(scope(two_routes()), 2);
        let progress: Vec<Option<Arc<Progress>>> = (0..2).map(|_| Some(Arc::new(Progress::default()))).collect();
        for (route, p) in progress.iter().enumerate() {
            p.as_ref().unwrap().track(0, crate::checkpoint::Start { prefix: format!("r{route}"), digest: "d".into(), ..Default::default() });
        }
        w.progress = progress.clone();
        let observed = stream::iter([Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitDone, Observed::Apply(cm("a", "3", "y"))]).map(Ok);
        w.run(observed, CancellationToken::new()).await;
        for (route, rx) in rx.iter_mut().enumerate() {
            let p = progress[route].as_ref().unwrap();
            let mut positions = Vec::new();
            while let Some(env) = rx.recv().await {
                positions.push(env.position.expect("every event of a tracked route has a position"));
            }
            // Left-out changes wait behind the shipped ones before them: nothing is recorded
            // before the sink acknowledges.
            assert!(p.backlog().0 >= positions.len(), "route {route}");
            for position in positions {
                p.acknowledged(position, None);
            }
            assert_eq!(p.backlog().0, 0);
            let records = p.take();
            let watch: crate::checkpoint::WatchRecord = serde_json::from_slice(records.last().unwrap().1.as_ref().unwrap()).unwrap();
            assert_eq!((watch.resource_version.as_deref(), watch.objects), (Some("3"), 1), "route {route}: {records:?}");
        }
    }

    #[tokio::test]
    async fn a_closed_queue_ends_the_worker() {
        let (w, rx) = worker(scope(two_routes()), 2);
        drop(rx);
        let observed = stream::iter([Observed::Init, Observed::InitDone]).map(Ok).chain(stream::pending());
        tokio::time::timeout(Duration::from_secs(5), w.run(observed, CancellationToken::new())).await.expect("ends without waiting for more observations");
    }
}
