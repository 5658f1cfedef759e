//! Scenarios where features meet: a configuration (routes, resyncs, payload, relist, digest
//! key, streaming lists, a label selector, leader election with one or two replicas, resume)
//! and a schedule of faults (SIGKILL, SIGTERM, broker restarts, API server restarts, expired
//! watches, compaction, a watched namespace deleted) under churn (creates, updates, deletes,
//! re-creates, large objects), drawn from a seed or written out by a named test, run against
//! the real servers and judged by oracles that share no code path with the bridge: the API
//! server's lists against the state rebuilt by `deltaship rebuild --verify` (every marker's
//! count and digest) and by the Python consumer library (`--verify` too), and the audit of
//! every object event on every route (no repeat, no step back).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use deltaship::config::{PayloadMode, ResourceConfig, ResumeConfig, RouteConfig, SinkConfig};
use deltaship::model::SyncMode;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::bridge::Bridge;
use super::churn::try_ctl;
use super::config::{TestConfig, election, kafka, nats_stream, resource};
use super::kube::{client, delete_namespace, namespace, until_done};
use super::log::Log;
use super::state::{Consumer, consumer_matches};

/// Names the churn uses in each namespace and kind.
pub const NAMES: u64 = 30;

/// The label every object of the churn carries: `kept` on three names in four, `dropped` on
/// the others, fixed per name. A drawn label selector ships the `kept` ones alone.
const LABEL: &str = "deltaship-explore";
const SELECTOR: &str = "deltaship-explore=kept";

/// The bytes of a large ConfigMap's value (a fifth of the API server's 1 MiB limit).
const LARGE: usize = 200 * 1024;

/// A small seeded generator (SplitMix64): the same seed draws the same scenario.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent` %.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Where a scenario ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    Kafka,
    Nats,
    /// One Kafka route and one NATS route, fed by the same watches; the Kafka route lingers
    /// 400 ms, so that at a kill the two routes' consumers hold different states.
    Both,
}

/// A fault, applied while a bridge runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL, then a new bridge a second later.
    Kill,
    /// SIGTERM (a graceful stop), then a new bridge.
    Term,
    /// The Kafka broker restarted.
    KafkaRestart,
    /// The NATS server restarted.
    NatsRestart,
    /// Every watch of the API server ended (the watch cache's timeouts).
    ExpireWatches,
    /// etcd compacted: a watch resumed from an older version gets 410 Gone.
    Compact,
    /// The API server restarted (etcd kept).
    ApiServerRestart,
    /// SIGKILL, then the Kafka checkpoint topic's oldest record of each key written again
    /// after the others (the store as it was long before: its last writes lost, or a backup
    /// restored), then a new bridge. Drawn with resume on and a Kafka route.
    KillStale,
    /// The last watched namespace deleted, with its objects (drawn with two namespaces or
    /// more; the churn's writes to it fail from then on). Once: a second is a no-op.
    DeleteNamespace,
}

/// One scenario: the configuration, and each fault with how long the bridge ran before it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: Option<u64>,
    pub routes: Routes,
    /// 0: off.
    pub resync_secs: u64,
    pub payload: PayloadMode,
    pub relist: SyncMode,
    /// ConfigMaps and Secrets, or ConfigMaps alone.
    pub secrets: bool,
    pub namespaces: usize,
    pub digest_key: bool,
    /// Every resource watched with a label selector (`deltaship-explore=kept`), which three
    /// names in four carry.
    pub selector: bool,
    /// One write of a ConfigMap in eight carries a value of 200 KiB.
    pub large: bool,
    /// The initial lists are streamed (`kubernetes.streaming_lists`).
    pub streaming_lists: bool,
    /// Leader election with fencing.
    pub election: bool,
    /// Replicas sharing the lease (2 only with leader election): a SIGKILL or SIGTERM hits
    /// the leader, and a new replica replaces it, as a Deployment's would.
    pub replicas: usize,
    pub resume: bool,
    pub faults: Vec<(Duration, Fault)>,
}

impl Plan {
    /// The scenario of `seed`.
    pub fn draw(seed: u64) -> Plan {
        let mut r = Rng::new(seed);
        let routes = [Routes::Kafka, Routes::Nats, Routes::Both][r.below(3) as usize];
        let resync_secs = [0, 0, 3, 7][r.below(4) as usize];
        let payload = if r.chance(25) { PayloadMode::Patch } else { PayloadMode::Object };
        let relist = if r.chance(25) { SyncMode::Full } else { SyncMode::Diff };
        let (secrets, namespaces, digest_key) = (r.chance(50), 1 + r.below(3) as usize, r.chance(50));
        let (election, resume) = (r.chance(30), r.chance(90));
        let streaming_lists = r.chance(30);
        let replicas = if election && r.chance(50) { 2 } else { 1 };
        let (selector, large) = (r.chance(30), r.chance(30));
        let mut kinds = vec![Fault::Kill, Fault::Kill, Fault::Term, Fault::ExpireWatches, Fault::Compact, Fault::ApiServerRestart];
        if namespaces >= 2 {
            kinds.push(Fault::DeleteNamespace);
        }
        if resume && routes != Routes::Nats {
            kinds.push(Fault::KillStale);
        }
        if routes != Routes::Nats {
            kinds.push(Fault::KafkaRestart);
        }
        if routes != Routes::Kafka {
            kinds.push(Fault::NatsRestart);
        }
        let faults = (0..2 + r.below(3)).map(|_| (Duration::from_millis(1500 + r.below(8000)), kinds[r.below(kinds.len() as u64) as usize])).collect();
        Plan {
            seed: Some(seed),
            routes,
            resync_secs,
            payload,
            relist,
            secrets,
            namespaces,
            digest_key,
            selector,
            large,
            streaming_lists,
            election,
            replicas,
            resume,
            faults,
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults: Vec<String> = self.faults.iter().map(|(after, fault)| format!("{fault:?}@{}ms", after.as_millis())).collect();
        write!(
            f,
            "routes={:?} resync_secs={} payload={:?} relist={:?} secrets={} namespaces={} digest_key={} selector={} large={} streaming_lists={} election={} replicas={} resume={} faults=[{}]",
            self.routes,
            self.resync_secs,
            self.payload,
            self.relist,
            self.secrets,
            self.namespaces,
            self.digest_key,
            self.selector,
            self.large,
            self.streaming_lists,
            self.election,
            self.replicas,
            self.resume,
            faults.join(", ")
        )
    }
}

/// The churn: every 50 ms one object is created, updated or deleted (about 20 writes a
/// second), taking the ConfigMaps and Secrets given in turn, and within each every one of
/// `NAMES` names in a fixed walk: an object written is not written again for `NAMES` writes of
/// its kind and namespace. With `large`, one ConfigMap write in eight is large.
pub struct Walk {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Walk {
    pub fn start(configmaps: Vec<Api<ConfigMap>>, secrets: Vec<Api<Secret>>, large: bool) -> Walk {
        let (stop, writes) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (flag, count) = (stop.clone(), writes.clone());
        let task = tokio::spawn(async move {
            let mut n: u64 = 0;
            let targets = (configmaps.len() + secrets.len()) as u64;
            while !flag.load(Ordering::Acquire) {
                n += 1;
                let (target, k) = ((n % targets) as usize, n / targets);
                let name = format!("cm-{}", (k * 7) % NAMES);
                let delete = k.is_multiple_of(5);
                let done = match (configmaps.get(target), target.checked_sub(configmaps.len()).and_then(|i| secrets.get(i))) {
                    (Some(cms), _) if delete => cms.delete(&name, &DeleteParams::default()).await.map(|_| ()),
                    (Some(cms), _) => {
                        let cm = if large && k % 8 == 1 { large_configmap(&name, n) } else { configmap(&name, n) };
                        cms.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&cm)).await.map(|_| ())
                    }
                    (None, Some(s)) if delete => s.delete(&name, &DeleteParams::default()).await.map(|_| ()),
                    (None, Some(s)) => s.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&secret(&name, n))).await.map(|_| ()),
                    (None, None) => unreachable!("target {target} of {targets}"),
                };
                if done.is_ok() {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Walk { stop, writes, task }
    }

    /// Stops the churn; the writes that went through.
    pub async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Release);
        self.task.await.unwrap();
        self.writes.load(Ordering::Relaxed)
    }
}

/// The labels of the churn's object `name` (see `LABEL`).
fn labels(name: &str) -> serde_json::Value {
    let dropped = name.rsplit('-').next().and_then(|i| i.parse::<u64>().ok()).is_some_and(|i| i % 4 == 3);
    json!({ LABEL: if dropped { "dropped" } else { "kept" } })
}

pub fn configmap(name: &str, n: u64) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels(name)}, "data": {"n": n.to_string()}}))
        .unwrap()
}

fn large_configmap(name: &str, n: u64) -> ConfigMap {
    let mut cm = configmap(name, n);
    let unit = format!("{n:x}");
    cm.data.get_or_insert_default().insert("large".into(), unit.repeat(LARGE / unit.len()));
    cm
}

pub fn secret(name: &str, n: u64) -> Secret {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels(name)}, "stringData": {"n": n.to_string()}}),
    )
    .unwrap()
}

/// One server fault at a time across the explorer's lanes: two restarts of one server at
/// once race in its control script (each stops the process the other started).
static SERVER_FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn server_fault(component: &'static str, action: &'static str) -> Result<(), String> {
    let _one = SERVER_FAULTS.lock().await;
    try_ctl(component, action)
}

/// A bridge with `config`, once ready (and `leading`, when asked). One that exits first (the
/// API server down at its start, or its lease lost while another lane restarts it) is started
/// again after a second, as the kubelet restarts a pod's container, for two minutes.
fn launch(config: &str, leading: bool) -> Bridge {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut b = Bridge::start(config);
    loop {
        if !b.running() {
            assert!(std::time::Instant::now() < deadline, "deltaship kept exiting before it was ready:\n{}", b.log_text());
            std::thread::sleep(Duration::from_secs(1));
            b = Bridge::start(config);
            continue;
        }
        if b.ready() && (!leading || b.leads()) {
            return b;
        }
        assert!(std::time::Instant::now() < deadline, "deltaship not ready{} within 120 s:\n{}", if leading { " and leading" } else { "" }, b.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Writes the oldest record of each key of the checkpoint topic again, after the others.
fn stale_checkpoints(brokers: &str, topic: &str) {
    let mut oldest: Vec<super::kafka::Record> = Vec::new();
    for r in super::kafka::read_to_end(brokers, topic, Duration::from_secs(60)) {
        if !oldest.iter().any(|o| o.key == r.key) {
            oldest.push(r);
        }
    }
    super::kafka::write_again(brokers, topic, &oldest);
}

/// What a scenario that kept every promise measured, one line.
pub struct Figures(pub String);

/// Runs `plan` against the real servers: `Err` names the broken promise (with the last
/// bridge's log).
pub async fn run(plan: &Plan) -> Result<Figures, String> {
    let env = super::env();
    let kube = client().await;
    let mut namespaces = Vec::new();
    for _ in 0..plan.namespaces {
        namespaces.push(namespace(&kube, "it-seam").await);
    }
    let names: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    let cluster = super::unique("seam");
    let dir = std::env::temp_dir().join(super::unique("seam-key"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("digest-key");
    std::fs::write(&key_file, "5f0c3b1d9e2a4c6b8d7e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e\n").unwrap();
    let selector = plan.selector.then_some(SELECTOR);
    let shaped =
        |kind: &str| ResourceConfig { payload: plan.payload, relist: plan.relist, label_selector: selector.map(str::to_string), ..resource("", kind, &names) };
    let mut config = TestConfig::new().cluster(&cluster).resource(shaped("ConfigMap"));
    if plan.secrets {
        config = config.resource(shaped("Secret"));
    }
    let checkpoints = super::unique("it-checkpoints");
    let resume =
        ResumeConfig { enabled: plan.resume, kafka_topic: checkpoints.clone(), nats_bucket: super::unique("it-checkpoints"), ..ResumeConfig::default() };
    let lease = super::unique("seam");
    let config = config.with(|c| {
        c.resume = resume;
        c.kubernetes.resync_secs = plan.resync_secs;
        c.kubernetes.streaming_lists = plan.streaming_lists;
        if plan.digest_key {
            c.redaction.digest_key_file = Some(key_file.clone());
        }
        if plan.election {
            c.leader_election = election(&namespaces[0], &lease);
        }
    });
    // One topic for every kind: the rebuild verifies every marker of them all.
    let topic = format!("{}.objects", super::unique("it-seam"));
    let stream = super::unique("SEAM").to_uppercase().replace('-', "_");
    let (kafka_log, nats_log) = (Log::Kafka { brokers: env.kafka.clone(), topic: topic.clone() }, Log::Nats { stream: stream.clone() });
    let (mut kafka_sink, mut nats_sink) = (kafka(&env.kafka, &topic), nats_stream(&env.nats, &cluster, &stream));
    // The leader's fence record inside the test's stream (the default subject is outside it,
    // and the configuration is refused as it should be).
    nats_sink.jetstream.fence_subject = Some(format!("{cluster}._fence"));
    let (logs, config) = match plan.routes {
        Routes::Kafka => (vec![kafka_log], config.kafka(kafka_sink)),
        Routes::Nats => (vec![nats_log], config.nats(nats_sink)),
        Routes::Both => {
            kafka_sink.librdkafka.insert("linger.ms".into(), "400".into());
            let route =
                |name: &str, sink| RouteConfig { name: name.into(), sink, resources: Vec::new(), payload: None, format: None, filter: Default::default() };
            let both = vec![route("analytics", SinkConfig::Kafka(Box::new(kafka_sink))), route("functions", SinkConfig::Nats(Box::new(nats_sink)))];
            (vec![kafka_log, nats_log], config.with(|c| c.routes = both))
        }
    };
    let config = config.toml();
    let cms: Vec<Api<ConfigMap>> = namespaces.iter().map(|ns| Api::namespaced(kube.clone(), ns)).collect();
    let secrets: Vec<Api<Secret>> = if plan.secrets { namespaces.iter().map(|ns| Api::namespaced(kube.clone(), ns)).collect() } else { Vec::new() };
    for i in 0..NAMES {
        let name = format!("cm-{i}");
        // Retried: the explorer's other lanes restart the API server.
        let (cm, s, post) = (&configmap(&name, 0), &secret(&name, 0), &PostParams::default());
        for api in &cms {
            until_done("create a ConfigMap", 409, || api.create(post, cm)).await;
        }
        for api in &secrets {
            until_done("create a Secret", 409, || api.create(post, s)).await;
        }
    }
    let walk = Walk::start(cms.clone(), secrets.clone(), plan.large);
    // A replica: with leader election, the first one leads before the next starts (a
    // standby is ready too).
    let start = |first: bool| launch(&config, plan.election && first);
    let mut bridges: Vec<Bridge> = (0..plan.replicas).map(|i| start(i == 0)).collect();
    // As the kubelet restarts a pod's container: a bridge that stopped by itself (a leader
    // that could not renew its lease in time stops publishing and exits) is started again.
    let mut restarted = 0;
    let mut supervise = |bridges: &mut Vec<Bridge>| {
        for b in bridges.iter_mut() {
            if !b.running() {
                restarted += 1;
                *b = start(false);
            }
        }
    };
    let mut deleted = None;
    for (after, fault) in &plan.faults {
        tokio::time::sleep(*after).await;
        supervise(&mut bridges);
        match fault {
            Fault::Kill | Fault::Term | Fault::KillStale => {
                // The leader (or the only replica) is hit; a new replica replaces it.
                let hit = bridges.iter().position(Bridge::leads).unwrap_or(0);
                let mut gone = bridges.swap_remove(hit);
                gone.signal(if *fault == Fault::Term { "TERM" } else { "KILL" });
                gone.wait_exit(Duration::from_secs(60));
                if *fault == Fault::KillStale {
                    let (brokers, topic) = (env.kafka.clone(), checkpoints.clone());
                    tokio::task::spawn_blocking(move || stale_checkpoints(&brokers, &topic)).await.unwrap();
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                bridges.push(start(bridges.is_empty()));
            }
            Fault::KafkaRestart => server_fault("kafka", "restart").await?,
            Fault::NatsRestart => server_fault("nats", "restart").await?,
            Fault::ExpireWatches => server_fault("kube", "expire-watches").await?,
            Fault::Compact => server_fault("kube", "compact").await?,
            Fault::ApiServerRestart => server_fault("kube", "restart").await?,
            Fault::DeleteNamespace => {
                let ns = namespaces.last().expect("a namespace");
                delete_namespace(&kube, ns).await;
                deleted = Some(ns.clone());
            }
        }
    }
    // Long enough for two resyncs (or a few seconds) after the last fault, then quiet; with
    // leader election, some replica leads by then.
    tokio::time::sleep(Duration::from_secs((2 * plan.resync_secs).max(5))).await;
    supervise(&mut bridges);
    if plan.election {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !bridges.iter().any(Bridge::leads) {
            supervise(&mut bridges);
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "no replica leads a minute after the last fault
{}",
                    bridges.iter().map(Bridge::log_text).collect::<Vec<_>>().join("\n---\n")
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let writes = walk.finish().await;
    // Quiescence: a deleted namespace is gone, its objects deleted (the namespace controller
    // takes its time), before the lists that the oracles compare with.
    if let Some(ns) = deleted {
        let all: Api<Namespace> = Api::all(kube.clone());
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        while until_done("read the deleted namespace", 404, || all.get_opt(&ns)).await.flatten().is_some() {
            if std::time::Instant::now() >= deadline {
                return Err(format!("namespace {ns} still there 3 minutes after its delete"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let mut existing = HashSet::new();
    let all = &selector.map_or_else(ListParams::default, |s| ListParams::default().labels(s));
    for api in &cms {
        let listed = until_done("list the ConfigMaps", 0, || api.list(all)).await;
        existing.extend(listed.into_iter().flat_map(|l| l.items).filter_map(|c| c.metadata.uid));
    }
    for api in &secrets {
        let listed = until_done("list the Secrets", 0, || api.list(all)).await;
        existing.extend(listed.into_iter().flat_map(|l| l.items).filter_map(|s| s.metadata.uid));
    }
    let mut figures = Vec::new();
    let text = bridges.iter().map(Bridge::log_text).collect::<Vec<_>>().join("\n---\n");
    for log in &logs {
        let sink = if matches!(log, Log::Nats { .. }) { "nats" } else { "kafka" };
        for consumer in [Consumer::Rebuild, Consumer::Python] {
            consumer_matches(&kube, consumer, log.rebuild_args(), &namespaces, selector, Duration::from_secs(120))
                .await
                .map_err(|e| format!("{sink}: {e}\n{text}"))?;
        }
        let h = log.audited(&existing).await;
        figures.push(format!(
            "{sink}: writes={writes} restarted={restarted} events={} resynced={} repeats={} steps_back={} resurrections={} spurious_deletes={}",
            h.events, h.resyncs, h.repeats, h.steps_back, h.resurrections, h.spurious_deletes
        ));
        if (h.repeats, h.steps_back, h.resurrections, h.spurious_deletes) != (0, 0, 0, 0) {
            return Err(format!("{sink}: {}\n{}\n{text}", figures.join("; "), h.problems.join("\n")));
        }
    }
    drop(bridges);
    for ns in &namespaces {
        delete_namespace(&kube, ns).await;
    }
    Ok(Figures(figures.join("; ")))
}
