//! etcd restored from a backup while the bridge runs, against the real servers: the API
//! server comes back with an older history than the one the bridge shipped, its watch
//! position ahead of anything the API server will answer for. The bridge detects it, relists
//! in full, the state rebuilt from the stream equals the API server's, and a restart resumes
//! from the restored history, not the lost one.
//!
//! Restored while the bridge was down, and written past the checkpoint's version before it
//! starts again (a real cluster does that within seconds): the checkpoint is not ahead of
//! the API server, yet its newest objects are older at the API server than it recorded, so
//! it is not resumed from (reason `rewound`) and a full sync replaces what was shipped.
//! Before, the bridge continued from it and shipped only the later writes, every marker
//! verifying a state the API server no longer had.
//!
//! They restore the shared etcd (every object made after the snapshot is lost), so they live
//! in a test binary of their own, one at a time; run it alone (`cargo test --test restored_etcd`).

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use deltaship::config::ResumeConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::churn::{ctl, metric};
use support::config::{TestConfig, kafka};
use support::kafka::Record;
use support::kube::{client, delete_namespace, eventually, namespace, until_done};
use support::state::assert_rebuild_matches;

/// Writes after the snapshot: the watch's position ends this far (at least) past the
/// snapshot's revision, more than the API server and the controller manager write while
/// they start again on the restored etcd (a handful), so the restored API server stays
/// behind the position the bridge reached.
const LOST_WRITES: usize = 60;

/// How long the bridge may take to notice, from the restore's end: the watch reconnects
/// within its backoff (at most 30 s) and asks at once; the check every 75 s of silence is
/// the fallback. Generous: the machine is busy.
const DETECTION_BOUND: Duration = Duration::from_secs(150);

/// One restore at a time: each replaces the shared etcd.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": v}})).unwrap()
}

async fn put(cms: &Api<ConfigMap>, name: &str, v: &str) {
    let (params, patch) = (PatchParams::apply("it").force(), Patch::Apply(cm(name, v)));
    until_done(&format!("applying {name}"), 0, || cms.patch(name, &params, &patch)).await;
}

async fn delete(cms: &Api<ConfigMap>, name: &str) {
    let params = DeleteParams::default();
    until_done(&format!("deleting {name}"), 404, || cms.delete(name, &params)).await;
}

/// Every record of `topic` (as many as its partitions' high watermarks count).
async fn all_records(brokers: &str, topic: &str) -> Vec<Record> {
    let (brokers, topic) = (brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let total = support::kafka::total(&brokers, &topic) as usize;
        support::kafka::read_until(&brokers, &topic, Duration::from_secs(120), |r| r.len() >= total)
    })
    .await
    .unwrap()
}

/// What `topic` holds beyond `before` (by partition and offset), counted (see `counted`),
/// once it holds `last`.
async fn shipped_since(brokers: &str, topic: &str, before: &[Record], last: &str) -> BTreeMap<String, usize> {
    let seen: HashSet<(i32, i64)> = before.iter().map(|r| (r.partition, r.offset)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let new: Vec<Record> = all_records(brokers, topic).await.into_iter().filter(|r| !seen.contains(&(r.partition, r.offset))).collect();
        let shipped = counted(&new);
        if shipped.contains_key(last) || Instant::now() > deadline {
            return shipped;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `type` (object events, without the common prefix) or `type reason mode` (markers), counted.
fn counted(records: &[Record]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in records {
        let ty = r.event_type().trim_start_matches("dev.deltaship.").trim_start_matches("object.").to_string();
        let what = if ty.starts_with("sync.") {
            let m = r.json();
            format!("{ty} {} {}", m["reason"].as_str().unwrap_or_default(), m["mode"].as_str().unwrap_or_default())
        } else {
            format!("{ty} {}", r.header("ce_subject"))
        };
        *out.entry(what).or_default() += 1;
    }
    out
}

/// The bridge's checkpoint holds everything it shipped (nothing pending, nothing unwritten).
fn wait_checkpointed(bridge: &Bridge) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !bridge
        .get("/metrics")
        .is_some_and(|(_, m)| metric(&m, "deltaship_checkpoint_pending_events") == 0.0 && metric(&m, "deltaship_checkpoint_unwritten_records") == 0.0)
    {
        assert!(Instant::now() < deadline, "the checkpoint never caught up:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    // One more write interval (200 ms), so that the last write is confirmed.
    std::thread::sleep(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_restored_under_a_running_bridge_is_detected_relisted_in_full_and_not_resumed_from() {
    let _serial = SERIAL.lock().await;
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-restore").await;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), "0")).await.unwrap();
    }
    eventually(Duration::from_secs(60), "kube-root-ca.crt", || {
        let cms = cms.clone();
        async move { cms.get_opt("kube-root-ca.crt").await.ok().flatten() }
    })
    .await;
    let prefix = support::unique("it-restore");
    let topic = format!("{prefix}.configmaps");
    let resume = ResumeConfig { interval_ms: 200, kafka_topic: support::unique("it-restore-checkpoints"), ..ResumeConfig::default() };
    let config = TestConfig::new()
        .cluster(&support::unique("restore"))
        .configmaps(&ns)
        .kafka(kafka(&env.kafka, &format!("{prefix}.{{plural}}")))
        .with(|c| c.resume = resume)
        .toml();
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(90));
    let rebuild = vec!["--kafka".to_string(), env.kafka.clone(), "--topic".to_string(), topic.clone()];
    let namespaces = std::slice::from_ref(&ns);

    // Changes before the snapshot: kept by the restore.
    put(&cms, "cm-0", "1").await;
    delete(&cms, "cm-1").await;
    put(&cms, "kept", "0").await;
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(60)).await;
    ctl("kube", "snapshot");

    // Changes after it, shipped and checkpointed, then lost: three creates, updates (many,
    // to take the watch's position well past the snapshot) and two deletes.
    for name in ["lost-0", "lost-1", "lost-2"] {
        put(&cms, name, "0").await;
    }
    for i in 0..LOST_WRITES {
        put(&cms, &format!("cm-{}", 2 + i % 2), &format!("lost-{i}")).await;
    }
    delete(&cms, "cm-4").await;
    delete(&cms, "cm-5").await;
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(60)).await;
    wait_checkpointed(&bridge);
    let before = all_records(&env.kafka, &topic).await;

    let (restoring, restore_began) = (Instant::now(), chrono::Utc::now().to_rfc3339());
    ctl("kube", "restore");
    let (restored, restore_ended) = (Instant::now(), chrono::Utc::now().to_rfc3339());
    let detected = loop {
        let stalls = bridge.get("/metrics").map_or(0.0, |(_, m)| metric(&m, "deltaship_watch_stalls_total"));
        if stalls > 0.0 {
            break restored.elapsed();
        }
        assert!(restored.elapsed() < DETECTION_BOUND, "no stall detected within {DETECTION_BOUND:?} of the restore:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(250));
    };
    let metrics = bridge.get("/metrics").unwrap().1;
    let ahead = metric(&metrics, "deltaship_watch_stalls_total{resource=\"configmaps\",reason=\"ahead\"}")
        + metric(&metrics, "deltaship_watch_stalls_total{resource=\"configmaps\",reason=\"too_large\"}");
    assert_eq!(ahead, 1.0, "one stall, for the replaced history:\n{metrics}");
    let log = bridge.log_text();
    let line = log.lines().find(|l| l.contains("ERROR") && l.contains("its history was replaced"));
    assert!(line.is_some(), "logged at ERROR:\n{log}");
    eprintln!("restore from {restore_began} to {restore_ended}; {}", line.unwrap());
    eprintln!(
        "the restore took {:.1} s (etcd, API server and controller manager restarted); the bridge had detected it {:.1} s after its end",
        (restored - restoring).as_secs_f64(),
        detected.as_secs_f64()
    );

    // Changes on the restored history.
    put(&cms, "made-after", "0").await;
    put(&cms, "cm-6", "after").await;
    delete(&cms, "cm-7").await;
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(90)).await;
    bridge.wait_ready(Duration::from_secs(60));

    // What the restore shipped: one full relist (markers on each of the 3 partitions) with
    // the restored objects as `synced` and the lost ones as `deleted`, then the live changes.
    let shipped = shipped_since(&env.kafka, &topic, &before, &format!("deleted {ns}/cm-7")).await;
    assert_eq!(shipped.get("sync.started relist full"), Some(&3), "{shipped:#?}");
    assert_eq!(shipped.get("sync.completed relist full"), Some(&3), "{shipped:#?}");
    for name in ["lost-0", "lost-1", "lost-2"] {
        assert_eq!(shipped.get(&format!("deleted {ns}/{name}")), Some(&1), "{name}: {shipped:#?}");
    }
    for name in ["cm-2", "cm-3", "cm-4", "cm-5", "kept"] {
        assert_eq!(shipped.get(&format!("synced {ns}/{name}")), Some(&1), "{name} as restored: {shipped:#?}");
    }
    for what in ["added made-after", "updated cm-6", "deleted cm-7"] {
        let (ty, name) = what.split_once(' ').unwrap();
        assert_eq!(shipped.get(&format!("{ty} {ns}/{name}")), Some(&1), "{what}: {shipped:#?}");
    }
    eprintln!("shipped after the restore: {shipped:#?}");

    // A restart resumes from the restored history's checkpoint: no fallback, only what
    // changed while it was down.
    wait_checkpointed(&bridge);
    bridge.stop(Duration::from_secs(30));
    let before = all_records(&env.kafka, &topic).await;
    put(&cms, "made-while-down", "0").await;
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(90));
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(60)).await;
    let metrics = bridge.get("/metrics").unwrap().1;
    assert_eq!(metric(&metrics, "deltaship_resume_fallbacks_total"), 0.0, "resumed, not refused:\n{metrics}");
    let shipped = shipped_since(&env.kafka, &topic, &before, "sync.completed resume diff").await;
    let want = BTreeMap::from([
        ("sync.started resume diff".to_string(), 3),
        ("sync.completed resume diff".to_string(), 3),
        (format!("added {ns}/made-while-down"), 1),
    ]);
    assert_eq!(shipped, want, "the restart ships only the change made while it was down");
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&kube, &ns).await;
}

/// The API server's current resourceVersion (a list of at most one object).
async fn current_version(cms: &Api<ConfigMap>) -> u64 {
    let params = kube::api::ListParams::default().limit(1);
    let list = until_done("listing ConfigMaps", 0, || cms.list_metadata(&params)).await.expect("a list");
    list.metadata.resource_version.and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_restored_while_the_bridge_was_down_and_written_past_its_checkpoint_is_not_resumed_from() {
    let _serial = SERIAL.lock().await;
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-restore-down").await;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), "0")).await.unwrap();
    }
    let prefix = support::unique("it-restore-down");
    let topic = format!("{prefix}.configmaps");
    let resume = ResumeConfig { interval_ms: 200, kafka_topic: support::unique("it-restore-checkpoints"), ..ResumeConfig::default() };
    let config = TestConfig::new()
        .cluster(&support::unique("restore-down"))
        .configmaps(&ns)
        .kafka(kafka(&env.kafka, &format!("{prefix}.{{plural}}")))
        .with(|c| c.resume = resume)
        .toml();
    let rebuild = vec!["--kafka".to_string(), env.kafka.clone(), "--topic".to_string(), topic.clone()];
    let namespaces = std::slice::from_ref(&ns);
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(90));
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(60)).await;
    ctl("kube", "snapshot");

    // After the snapshot: updates (older again once restored) and a create (gone once
    // restored), shipped and checkpointed; then the bridge stops.
    for i in 0..4 {
        put(&cms, &format!("cm-{i}"), "lost").await;
    }
    put(&cms, "lost-0", "0").await;
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(60)).await;
    wait_checkpointed(&bridge);
    bridge.stop(Duration::from_secs(30));
    let checkpointed = current_version(&cms).await;

    ctl("kube", "restore");
    // The restored history, written past the checkpoint's version.
    let mut n = 0;
    while current_version(&cms).await <= checkpointed + 5 {
        put(&cms, "cm-9", &format!("after-{n}")).await;
        n += 1;
    }

    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(90));
    assert_rebuild_matches(&kube, rebuild.clone(), namespaces, Duration::from_secs(90)).await;
    let metrics = bridge.get("/metrics").unwrap().1;
    assert_eq!(
        metric(&metrics, "deltaship_resume_fallbacks_total{resource=\"configmaps\",reason=\"rewound\"}"),
        1.0,
        "refused as rewound ({n} writes took the restored history past {checkpointed}):\n{metrics}\n{}",
        bridge.log_text()
    );
    bridge.stop(Duration::from_secs(30));
    delete_namespace(&kube, &ns).await;
}
