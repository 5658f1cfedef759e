//! Exactly once through crashes, against the real servers on a busy machine: a bridge
//! shipping ConfigMaps that are created, updated and deleted all along is killed (SIGKILL)
//! fifty times in a row, at random moments, and started again each time, on Kafka and on
//! NATS JetStream. Read back from the start, the stream holds every change once: per object
//! (uid) its resourceVersions only go up, so no event is repeated and none steps back, and no
//! object comes back after its delete or is deleted while it exists; the state rebuilt from
//! it equals the API server's; and every marker's count and digest match the state held at
//! it (`rebuild --verify`).
//!
//! The tests take SERIAL: both burn a core, and the kills are timed against the churn.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use deltaship::config::ResumeConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats_stream};
use support::kube::{client, delete_namespace, namespace};
use support::log::Log;
use support::state::assert_rebuild_matches;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const KILLS: usize = 50;
/// Names the churn uses: each write creates, updates or deletes one of them.
const NAMES: u64 = 30;

/// The churn: every 50 ms one ConfigMap of `NAMES` is created, updated or deleted (about 20
/// writes a second), until stopped.
struct Churn {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Churn {
    fn start(cms: Api<ConfigMap>) -> Churn {
        let (stop, writes) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (flag, count) = (stop.clone(), writes.clone());
        let task = tokio::spawn(async move {
            let mut n: u64 = 0;
            while !flag.load(Ordering::Acquire) {
                n += 1;
                // A fixed walk over the names and the three kinds of writes.
                let name = format!("cm-{}", (n * 7) % NAMES);
                let done = match n % 5 {
                    0 => cms.delete(&name, &DeleteParams::default()).await.map(|_| ()),
                    _ => cms.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&cm(&name, n))).await.map(|_| ()),
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
    let churn = Churn::start(cms.clone());
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
        h.events, h.repeats, h.steps_back, h.resurrections, h.spurious_deletes
    );
    assert_eq!(
        (h.repeats, h.steps_back, h.resurrections, h.spurious_deletes),
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
