//! Exactly once through crashes, against the real servers on a busy machine: a bridge
//! shipping ConfigMaps that are created, updated and deleted all along is killed (SIGKILL)
//! again and again (8 times in a row at the proof scale, 50 at the soak scale:
//! `tests/support/scale.rs`), at moments spread over its first 1.5 s, and started again
//! each time, on Kafka and on NATS JetStream. Read back from the start, the stream holds
//! every change once: per object (uid) its resourceVersions only go up, so no event is
//! repeated and none steps back, and no object comes back after its delete or is deleted
//! while it exists; the state rebuilt from it equals the API server's; and every marker's
//! count and digest match the state held at it (`rebuild --verify`).
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
use std::time::Duration;

use deltaship::config::{PayloadMode, ResumeConfig};
use deltaship::model::SyncMode;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats_stream};
use support::kube::{client, delete_namespace, namespace};
use support::log::Log;
use support::scenario::{self, Fault, NAMES, Plan, Routes, Walk, configmap};
use support::state::assert_rebuild_matches;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// SIGKILLs in a row: 8 at the proof scale, 50 at the soak scale. Eight already land in
/// every part of a bridge's first 1.5 s (kill_moment); fifty find the rarer interleavings.
fn kills() -> usize {
    support::scale::by_tier(8, 50)
}

/// When the `i`-th of `kills` SIGKILLs comes after the bridge is ready: the 1.5 s cut into
/// `kills` equal slots, each killed once at its middle, visited 3 slots apart (so that one
/// kill's moment is not next to the one before), so that at either scale the kills cover
/// the bridge's resume, its shipping and its checkpoint writes (every second) alike.
fn kill_moment(i: usize, kills: usize) -> Duration {
    assert!(!kills.is_multiple_of(3), "3 slots apart visits every slot only when 3 does not divide {kills}");
    let slot = (i * 3) % kills;
    Duration::from_micros(((2 * slot + 1) * 1_500_000 / (2 * kills)) as u64)
}

async fn killed_again_and_again(on_nats: bool) {
    let _serial = SERIAL.lock().await;
    let (sink, kills) = (if on_nats { "nats" } else { "kafka" }, kills());
    support::scale::announce(&format!("sigkills-{sink}"), &format!("kills={kills}"));
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
        cms.create(&PostParams::default(), &configmap(&format!("cm-{i}"), 0)).await.unwrap();
    }
    let churn = Walk::start(vec![cms.clone()], Vec::new(), false);
    // Kills at moments spread over a bridge's first 1.5 s after it is ready: while it
    // resumes, ships, and writes its checkpoint (every second).
    for i in 0..kills {
        let mut bridge = Bridge::start(&config);
        bridge.wait_ready(Duration::from_secs(120));
        tokio::time::sleep(kill_moment(i, kills)).await;
        bridge.signal("KILL");
        bridge.wait_exit(Duration::from_secs(10));
    }
    let writes = churn.finish().await;
    let mut last = Bridge::start(&config);
    last.wait_ready(Duration::from_secs(120));
    assert_rebuild_matches(&kube, log.rebuild_args(), std::slice::from_ref(&ns), Duration::from_secs(120)).await;
    let existing: HashSet<String> = cms.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.uid).collect();
    let h = log.audited(&existing).await;
    eprintln!(
        "ONCE-FIGURES sink={sink} scale={} kills={kills} writes={writes} events={} repeats={} steps_back={} resurrections={} spurious_deletes={} state=exact markers=verified",
        support::scale::tier().as_str(),
        h.events,
        h.repeats + h.resyncs,
        h.steps_back,
        h.resurrections,
        h.spurious_deletes
    );
    assert_eq!(
        (h.repeats + h.resyncs, h.steps_back, h.resurrections, h.spurious_deletes),
        (0, 0, 0, 0),
        "after {kills} SIGKILLs:\n{}\n{}",
        h.problems.join("\n"),
        last.log_text()
    );
    drop(last);
    delete_namespace(&kube, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkills_in_a_row_under_churn_deliver_every_change_once_on_kafka() {
    killed_again_and_again(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkills_in_a_row_under_churn_deliver_every_change_once_on_nats() {
    killed_again_and_again(true).await;
}

/// The seams found where features meet, as named scenarios (`tests/support/scenario.rs`): three
/// SIGKILLs, each after the bridge shipped (and resynced) a while, under churn of ConfigMaps
/// and Secrets in three namespaces with keyed digests.
fn three_kills(routes: Routes, resync_secs: u64) -> Plan {
    Plan {
        seed: None,
        routes,
        resync_secs,
        payload: PayloadMode::Object,
        relist: SyncMode::Diff,
        secrets: true,
        namespaces: 3,
        digest_key: true,
        selector: false,
        large: false,
        streaming_lists: false,
        election: false,
        replicas: 1,
        resume: true,
        faults: vec![(Duration::from_secs(10), Fault::Kill); 3],
    }
}

async fn seam(plan: Plan) {
    let _serial = SERIAL.lock().await;
    let _busy = support::CpuBurner::start();
    match scenario::run(&plan).await {
        Ok(figures) => eprintln!("SEAM-FIGURES {plan}: {}", figures.0),
        Err(problem) => panic!("{plan}:\n{problem}"),
    }
}

/// Resyncs every 4 s: a resync after a resumed start shipped only the objects whose content
/// the index had seen (those received after the checkpoint were skipped as delivered without
/// it) while its marker counted them all, and consumers removed live objects.
#[tokio::test(flavor = "multi_thread")]
async fn resyncs_through_three_sigkills_ship_what_their_markers_count_on_kafka() {
    seam(three_kills(Routes::Kafka, 4)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resyncs_through_three_sigkills_ship_what_their_markers_count_on_nats() {
    seam(three_kills(Routes::Nats, 4)).await;
}

/// Two routes of the same watches, each acknowledging on its own: after a crash their
/// consumers hold different states. Resumed from the oldest route's checkpoint, the other
/// route missed what the first had received (skipped as delivered) and both got a resume
/// marker describing the first's state; markers failed on both.
#[tokio::test(flavor = "multi_thread")]
async fn two_routes_through_three_sigkills_verify_every_marker_on_both() {
    seam(three_kills(Routes::Both, 0)).await;
}
