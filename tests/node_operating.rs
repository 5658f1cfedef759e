//! Operating deltaship on the test node (issue 37's scenarios), installed from the test
//! registry (support::node) and shipping a churned namespace's ConfigMaps to JetStream: the
//! leader pod deleted, and a `helm upgrade` rolling the pods, each while objects change; the
//! next leader resumes from the checkpoint (no initial sync, no fallback to one), and the state
//! `deltaship rebuild` makes of the stream equals the API server's.
//!
//! Needs `tests/env/up` (the node, its registry, the API server and NATS; root).

mod support;

use std::time::{Duration, Instant};

use deltaship::config::LeaderElectionConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams};
use support::chart::helm;
use support::churn::metric;
use support::kube::eventually;
use support::node::{NatsInstall, container_status, kubectl, leader_among, metrics, node_client, publish, release};
use support::state::assert_rebuild_matches;

/// The pod the Lease names once it is none of `old` and still exists.
async fn new_leader(client: &Client, ns: &str, old: &[String]) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(Duration::from_secs(120), &format!("a leader other than {old:?}"), || async {
        let holder = leases.get("deltaship").await.ok()?.spec?.holder_identity?;
        let pod = holder.rsplit_once('-')?.0.to_owned();
        (!old.contains(&pod) && pods.get(&pod).await.is_ok()).then_some(pod)
    })
    .await
}

/// The leader resumed from the checkpoint: a sync of reason `resume`, none `initial`, no
/// fallback (its /metrics).
async fn assert_resumed(ns: &str, pod: &str) {
    let text = eventually(Duration::from_secs(60), &format!("{pod} resumed"), || async {
        let text = metrics(ns, pod)?;
        (synced(&text, "resume") >= 1.0).then_some(text)
    })
    .await;
    assert_eq!(synced(&text, "initial"), 0.0, "{pod} synced from scratch:\n{text}");
    assert_eq!(metric(&text, "deltaship_resume_fallbacks_total"), 0.0, "{pod} fell back:\n{text}");
    let shipped: Vec<&str> = text.lines().filter(|l| l.starts_with("deltaship_events_total{")).collect();
    eprintln!("NODE-FIGURES {pod} resumed; what it shipped by then (churn included): {shipped:?}");
}

/// The end of a scenario: `leader` resumed, 100 more writes, then the stream rebuilds to the
/// API server's state; the install goes.
async fn resumes_and_loses_nothing(client: &Client, mut it: NatsInstall, leader: &str) {
    assert_resumed(&it.ns, leader).await;
    let before = it.churn.writes();
    it.churn.wait_writes(before + 100).await;
    it.churn.finish().await;
    assert_rebuild_matches(client, it.rebuild_args(), std::slice::from_ref(&it.watched), Duration::from_secs(90)).await;
    it.remove(client).await;
}

fn synced(metrics: &str, reason: &str) -> f64 {
    let lines: String = metrics.lines().filter(|l| l.contains(&format!("reason=\"{reason}\""))).map(|l| format!("{l}\n")).collect();
    metric(&lines, "deltaship_syncs_total")
}

/// Scenario 4: the leader pod is deleted (SIGTERM, then the Deployment replaces it) under
/// churn; another replica (the standby, or the replacement when it asks first) leads within
/// the lease bound.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_leader_pod_under_churn_hands_over_within_the_lease_and_loses_nothing() {
    let client = node_client().await;
    let mut it = NatsInstall::start(&client, release(), "node-failover").await;
    let leader = leader_among(&client, &it.ns, &it.pods, Duration::from_secs(60)).await;

    it.churn.start(2, Duration::from_millis(100), None);
    it.churn.wait_writes(100).await;
    let deleted_at = Instant::now();
    Api::<Pod>::namespaced(client.clone(), &it.ns).delete(&leader, &DeleteParams::default()).await.unwrap();
    let next = new_leader(&client, &it.ns, std::slice::from_ref(&leader)).await;
    let takeover = deleted_at.elapsed();
    // The chart keeps deltaship's lease defaults. A leader that stops releases the Lease; were
    // the release lost, another replica would take over once the lease expired, retrying
    // every retry period.
    let lease = LeaderElectionConfig::default();
    eprintln!("NODE-FIGURES failover: {next} leads {takeover:?} after the leader pod's deletion (lease {} s)", lease.lease_duration_secs);
    assert!(takeover < Duration::from_secs(lease.lease_duration_secs + lease.retry_period_secs), "takeover took {takeover:?}");
    resumes_and_loses_nothing(&client, it, &next).await;
}

/// Scenario 3: `helm upgrade` to a new release (image and chart) rolls both pods under
/// churn; the new version's leader resumes.
#[tokio::test(flavor = "multi_thread")]
async fn helm_upgrade_rolls_the_pods_under_churn_and_the_new_leader_resumes_losing_nothing() {
    let client = node_client().await;
    let mut it = NatsInstall::start(&client, release(), "node-upgrade").await;
    leader_among(&client, &it.ns, &it.pods, Duration::from_secs(60)).await;
    let next = publish();

    it.churn.start(2, Duration::from_millis(100), None);
    it.churn.wait_writes(100).await;
    let started = Instant::now();
    let out = helm(&[
        "upgrade",
        &it.ns,
        &next.chart,
        "--version",
        &next.version,
        "--plain-http",
        "--namespace",
        &it.ns,
        "--reuse-values",
        "--wait",
        "--timeout",
        "5m",
    ]);
    assert!(
        out.status.success(),
        "helm upgrade failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&kubectl(&["describe", "pods", "-n", &it.ns]).stdout)
    );
    let leader = new_leader(&client, &it.ns, &it.pods).await;
    eprintln!("NODE-FIGURES upgrade: rolled and {leader} leads {:?} after helm upgrade began", started.elapsed());
    let pod = Api::<Pod>::namespaced(client.clone(), &it.ns).get(&leader).await.unwrap();
    assert_eq!(container_status(&pod).unwrap().image, format!("{}:{}", next.repository, next.version), "the leader runs the new release");
    resumes_and_loses_nothing(&client, it, &leader).await;
}
