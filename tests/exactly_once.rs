//! Exactly once through crashes, against the real servers on a busy machine: a bridge
//! shipping ConfigMaps that are created, updated and deleted all along is killed (SIGKILL)
//! fifty times in a row, at random moments, and started again each time, on Kafka and on
//! NATS JetStream. Read back from the start, the stream holds every change once: per object
//! (uid) its resourceVersions only go up, so no event is repeated and none steps back, and no
//! object comes back after its delete or is deleted while it exists; the state rebuilt from
//! it equals the API server's; and every marker's count and digest match the state held at
//! it (`rebuild --verify`).
//!
//! The same where features meet crashes: ConfigMaps and Secrets of three namespaces, keyed
//! digests, three SIGKILLs under churn, with resyncs every few seconds, or shipped by two
//! routes. A resync after a resumed start shipped only the objects whose content the index
//! had seen (those received after the checkpoint were skipped as delivered without it) while
//! its marker counted them all, so consumers removed live objects; and its events moved the
//! checkpoint back. Two routes resumed from the oldest route's checkpoint, whose markers then
//! failed on both.
//!
//! The tests take SERIAL: each burns a core, and the kills are timed against the churn.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use deltaship::config::{ResumeConfig, RouteConfig, SinkConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats_stream, resource};
use support::kube::{client, delete_namespace, namespace};
use support::log::Log;
use support::state::assert_rebuild_matches;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const KILLS: usize = 50;
/// Names the churn uses: each write creates, updates or deletes one of them.
const NAMES: u64 = 30;

/// The churn: every 50 ms one object is created, updated or deleted (about 20 writes a
/// second), taking the ConfigMaps and Secrets given in turn, each of `NAMES` names, until
/// stopped.
struct Churn {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Churn {
    fn start(configmaps: Vec<Api<ConfigMap>>, secrets: Vec<Api<Secret>>) -> Churn {
        let (stop, writes) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (flag, count) = (stop.clone(), writes.clone());
        let task = tokio::spawn(async move {
            let mut n: u64 = 0;
            let targets = (configmaps.len() + secrets.len()) as u64;
            while !flag.load(Ordering::Acquire) {
                n += 1;
                // A fixed walk over the targets, and within each over every name and the
                // three kinds of writes: an object written is not written again for `NAMES`
                // writes of its target.
                let (target, k) = ((n % targets) as usize, n / targets);
                let name = format!("cm-{}", (k * 7) % NAMES);
                let delete = k.is_multiple_of(5);
                let done = match (configmaps.get(target), target.checked_sub(configmaps.len()).and_then(|i| secrets.get(i))) {
                    (Some(cms), _) if delete => cms.delete(&name, &DeleteParams::default()).await.map(|_| ()),
                    (Some(cms), _) => cms.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&cm(&name, n))).await.map(|_| ()),
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
        Churn { stop, writes, task }
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Release);
        self.task.await.unwrap();
        self.writes.load(Ordering::Relaxed)
    }
}

fn cm(name: &str, n: u64) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"n": n.to_string()}})).unwrap()
}

fn secret(name: &str, n: u64) -> Secret {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"n": n.to_string()}})).unwrap()
}

async fn killed_again_and_again(on_nats: bool) {
    let _serial = SERIAL.lock().await;
    let _busy = support::CpuBurner::start();
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-once").await;
    let cluster = support::unique("once");
    let resume = ResumeConfig { kafka_topic: support::unique("it-checkpoints"), ..ResumeConfig::default() };
    let (log, config) = if on_nats {
        let stream = support::unique("ONCE").to_uppercase().replace('-', "_");
        let sink = nats_stream(&env.nats, &cluster, &stream);
        (Log::Nats { stream }, TestConfig::new().cluster(&cluster).configmaps(&ns).nats(sink).with(|c| c.resume = resume).toml())
    } else {
        let prefix = support::unique("it-once");
        let config =
            TestConfig::new().cluster(&cluster).configmaps(&ns).kafka(kafka(&env.kafka, &format!("{prefix}.{{plural}}"))).with(|c| c.resume = resume).toml();
        (Log::Kafka { brokers: env.kafka.clone(), topic: format!("{prefix}.configmaps") }, config)
    };
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for i in 0..NAMES {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), 0)).await.unwrap();
    }
    let churn = Churn::start(vec![cms.clone()], Vec::new());
    // Kills at moments spread over a bridge's first 1.5 s after it is ready: while it
    // resumes, ships, and writes its checkpoint (every second).
    let mut moment: u64 = 7;
    for _ in 0..KILLS {
        let mut bridge = Bridge::start(&config);
        bridge.wait_ready(Duration::from_secs(120));
        moment = (moment * 37 + 11) % 1500;
        tokio::time::sleep(Duration::from_millis(moment)).await;
        bridge.signal("KILL");
        bridge.wait_exit(Duration::from_secs(10));
    }
    let writes = churn.finish().await;
    let mut last = Bridge::start(&config);
    last.wait_ready(Duration::from_secs(120));
    assert_rebuild_matches(&kube, log.rebuild_args(), std::slice::from_ref(&ns), Duration::from_secs(120)).await;
    let existing: HashSet<String> = cms.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.uid).collect();
    let h = log.audited(&existing).await;
    let sink = if on_nats { "nats" } else { "kafka" };
    eprintln!(
        "ONCE-FIGURES sink={sink} kills={KILLS} writes={writes} events={} repeats={} steps_back={} resurrections={} spurious_deletes={} state=exact markers=verified",
        h.events,
        h.repeats + h.resyncs,
        h.steps_back,
        h.resurrections,
        h.spurious_deletes
    );
    assert_eq!(
        (h.repeats + h.resyncs, h.steps_back, h.resurrections, h.spurious_deletes),
        (0, 0, 0, 0),
        "after {KILLS} SIGKILLs:\n{}\n{}",
        h.problems.join("\n"),
        last.log_text()
    );
    drop(last);
    delete_namespace(&kube, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_sigkills_in_a_row_under_churn_deliver_every_change_once_on_kafka() {
    killed_again_and_again(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_sigkills_in_a_row_under_churn_deliver_every_change_once_on_nats() {
    killed_again_and_again(true).await;
}

/// Resyncs every `RESYNC_SECS` (client-go's `defaultResync` is what users set; a few seconds
/// here, so that each run of the bridge resyncs twice or more before it is killed).
const RESYNC_SECS: u64 = 4;
const SEAM_KILLS: usize = 3;
/// How long each run of the bridge ships before it is killed: two resyncs and more.
const SEAM_RUN: Duration = Duration::from_secs(10);

/// Where a seam scenario ships.
#[derive(Clone, Copy, PartialEq)]
enum Routes {
    Kafka,
    Nats,
    /// One Kafka route and one NATS route, fed by the same watches.
    Both,
}

/// ConfigMaps and Secrets of three namespaces, keyed digests, resyncs every `resync_secs` (0:
/// off), shipped to `routes`: killed three times under churn, each run shipping (and
/// resyncing) a while first. On every route the rebuilt state equals the API server's, every
/// marker verifies (the resyncs' included), and nothing but the resyncs repeats.
async fn crashes_where_features_meet(routes: Routes, resync_secs: u64) {
    let _serial = SERIAL.lock().await;
    let _busy = support::CpuBurner::start();
    let env = support::env();
    let kube = client().await;
    let mut namespaces = Vec::new();
    for _ in 0..3 {
        namespaces.push(namespace(&kube, "it-seam").await);
    }
    let names: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    let cluster = support::unique("seam");
    let dir = std::env::temp_dir().join(support::unique("seam-key"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("digest-key");
    std::fs::write(&key_file, "5f0c3b1d9e2a4c6b8d7e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e\n").unwrap();
    let resume = ResumeConfig { kafka_topic: support::unique("it-checkpoints"), nats_bucket: support::unique("it-checkpoints"), ..ResumeConfig::default() };
    let config = TestConfig::new().cluster(&cluster).resource(resource("", "ConfigMap", &names)).resource(resource("", "Secret", &names)).with(|c| {
        c.resume = resume;
        c.kubernetes.resync_secs = resync_secs;
        c.redaction.digest_key_file = Some(key_file.clone());
    });
    // One topic for both kinds: the rebuild verifies every marker of both.
    let topic = format!("{}.objects", support::unique("it-seam"));
    let stream = support::unique("SEAM").to_uppercase().replace('-', "_");
    let (kafka_log, nats_log) = (Log::Kafka { brokers: env.kafka.clone(), topic: topic.clone() }, Log::Nats { stream: stream.clone() });
    let (kafka_sink, nats_sink) = (kafka(&env.kafka, &topic), nats_stream(&env.nats, &cluster, &stream));
    let (logs, config) = match routes {
        Routes::Kafka => (vec![kafka_log], config.kafka(kafka_sink)),
        Routes::Nats => (vec![nats_log], config.nats(nats_sink)),
        Routes::Both => {
            // The Kafka route lingers, so that at each kill the NATS route's consumers hold
            // changes the Kafka route's do not have yet: their states differ, as they do
            // wherever two sinks answer at different speeds.
            let mut kafka_sink = kafka_sink;
            kafka_sink.librdkafka.insert("linger.ms".into(), "400".into());
            let route =
                |name: &str, sink| RouteConfig { name: name.into(), sink, resources: Vec::new(), payload: None, format: None, filter: Default::default() };
            let both = vec![route("analytics", SinkConfig::Kafka(Box::new(kafka_sink))), route("functions", SinkConfig::Nats(Box::new(nats_sink)))];
            (vec![kafka_log, nats_log], config.with(|c| c.routes = both))
        }
    };
    let config = config.toml();
    let cms: Vec<Api<ConfigMap>> = namespaces.iter().map(|ns| Api::namespaced(kube.clone(), ns)).collect();
    let secrets: Vec<Api<Secret>> = namespaces.iter().map(|ns| Api::namespaced(kube.clone(), ns)).collect();
    for i in 0..NAMES {
        let name = format!("cm-{i}");
        for api in &cms {
            api.create(&PostParams::default(), &cm(&name, 0)).await.unwrap();
        }
        for api in &secrets {
            api.create(&PostParams::default(), &secret(&name, 0)).await.unwrap();
        }
    }
    let churn = Churn::start(cms.clone(), secrets.clone());
    for _ in 0..SEAM_KILLS {
        let mut bridge = Bridge::start(&config);
        bridge.wait_ready(Duration::from_secs(120));
        tokio::time::sleep(SEAM_RUN).await;
        bridge.signal("KILL");
        bridge.wait_exit(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut last = Bridge::start(&config);
    last.wait_ready(Duration::from_secs(120));
    tokio::time::sleep(SEAM_RUN).await;
    let writes = churn.finish().await;
    let text = last.log_text();
    let mut existing = HashSet::new();
    for api in &cms {
        existing.extend(api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.uid));
    }
    for log in &logs {
        assert_rebuild_matches(&kube, log.rebuild_args(), &namespaces, Duration::from_secs(120)).await;
        let h = log.audited(&existing).await;
        let sink = if matches!(log, Log::Nats { .. }) { "nats" } else { "kafka" };
        eprintln!(
            "SEAM-FIGURES routes={} sink={sink} resync_secs={resync_secs} kills={SEAM_KILLS} writes={writes} events={} resynced={} repeats={} steps_back={} resurrections={} spurious_deletes={} state=exact markers=verified",
            logs.len(),
            h.events,
            h.resyncs,
            h.repeats,
            h.steps_back,
            h.resurrections,
            h.spurious_deletes
        );
        assert!(resync_secs == 0 || h.resyncs > 0, "resyncs ran");
        // A full sync after a restart (two routes) ships every object again as `synced`,
        // with new ids: a resync of a kind, not a repeat of a change.
        assert_eq!(
            (h.repeats, h.steps_back, h.resurrections, h.spurious_deletes),
            (0, 0, 0, 0),
            "after {SEAM_KILLS} SIGKILLs:\n{}\n{text}",
            h.problems.join("\n")
        );
    }
    // The start under test: a resume of every watch from one route, a full sync (reason
    // several_routes) from two.
    let (start, starts) = if routes == Routes::Both { ("reason=\"several_routes\"", 6) } else { ("Resuming from the checkpoint", 6) };
    assert_eq!(text.matches(start).count(), starts, "each of the six watches' start: {start}\n{text}");
    drop(last);
    for ns in &namespaces {
        delete_namespace(&kube, ns).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resyncs_through_three_sigkills_ship_what_their_markers_count_on_kafka() {
    crashes_where_features_meet(Routes::Kafka, RESYNC_SECS).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resyncs_through_three_sigkills_ship_what_their_markers_count_on_nats() {
    crashes_where_features_meet(Routes::Nats, RESYNC_SECS).await;
}

/// Two routes of the same watches, each acknowledging on its own: after a crash their
/// consumers hold different states. Resumed from the oldest route's checkpoint, the other
/// route missed what the first had received (skipped as delivered) and both got a resume
/// marker describing the first's state; markers failed on both.
#[tokio::test(flavor = "multi_thread")]
async fn two_routes_through_three_sigkills_verify_every_marker_on_both() {
    crashes_where_features_meet(Routes::Both, 0).await;
}
