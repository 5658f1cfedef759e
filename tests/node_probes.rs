//! Operating deltaship on the test node, issue 37's scenario 5: the chart's probes as the
//! kubelet runs them. The release ships a churned namespace's ConfigMaps to a nats-server of
//! this test's own (support::nats_server, reached from the pods at the node's host address),
//! so that stopping it disturbs no other test.
//! - A broker outage longer than the stall timeout, while events wait: the leader is not
//!   Ready (the sink is not reachable), no container is restarted, and once the server is
//!   back the leader is Ready again.
//! - A frozen bridge (SIGSTOP of the leader's process): its liveness probe fails, the kubelet
//!   restarts the container, another replica leads.
//!
//! Either way the stream rebuilds to the API server's state: nothing lost.
//!
//! Needs `tests/env/up` (the node, its registry, the API server and nats-server's binary; root).

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use support::kube::eventually;
use support::nats_server::NatsServer;
use support::node::{NatsInstall, container_status, kubectl_ok, leader_among, node_client, pod_processes, release, report};
use support::state::assert_rebuild_matches;

/// `delivery.stall_timeout_secs` of the release: an outage outlasts it by far.
const STALL_SECS: u64 = 20;
/// The chart's liveness probe fails after 3 periods of 10 s.
const LIVENESS_WINDOW: Duration = Duration::from_secs(30);

fn ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn restarts(pod: &Pod) -> i32 {
    container_status(pod).map_or(0, |s| s.restart_count)
}

/// Each pod of `names`: its restart count, once it exists.
async fn restart_counts(pods: &Api<Pod>, names: &[String]) -> Vec<(String, i32)> {
    let mut counts = Vec::new();
    for name in names {
        let pod = pods.get(name).await.unwrap_or_else(|e| panic!("pod {name}: {e}"));
        counts.push((name.clone(), restarts(&pod)));
    }
    counts
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_outage_makes_the_leader_unready_without_a_restart_and_a_frozen_bridge_is_restarted_by_liveness() {
    let client = node_client().await;
    let mut nats = NatsServer::start("");
    let url = format!("nats://{}", nats.addr());
    let delivery = json!({"stall_timeout_secs": STALL_SECS, "shutdown_timeout_secs": 5});
    let mut it = NatsInstall::start_with(&client, release(), "node-probes", &url, |_, values| values["config"]["delivery"] = delivery).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &it.ns);
    let leader = leader_among(&client, &it.ns, &it.pods, Duration::from_secs(60)).await;
    it.churn.start(2, Duration::from_millis(100), None);
    it.churn.wait_writes(50).await;

    // The outage: the leader goes unready, and stays alive while events wait.
    nats.stop();
    let down_at = Instant::now();
    eventually(Duration::from_secs(60), &format!("{leader} not Ready during the outage"), || async { (!ready(&pods.get(&leader).await.ok()?)).then_some(()) })
        .await;
    let unready_after = down_at.elapsed();
    let hold = Duration::from_secs(STALL_SECS) + LIVENESS_WINDOW + Duration::from_secs(15);
    while down_at.elapsed() < hold {
        let counts = restart_counts(&pods, &it.pods).await;
        assert!(counts.iter().all(|(_, n)| *n == 0), "a container restarted during the broker outage: {counts:?}\n{}", report(&it.ns));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let writes_in_outage = it.churn.writes();
    nats.start_again();
    let up_at = Instant::now();
    eventually(Duration::from_secs(90), &format!("{leader} Ready after the outage"), || async { ready(&pods.get(&leader).await.ok()?).then_some(()) }).await;
    let ready_again_after = up_at.elapsed();
    let counts = restart_counts(&pods, &it.pods).await;
    assert!(counts.iter().all(|(_, n)| *n == 0), "restarts after the outage: {counts:?}");
    eprintln!(
        "outage of {:?} ({writes_in_outage} writes by then): {leader} unready after {unready_after:?}, Ready {ready_again_after:?} after the server was back, 0 restarts",
        hold
    );

    // The frozen bridge: the kubelet's liveness probe finds it and restarts its container.
    let pod = pods.get(&leader).await.unwrap();
    let procs = pod_processes("deltaship", std::slice::from_ref(&pod));
    assert_eq!(procs.len(), 1, "one deltaship process in {leader}: {procs:?}");
    let stop = std::process::Command::new("kill").args(["-STOP", &procs[0].pid.to_string()]).status().unwrap();
    assert!(stop.success(), "kill -STOP {}", procs[0].pid);
    let frozen_at = Instant::now();
    let restarted = eventually(Duration::from_secs(180), &format!("{leader}'s container restarted by its liveness probe"), || async {
        let pod = pods.get(&leader).await.ok()?;
        let status = container_status(&pod)?;
        (status.restart_count >= 1 && status.state.as_ref()?.running.is_some()).then(|| status.clone())
    })
    .await;
    let restart_after = frozen_at.elapsed();
    let events = kubectl_ok(&["get", "events", "-n", &it.ns, "--field-selector", &format!("involvedObject.name={leader}"), "-o", "json"]);
    assert!(events.contains("Liveness probe failed"), "the kubelet restarted {leader} for its liveness probe: {events}");
    let last = restarted.last_state.and_then(|s| s.terminated).expect("the frozen container's termination");
    assert_eq!(last.exit_code, 137, "killed, as a frozen process can only be: {last:?}");
    let next = leader_among(&client, &it.ns, &it.pods, Duration::from_secs(60)).await;
    eprintln!("{leader} frozen: restarted by its liveness probe after {restart_after:?}; {next} leads");

    // Nothing lost through either.
    let before = it.churn.writes();
    it.churn.wait_writes(before + 100).await;
    it.churn.finish().await;
    assert_rebuild_matches(&client, it.rebuild_args(), std::slice::from_ref(&it.watched), Duration::from_secs(90)).await;
    it.remove(&client).await;
}
