//! Never back in time on an HA control plane (tests/env/ha): two bridges side by side, one
//! listing in pages and one with streaming lists, reach two API servers over one etcd
//! through a load balancer, while the second server's watch cache is held behind etcd (or
//! cut off from it) and ConfigMaps churn. Every start and relist path is taken against the
//! lagging server; the consumers' rebuilt state must match the API server exactly, and no
//! object may step back, come back after its delete, or be deleted while it exists.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deltaship::config::ResumeConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::churn::{Churn, metric, try_ctl};
use support::config::{TestConfig, kafka};
use support::history::{history, reached};
use support::kube::{client, delete_namespace, namespace, until_done};
use support::state::{api_configmaps, rebuild_matches};

/// ConfigMaps updated by the churn; a few more are created and deleted beside them.
const OBJECTS: usize = 20;
/// The churn's writes per phase of a test (a phase is measured in writes, never in time).
const PHASE: usize = 150;

/// One test at a time steers the shared load balancer and lagging server.
static STEERING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `tests/env/ha/ctl <action>` (steering, or restart-b), off the async workers.
async fn steer(action: &'static str) {
    tokio::task::spawn_blocking(move || support::churn::ctl("ha", action)).await.unwrap();
}

/// The steering, held for one test: defaults (to A, no lag, no partition) when taken and
/// again when dropped, also after a failure.
struct Steering(#[allow(dead_code)] tokio::sync::MutexGuard<'static, ()>);

impl Steering {
    async fn take() -> Steering {
        let guard = STEERING.lock().await;
        for action in ["heal", "unlag", "to-a"] {
            steer(action).await;
        }
        Steering(guard)
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        for action in ["heal", "unlag", "to-a"] {
            if let Err(e) = try_ctl("ha", action) {
                eprintln!("could not reset the HA steering: {e}");
            }
        }
    }
}

/// ConfigMaps `tmp-0000`... created one after the other, each deleted three creates later:
/// deletes under churn, so that a stale list could bring one back.
struct Ephemera {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Ephemera {
    fn start(kube: &Client, ns: &str) -> Ephemera {
        let api: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut i = 0;
            while !flag.load(Ordering::Acquire) {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("tmp-{i:04}")}})).unwrap();
                let (api, cm) = (&api, &cm);
                until_done("create a tmp ConfigMap", 409, || async move { api.create(&PostParams::default(), cm).await.map(|_| ()) }).await;
                if i >= 3 {
                    let name = format!("tmp-{:04}", i - 3);
                    let name = &name;
                    until_done("delete a tmp ConfigMap", 404, || async move { api.delete(name, &DeleteParams::default()).await.map(|_| ()) }).await;
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        Ephemera { stop, task }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Release);
        self.task.await.expect("the tmp ConfigMap writer");
    }
}

/// One bridge: its lists paged or streaming, its own topic and checkpoints, reaching the
/// API servers through the load balancer.
struct Side {
    lists: &'static str,
    topic: String,
    config: String,
    config_resume_off: String,
    bridge: Option<Bridge>,
}

impl Side {
    fn new(ns: &str, streaming: bool) -> Side {
        let brokers = support::env().kafka;
        let prefix = support::unique("it-lag");
        let resume = ResumeConfig { interval_ms: 200, kafka_topic: support::unique("it-lag-checkpoints"), ..ResumeConfig::default() };
        let config = |enabled: bool| {
            TestConfig::new()
                .cluster(&prefix)
                .configmaps(ns)
                .kafka(kafka(&brokers, &format!("{prefix}.{{plural}}")))
                .with(|c| {
                    c.kubernetes.streaming_lists = streaming;
                    c.resume = ResumeConfig { enabled, ..resume.clone() };
                })
                .toml()
        };
        Side {
            lists: if streaming { "streaming" } else { "paged" },
            topic: format!("{prefix}.configmaps"),
            config: config(true),
            config_resume_off: config(false),
            bridge: None,
        }
    }

    fn start(&mut self, resume: bool) {
        assert!(self.bridge.is_none(), "{} bridge already running", self.lists);
        let kubeconfig = support::var("DELTASHIP_TEST_HA_KUBECONFIG");
        let config = if resume { &self.config } else { &self.config_resume_off };
        self.bridge = Some(Bridge::start_with_env(config, &[("KUBECONFIG", &kubeconfig)]));
    }

    /// SIGTERM; it must exit cleanly, also while its lists wait on the lagging server.
    fn stop(&mut self) {
        let bridge = self.bridge.take().expect("a running bridge");
        let log = bridge.log_text();
        let status = bridge.stop(Duration::from_secs(60));
        assert!(status.success(), "the {} bridge exited with {status} on SIGTERM:\n{log}", self.lists);
    }

    fn kill(&mut self) {
        let mut bridge = self.bridge.take().expect("a running bridge");
        bridge.signal("KILL");
        bridge.wait_exit(Duration::from_secs(30));
    }

    /// List and watch requests answered so far (a streaming list is a watch request).
    fn lists_and_watches(&mut self) -> f64 {
        let text = self.bridge().get("/metrics").map(|(_, text)| text).unwrap_or_default();
        let of = |verb: &str| {
            let lines = text.lines().filter(|l| l.starts_with("deltaship_kube_requests_total{") && l.contains(&format!("verb=\"{verb}\"")));
            metric(&lines.collect::<Vec<_>>().join("\n"), "deltaship_kube_requests_total")
        };
        of("list") + of("watch")
    }

    fn bridge(&mut self) -> &mut Bridge {
        let lists = self.lists;
        let bridge = self.bridge.as_mut().expect("a running bridge");
        assert!(bridge.running(), "the {lists} bridge exited:\n{}", bridge.log_text());
        bridge
    }
}

/// A test's world: a namespace under churn, and the two bridges.
struct Scene {
    kube: Client,
    ns: String,
    churn: Churn,
    ephemera: Ephemera,
    sides: Vec<Side>,
    _steering: Steering,
}

impl Scene {
    /// Churn running, both bridges started on server A (not lagging) and synced.
    async fn start() -> Scene {
        let steering = Steering::take().await;
        let kube = client().await;
        let ns = namespace(&kube, "it-lag").await;
        let mut churn = Churn::create(&kube, &ns, OBJECTS, 0).await;
        churn.start(2, Duration::from_millis(200), None);
        let ephemera = Ephemera::start(&kube, &ns);
        let mut sides = vec![Side::new(&ns, false), Side::new(&ns, true)];
        for side in &mut sides {
            side.start(true);
            side.bridge().wait_ready(Duration::from_secs(120));
        }
        Scene { kube, ns, churn, ephemera, sides, _steering: steering }
    }

    /// Lets the churn write `n` more updates.
    async fn writes(&self, n: usize) {
        self.churn.wait_writes(self.churn.writes() + n).await;
    }

    /// Each bridge's list and watch requests so far (0 for one not running).
    fn requests(&mut self) -> Vec<f64> {
        self.sides.iter_mut().map(|s| if s.bridge.is_some() { s.lists_and_watches() } else { 0.0 }).collect()
    }

    /// Waits until each bridge got answers to `n` more list or watch requests than
    /// `before`: the phase that follows runs against the server they reached, whatever the
    /// machine's speed.
    async fn answered(&mut self, before: &[f64], n: f64) {
        for (side, before) in self.sides.iter_mut().zip(before) {
            let deadline = std::time::Instant::now() + Duration::from_secs(180);
            while side.lists_and_watches() < before + n {
                assert!(std::time::Instant::now() < deadline, "the {} bridge sent no {n} list or watch requests in 180 s", side.lists);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    fn each(&mut self, f: impl Fn(&mut Side)) {
        self.sides.iter_mut().for_each(f);
    }

    /// Ends the lag, stops the writers, and checks each bridge's topic: the rebuilt state
    /// is the API server's, and the history has no step back, resurrection or spurious
    /// delete. Prints the figures (`LAG-FIGURES`).
    async fn finish(mut self, test: &str) {
        steer("heal").await;
        steer("unlag").await;
        self.churn.finish().await;
        self.ephemera.finish().await;
        let namespaces = std::slice::from_ref(&self.ns);
        let brokers = support::env().kafka;
        let mut failures = Vec::new();
        for side in &mut self.sides {
            side.bridge();
            let args = vec!["--kafka".into(), brokers.clone(), "--topic".into(), side.topic.clone()];
            // Generous: a streaming bridge may sit in its backoff (up to 45 s) when the lag ends.
            let exact = rebuild_matches(&self.kube, args, namespaces, Duration::from_secs(180)).await;
            let state = api_configmaps(&self.kube, namespaces).await;
            let (b, topic) = (brokers.clone(), side.topic.clone());
            // Every final version, or (the state being wrong) whatever the topic holds.
            let inexact = exact.is_err();
            let records = tokio::task::spawn_blocking(move || {
                let quiet = std::cell::Cell::new((0, std::time::Instant::now()));
                let drained = |r: &[support::kafka::Record]| match quiet.get() {
                    (n, since) if n == r.len() => since.elapsed() > Duration::from_secs(5),
                    _ => {
                        quiet.set((r.len(), std::time::Instant::now()));
                        false
                    }
                };
                support::kafka::read_until(&b, &topic, Duration::from_secs(120), |r| reached(r, &state) || inexact && drained(r))
            })
            .await
            .unwrap();
            let api: Api<ConfigMap> = Api::namespaced(self.kube.clone(), &self.ns);
            let existing: HashSet<String> = api.list(&ListParams::default()).await.unwrap().into_iter().filter_map(|c| c.metadata.uid).collect();
            let h = history(&records, &existing);
            let stale = side.bridge().get("/metrics").map_or(f64::NAN, |(_, text)| metric(&text, "deltaship_stale_events_total"));
            eprintln!(
                "LAG-FIGURES test={test} lists={} writes={} events={} steps_back={} resurrections={} spurious_deletes={} state_exact={} stale_events_counted={stale}",
                side.lists,
                self.churn.writes(),
                h.events,
                h.steps_back,
                h.resurrections,
                h.spurious_deletes,
                exact.is_ok()
            );
            if let Err(problem) = h.clean().and(exact) {
                failures.push(format!("{test}, {} lists: {problem}", side.lists));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
        self.sides.iter_mut().for_each(Side::stop);
        delete_namespace(&self.kube, &self.ns).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_watch_moved_to_the_lagging_then_partitioned_server_never_goes_back() {
    let mut scene = Scene::start().await;
    scene.writes(PHASE).await;
    steer("lag").await;
    scene.writes(PHASE).await; // the bridges ship from A what B's cache does not have
    steer("to-b").await;
    let before = scene.requests();
    steer("cut").await; // the watches reconnect, to the lagging server
    scene.answered(&before, 1.0).await;
    scene.writes(PHASE).await;
    let before = scene.requests();
    steer("cut").await; // and again, from where they stood, still lagging
    scene.answered(&before, 1.0).await;
    scene.writes(PHASE).await;
    steer("partition").await; // its reads of etcd fail, its cache serves what it has
    steer("cut").await;
    scene.writes(PHASE).await;
    scene.finish("live-watch-moved").await;
}

/// A restart onto the lagging server: the resume watches from the checkpoint, ahead of the
/// server's cache (SIGTERM, or SIGKILL when `kill`).
async fn restart_onto_the_lagging_server(kill: bool, test: &str) {
    let mut scene = Scene::start().await;
    scene.writes(PHASE).await;
    steer("lag").await;
    scene.writes(PHASE).await;
    steer("to-b").await;
    scene.each(if kill { Side::kill } else { Side::stop });
    scene.writes(PHASE).await;
    scene.each(|s| s.start(true));
    scene.answered(&[0.0, 0.0], 1.0).await;
    scene.writes(2 * PHASE).await;
    scene.finish(test).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_restart_onto_the_lagging_server_never_goes_back() {
    restart_onto_the_lagging_server(false, "sigterm-restart").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkill_restart_onto_the_lagging_server_never_goes_back() {
    restart_onto_the_lagging_server(true, "sigkill-restart").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_that_lists_on_the_lagging_server_never_goes_back() {
    let mut scene = Scene::start().await;
    scene.writes(PHASE).await;
    scene.each(Side::stop);
    scene.writes(PHASE).await;
    steer("to-b").await;
    steer("lag").await;
    // A fresh watch cache, from after the checkpoints' versions (they are 410 Gone there),
    // held where it started while etcd moves on.
    steer("restart-b").await;
    scene.writes(PHASE).await;
    scene.each(|s| s.start(true));
    scene.answered(&[0.0, 0.0], 2.0).await; // the resume's watch (410), then the list
    scene.writes(2 * PHASE).await;
    scene.finish("resume-that-lists").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_with_resume_off_on_the_lagging_server_and_the_next_resume_never_go_back() {
    let mut scene = Scene::start().await;
    scene.writes(PHASE).await;
    steer("lag").await;
    scene.writes(PHASE).await; // the bridges ship from A what B's cache does not have
    steer("to-b").await;
    scene.each(Side::stop);
    scene.each(|s| s.start(false)); // a full sync, listed from the lagging server
    scene.answered(&[0.0, 0.0], 1.0).await;
    scene.writes(PHASE).await;
    steer("unlag").await; // let it ship, and write its checkpoint
    scene.writes(PHASE).await;
    steer("lag").await;
    scene.writes(PHASE).await;
    scene.each(Side::stop);
    scene.each(|s| s.start(true)); // resumes from what the resume-off run shipped
    scene.answered(&[0.0, 0.0], 1.0).await;
    scene.writes(PHASE).await;
    scene.finish("resume-off-then-resume").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_410_and_relist_on_the_lagging_server_never_go_back() {
    let mut scene = Scene::start().await;
    scene.writes(PHASE).await;
    steer("to-b").await;
    let before = scene.requests();
    steer("cut").await; // the watches move to B, in step with etcd for now
    scene.answered(&before, 1.0).await;
    scene.writes(PHASE).await;
    steer("lag").await; // their events stop
    scene.writes(PHASE).await;
    // B restarts with a fresh cache, held where it started: the watches' versions are 410
    // Gone there, and the relists go to a server behind etcd.
    let before = scene.requests();
    steer("restart-b").await;
    scene.answered(&before, 2.0).await; // the watch (410), then the list
    scene.writes(2 * PHASE).await;
    scene.finish("gone-and-relist").await;
}
