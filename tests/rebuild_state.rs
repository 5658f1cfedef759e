//! The consumer protocol end to end: `deltaship rebuild` over everything a bridge shipped
//! must equal the API server's own state (same keys, same resourceVersions), after churn
//! through expired watches, API server restarts and SIGKILLed bridges, and across periodic
//! resyncs; for Kafka and NATS JetStream.
//!
//! These tests restart the shared API server, so they take SERIAL one at a time (cargo runs
//! test binaries one after another); every Kubernetes write of theirs rides out restarts.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats, resource};
use support::kube::{client, delete_namespace, until_done};
use support::nats::STREAM;
use support::state::{api_configmaps, differences, rebuilt_configmaps};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The default stream (subjects `deltaship.>`); each test's unique cluster keeps its
/// subjects apart, and its unique namespaces keep its keys apart in the rebuilt state.

#[derive(Clone, Copy, Debug)]
enum Sink {
    Kafka,
    Nats,
}

/// One test's destination: the sink, a unique cluster name and topic prefix.
struct Target {
    sink: Sink,
    cluster: String,
    topic_prefix: String,
}

impl Target {
    fn new(sink: Sink) -> Target {
        Target { sink, cluster: support::unique("c"), topic_prefix: support::unique("it-rebuild") }
    }

    fn topic(&self) -> String {
        format!("{}.core.configmaps", self.topic_prefix)
    }

    /// The bridge's config: ConfigMaps of `namespaces` (one watch each), resynced every
    /// `resync_secs` (0: never).
    fn config(&self, namespaces: &[String], resync_secs: u64) -> String {
        let env = support::env();
        let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        let config = TestConfig::new().cluster(&self.cluster).with(|c| c.kubernetes.resync_secs = resync_secs).resource(resource("", "ConfigMap", &namespaces));
        match self.sink {
            Sink::Kafka => config.kafka(kafka(&env.kafka, &format!("{}.{{group}}.{{plural}}", self.topic_prefix))),
            Sink::Nats => config.nats(nats(&env.nats)),
        }
        .toml()
    }

    /// Runs `deltaship rebuild` over everything shipped so far; the ConfigMaps of
    /// `namespaces` in the rebuilt state (key to resourceVersion), and the summary.
    async fn rebuild(&self, namespaces: &[String]) -> Result<(BTreeMap<String, String>, Value), String> {
        let env = support::env();
        let args: Vec<String> = match self.sink {
            Sink::Kafka => vec!["--kafka".into(), env.kafka, "--topic".into(), self.topic()],
            Sink::Nats => vec!["--nats".into(), env.nats, "--stream".into(), STREAM.into()],
        };
        rebuilt_configmaps(args, namespaces).await
    }
}

// ---------------------------------------------------------------------------------------
// The API server side: retried writes, its own state.

// ---------------------------------------------------------------------------------------
// The churn: a fixed plan of steps over 3 namespaces, so each test knows which step runs
// while its fault is under way.

const NAMES: usize = 60;
const LATE_NAMES: usize = 5;
const STEPS: usize = 8;
/// Between two writes of one namespace: spreads each step over ~1.5 s, so faults land
/// in the middle of the churn rather than after it.
const PACE: Duration = Duration::from_millis(20);

/// Whether ConfigMap `i` exists after `step`. Step 0 creates 0..60; step 2 deletes every
/// third; step 4 re-creates every sixth (same name, new uid); step 6 deletes those with
/// i % 5 == 1 (some of them re-created ones) and creates 5 new names; odd steps update
/// everything that exists.
fn exists(i: usize, step: usize) -> bool {
    let created = i < NAMES || step >= 6;
    let first_delete = i < NAMES && i.is_multiple_of(3) && step >= 2 && !(i.is_multiple_of(6) && step >= 4);
    let second_delete = i < NAMES && i % 5 == 1 && step >= 6;
    created && !first_delete && !second_delete
}

async fn churn_step(client: &Client, namespaces: &[String], step: usize) {
    let per_namespace = namespaces.iter().map(|ns| async move {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for i in 0..NAMES + LATE_NAMES {
            let name = format!("cm-{i:03}");
            let (before, after) = (step > 0 && exists(i, step - 1), exists(i, step));
            let data = json!({"data": {"step": step.to_string()}});
            match (before, after) {
                (false, true) => {
                    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": data["data"]})).unwrap();
                    until_done(&format!("create {ns}/{name}"), 409, async || api.create(&PostParams::default(), &cm).await.map(drop)).await;
                }
                (true, false) => {
                    until_done(&format!("delete {ns}/{name}"), 404, async || api.delete(&name, &DeleteParams::default()).await.map(drop)).await;
                }
                (true, true) if step % 2 == 1 => {
                    until_done(&format!("update {ns}/{name}"), 0, async || api.patch(&name, &PatchParams::default(), &Patch::Merge(&data)).await.map(drop))
                        .await;
                }
                _ => continue,
            }
            tokio::time::sleep(PACE).await;
        }
    });
    futures::future::join_all(per_namespace).await;
}

/// Checks that the API server holds exactly the ConfigMaps the plan left (besides the
/// controller-manager's kube-root-ca.crt), so no write was lost or doubled by its retries.
async fn assert_churn_applied(client: &Client, namespaces: &[String]) {
    let planned: BTreeSet<String> =
        namespaces.iter().flat_map(|ns| (0..NAMES + LATE_NAMES).filter(|i| exists(*i, STEPS - 1)).map(move |i| format!("{ns}/cm-{i:03}"))).collect();
    let actual: BTreeSet<String> = api_configmaps(client, namespaces).await.into_keys().filter(|k| !k.ends_with("/kube-root-ca.crt")).collect();
    assert_eq!(actual, planned, "the API server does not hold what the churn planned");
}

/// Runs `tests/env/kube/ctl <action>` on a thread of its own, so the churn goes on meanwhile.
/// Tried three times: another test binary restarting the shared API server at that moment
/// makes ctl fail on a busy port.
fn kube_ctl(action: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        let mut failures = Vec::new();
        while failures.len() < 3 {
            let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/kube/ctl")).arg(action).output().expect("run tests/env/kube/ctl");
            if out.status.success() {
                return;
            }
            failures.push(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
            std::thread::sleep(Duration::from_secs(5));
        }
        panic!("tests/env/kube/ctl {action} failed three times: {failures:#?}");
    })
}

/// A fresh namespace, its creation retried like every write here: the shared API server
/// may be restarting (other suites' fault tests use it too).
async fn namespace(client: &Client, prefix: &str) -> String {
    let name = support::unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let api: Api<Namespace> = Api::all(client.clone());
    until_done(&format!("create namespace {name}"), 409, async || api.create(&PostParams::default(), &ns).await.map(drop)).await;
    name
}

async fn namespaces(client: &Client) -> Vec<String> {
    futures::future::join_all((0..3).map(|_| namespace(client, "it-rebuild"))).await
}

// ---------------------------------------------------------------------------------------
// The check of every test: rebuilt == API server.

/// Rebuilds until the rebuilt ConfigMaps of `namespaces` equal the API server's (keys and
/// resourceVersions); panics after CONVERGE with the differences and the bridge's warnings.
async fn assert_rebuilt_equals_api_server(target: &Target, client: &Client, namespaces: &[String], bridge: &Bridge) {
    const CONVERGE: Duration = Duration::from_secs(120);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let api = api_configmaps(client, namespaces).await;
        let problem = match target.rebuild(namespaces).await {
            Ok((rebuilt, _)) if rebuilt == api => return,
            Ok((rebuilt, summary)) => differences(&api, &rebuilt, &summary),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            let sink = target.sink;
            panic!("{sink:?}: the rebuilt state never matched the API server ({} objects) within {CONVERGE:?}:\n{problem}\n{}", api.len(), warnings(bridge));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The bridge's last warnings and errors, for failure messages (its debug log is long).
fn warnings(bridge: &Bridge) -> String {
    let log = bridge.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    format!("the bridge's last warnings and errors:\n{}", lines[lines.len().saturating_sub(40)..].join("\n"))
}

/// The sum of a Prometheus counter over its labels.
fn metric_total(bridge: &Bridge, name: &str) -> f64 {
    let (_, body) = bridge.get("/metrics").expect("/metrics answers");
    body.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---------------------------------------------------------------------------------------
// 1. Churn while watches expire and the API server restarts.

async fn churn_through_expired_watches_and_api_server_restarts(sink: Sink) {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let namespaces = namespaces(&client).await;
    let target = Target::new(sink);
    let mut bridge = Bridge::start(&target.config(&namespaces, 0));
    bridge.wait_ready(Duration::from_secs(60));

    let mut fault = None;
    for step in 0..STEPS {
        // Watches expire in the middle of the churn; the API server restarts later on.
        if step == 2 {
            fault = Some(kube_ctl("expire-watches"));
        }
        if step == 5 {
            fault.take().unwrap().await.unwrap();
            fault = Some(kube_ctl("restart"));
        }
        churn_step(&client, &namespaces, step).await;
    }
    fault.take().unwrap().await.unwrap();
    assert_churn_applied(&client, &namespaces).await;

    assert_rebuilt_equals_api_server(&target, &client, &namespaces, &bridge).await;
    // Proves the expiry hit the bridge: it could not resume and relisted (a diff sync).
    let relists = metric_total(&bridge, "deltaship_relists_total");
    assert!(relists > 0.0, "no relist happened, so the expiry never hit the bridge; {}", warnings(&bridge));
    assert!(bridge.stop(Duration::from_secs(30)).success());
    futures::future::join_all(namespaces.iter().map(|ns| delete_namespace(&client, ns))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_rebuild_equals_the_api_server_after_churn_through_expired_watches_and_api_server_restarts() {
    churn_through_expired_watches_and_api_server_restarts(Sink::Kafka).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_rebuild_equals_the_api_server_after_churn_through_expired_watches_and_api_server_restarts() {
    churn_through_expired_watches_and_api_server_restarts(Sink::Nats).await;
}

// ---------------------------------------------------------------------------------------
// 2. Churn while the bridge is killed and restarted.

async fn churn_through_bridge_kills(sink: Sink) {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let namespaces = namespaces(&client).await;
    let target = Target::new(sink);
    let config = target.config(&namespaces, 0);
    let mut bridge = Some(Bridge::start(&config));
    bridge.as_mut().unwrap().wait_ready(Duration::from_secs(60));

    for step in 0..STEPS {
        match step {
            // Killed mid-step, with events in flight...
            1 | 3 | 5 => {
                let running = bridge.take().unwrap();
                let kill = async {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    running.signal("KILL");
                };
                tokio::join!(churn_step(&client, &namespaces, step), kill);
            }
            // ...down for the whole next step (deletes at 2 and 6, creates at 4 and 6), then
            // a new run, whose initial full sync must drop what was deleted meanwhile.
            2 | 4 | 6 => {
                churn_step(&client, &namespaces, step).await;
                let mut restarted = Bridge::start(&config);
                restarted.wait_ready(Duration::from_secs(60));
                bridge = Some(restarted);
            }
            _ => churn_step(&client, &namespaces, step).await,
        }
    }
    assert_churn_applied(&client, &namespaces).await;
    let bridge = bridge.unwrap();
    assert_rebuilt_equals_api_server(&target, &client, &namespaces, &bridge).await;
    assert!(bridge.stop(Duration::from_secs(30)).success());
    futures::future::join_all(namespaces.iter().map(|ns| delete_namespace(&client, ns))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_rebuild_equals_the_api_server_after_the_bridge_is_killed_three_times_during_churn() {
    churn_through_bridge_kills(Sink::Kafka).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_rebuild_equals_the_api_server_after_the_bridge_is_killed_three_times_during_churn() {
    churn_through_bridge_kills(Sink::Nats).await;
}

// ---------------------------------------------------------------------------------------
// 3. Resync cycles.

/// One shipped event, whatever the sink: `pos` orders events within a partition.
#[derive(Debug)]
struct Shipped {
    partition: i32,
    pos: u64,
    ty: String,
    id: String,
    sync_id: Option<String>,
    subject: Option<String>,
    rv: Option<String>,
    data: Value,
}

/// Everything `target` shipped so far, once `done` accepts it (or a panic after `timeout`).
async fn read_shipped(target: &Target, timeout: Duration, done: impl Fn(&[Shipped]) -> bool) -> Vec<Shipped> {
    let shipped = |get: &dyn Fn(&str) -> Option<String>, partition: i32, pos: u64, data: Value| Shipped {
        partition,
        pos,
        ty: get("type").unwrap_or_default().trim_start_matches("dev.deltaship.").to_string(),
        id: get("id").unwrap_or_default(),
        sync_id: get("syncid"),
        subject: get("subject"),
        rv: get("resourceversion"),
        data,
    };
    match target.sink {
        Sink::Kafka => {
            let from = |r: &support::kafka::Record| shipped(&|n| r.headers.get(&format!("ce_{n}")).cloned(), r.partition, r.offset as u64, r.json());
            let records = support::kafka::read_until(&support::env().kafka, &target.topic(), timeout, |rs| done(&rs.iter().map(from).collect::<Vec<_>>()));
            records.iter().map(from).collect()
        }
        Sink::Nats => {
            let prefix = format!("deltaship.{}.", target.cluster);
            let from = |ms: &[support::nats::Msg]| -> Vec<Shipped> {
                ms.iter()
                    .filter(|m| m.subject.starts_with(&prefix))
                    .map(|m| shipped(&|n| m.headers.get(&format!("ce-{n}")).cloned(), 0, m.sequence, m.json()))
                    .collect()
            };
            let js = support::nats::jetstream().await;
            from(&support::nats::read_until(&js, STREAM, timeout, |ms| done(&from(ms))).await)
        }
    }
}

/// Resyncs that began after every event in `after` (markers are barriers: a marker later in
/// a partition than an event was sent after it) and completed on all `partitions`, in
/// sync id order: (sync id, the completed marker's data).
fn resyncs_after(events: &[Shipped], after: &[&Shipped], partitions: usize) -> Vec<(String, Value)> {
    let marker = |e: &Shipped, ty: &str, sid: &str| e.ty == ty && e.data["reason"] == "resync" && e.sync_id.as_deref() == Some(sid);
    let ids: BTreeSet<&str> = events.iter().filter(|e| e.data["reason"] == "resync").filter_map(|e| e.sync_id.as_deref()).collect();
    ids.into_iter()
        .filter(|sid| after.iter().all(|a| events.iter().any(|e| marker(e, "sync.started", sid) && e.partition == a.partition && e.pos > a.pos)))
        .filter_map(|sid| {
            let completed: Vec<&Shipped> = events.iter().filter(|e| marker(e, "sync.completed", sid)).collect();
            let on: BTreeSet<i32> = completed.iter().map(|e| e.partition).collect();
            (on.len() == partitions).then(|| (sid.to_string(), completed[0].data.clone()))
        })
        .collect()
}

async fn resyncs_redeliver_the_index(sink: Sink) {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let ns = namespace(&client, "it-resync").await;
    let namespaces = vec![ns.clone()];
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 0..6 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}, "data": {"v": "0"}})).unwrap();
        until_done("create a ConfigMap", 409, async || api.create(&PostParams::default(), &cm).await.map(drop)).await;
    }
    let target = Target::new(sink);
    let mut bridge = Bridge::start(&target.config(&namespaces, 3));
    bridge.wait_ready(Duration::from_secs(60));
    // Changes between resyncs: the resyncs after them must carry the index as it is now.
    until_done("delete cm-0", 404, async || api.delete("cm-0", &DeleteParams::default()).await.map(drop)).await;
    let patch = json!({"data": {"v": "1"}});
    until_done("update cm-1", 0, async || api.patch("cm-1", &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)).await;

    let (deleted, updated) = (format!("{ns}/cm-0"), format!("{ns}/cm-1"));
    let changes = |es: &[Shipped]| -> Option<[usize; 2]> {
        let d = es.iter().position(|e| e.ty == "object.deleted" && e.subject.as_ref() == Some(&deleted))?;
        let u = es.iter().position(|e| e.ty == "object.updated" && e.subject.as_ref() == Some(&updated))?;
        Some([d, u])
    };
    // Kafka topics have 3 partitions: a resync counts once its markers reached all of them.
    let partitions = if matches!(sink, Sink::Kafka) { 3 } else { 1 };
    let resyncs = |es: &[Shipped]| changes(es).map(|c| resyncs_after(es, &c.map(|i| &es[i]), partitions)).unwrap_or_default();
    let events = read_shipped(&target, Duration::from_secs(60), |es| resyncs(es).len() >= 2).await;

    let api_now = api_configmaps(&client, &namespaces).await;
    let mut ids: Vec<(String, BTreeSet<&str>)> = Vec::new();
    for (sid, completed) in resyncs(&events).into_iter().take(2) {
        let of_sync: Vec<&Shipped> = events.iter().filter(|e| e.sync_id.as_ref() == Some(&sid)).collect();
        let synced: Vec<&&Shipped> = of_sync.iter().filter(|e| e.ty == "object.synced").collect();
        assert_eq!(completed["counts"]["synced"], json!(synced.len()), "resync {sid}: counts.synced against its synced events");
        // The index as it is: every object once, at its current resourceVersion, the
        // deleted one gone.
        let redelivered: BTreeMap<String, String> = synced.iter().map(|e| (e.subject.clone().unwrap(), e.rv.clone().unwrap())).collect();
        assert_eq!(redelivered.len(), synced.len(), "resync {sid} delivered an object twice");
        assert_eq!(redelivered, api_now, "resync {sid} against the API server");
        ids.push((sid, of_sync.iter().map(|e| e.id.as_str()).collect()));
    }
    // Each resync has its own sync id, hence its own event ids (markers included).
    assert_ne!(ids[0].0, ids[1].0);
    let shared: Vec<&&str> = ids[0].1.intersection(&ids[1].1).collect();
    assert!(shared.is_empty(), "event ids shared by two resyncs: {shared:?}");
    assert_rebuilt_equals_api_server(&target, &client, &namespaces, &bridge).await;
    assert!(bridge.stop(Duration::from_secs(30)).success());
    delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_resyncs_redeliver_the_current_index_with_exact_counts_and_fresh_ids() {
    resyncs_redeliver_the_index(Sink::Kafka).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_resyncs_redeliver_the_current_index_with_exact_counts_and_fresh_ids() {
    resyncs_redeliver_the_index(Sink::Nats).await;
}
