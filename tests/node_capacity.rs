//! Operating deltaship on the test node, issue 37's scenario 6: the chart's default memory
//! limit holds the initial sync of 100,000 ConfigMaps (at the soak scale; 10,000 at the
//! proof scale: `tests/support/scale.rs`). They exist before the release is installed; the
//! leader lists and ships them all (a full initial sync to a JetStream stream) inside its
//! container's limit, which the kubelet enforces through the memory cgroup: no restart, no
//! OOM kill. The stream then rebuilds to the API server's state. Reports the
//! leader's peak resident memory (VmHWM) against the limit.
//!
//! Needs `tests/env/up` (the node, its registry, the API server and NATS; root).

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::kube::{delete_namespace, eventually, namespace};
use support::node::{NatsInstall, container_status, leader_among, metrics, node_client, pod_processes, release};
use support::state::assert_rebuild_matches;

/// ConfigMaps of about 1 KB: 10,000 at the proof scale, 100,000 at the soak scale. Creating
/// them is most of the test's time. At 10,000 the test proves the path (the chart's limit
/// enforced on the container, a full sync through it without a restart, the stream rebuilt
/// to the API server's state) and prints the leader's peak, but a bridge needing ten times
/// the memory per object of today's (99 MiB peak at 100,000) would still fit 512 MiB there:
/// that the default limit holds 100,000 objects is shown at the soak scale only.
fn objects() -> usize {
    support::scale::by_tier(10_000, 100_000)
}

/// `count` ConfigMaps of about 1 KB in `ns`, created `concurrency` at a time.
async fn create_configmaps(client: &kube::Client, ns: &str, count: usize, concurrency: usize) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let filler = "x".repeat(900);
    futures::stream::iter(0..count)
        .for_each_concurrent(concurrency, |i| {
            let (api, filler) = (api.clone(), filler.clone());
            async move {
                let cm: ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:06}")}, "data": {"i": i.to_string(), "pad": filler}})).unwrap();
                for attempt in 0.. {
                    match api.create(&PostParams::default(), &cm).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(e) if attempt < 20 => {
                            eprintln!("create cm-{i:06}: {e}; retrying");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => panic!("create cm-{i:06}: {e}"),
                    }
                }
            }
        })
        .await;
}

/// Restarts and the last termination reason of each pod's deltaship container.
fn restarts(pods: &[Pod]) -> Vec<(String, i32, Option<String>)> {
    pods.iter()
        .map(|p| {
            let s = container_status(p);
            let last = s.and_then(|s| s.last_state.as_ref()?.terminated.as_ref()?.reason.clone());
            (p.metadata.name.clone().unwrap_or_default(), s.map_or(0, |s| s.restart_count), last)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_memory_limit_holds_the_initial_sync_of_a_namespace_of_many_configmaps() {
    let objects = objects();
    support::scale::announce("node-capacity", &format!("objects={objects}"));
    let client = node_client().await;
    let bulk = namespace(&client, "node-bulk").await;
    let started = Instant::now();
    create_configmaps(&client, &bulk, objects, 64).await;
    eprintln!("created {objects} ConfigMaps in {:.0} s", started.elapsed().as_secs_f64());

    let nats = support::var("DELTASHIP_TEST_NATS");
    let installed = Instant::now();
    let it = NatsInstall::start_with(&client, release(), "node-capacity", &nats, |_, values| {
        values["config"]["resources"][0]["namespaces"] = json!([bulk]);
    })
    .await;
    let leader = leader_among(&client, &it.ns, &it.pods, Duration::from_secs(60)).await;
    // The initial sync is over once its `sync.completed` is acknowledged: counted by type.
    let what = format!("the initial sync of {objects} ConfigMaps acknowledged");
    let shipped = eventually(Duration::from_secs(600), &what, || {
        let text = metrics(&it.ns, &leader).unwrap_or_default();
        let synced: f64 = text
            .lines()
            .filter(|l| l.starts_with("deltaship_events_total{") && l.contains("type=\"synced\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        let completed = text.lines().any(|l| l.starts_with("deltaship_events_total{") && l.contains("type=\"sync.completed\""));
        std::future::ready((completed && synced >= objects as f64).then_some(synced))
    })
    .await;
    let synced_secs = installed.elapsed().as_secs_f64();

    let pods: Vec<Pod> = {
        let api: Api<Pod> = Api::namespaced(client.clone(), &it.ns);
        let mut pods = Vec::new();
        for name in &it.pods {
            pods.push(api.get(name).await.unwrap());
        }
        pods
    };
    let leader_pod: Vec<Pod> = pods.iter().filter(|p| p.metadata.name.as_deref() == Some(leader.as_str())).cloned().collect();
    let process = pod_processes("deltaship", &leader_pod).pop().expect("the leader's deltaship process on the node");
    let kib = |field: &str| -> u64 {
        let line = process.status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in /proc/{}/status", process.pid));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let (peak_mib, limit_mib) = (kib("VmHWM:") as f64 / 1024.0, process.memory_limit as f64 / (1024.0 * 1024.0));
    eprintln!(
        "CAPACITY-FIGURES scale={} objects={objects} synced_events={shipped} install_to_synced_s={synced_secs:.0} leader_peak_rss_mib={peak_mib:.0} memory_limit_mib={limit_mib:.0}",
        support::scale::tier().as_str()
    );
    assert_eq!(limit_mib, 512.0, "the chart's default memory limit is enforced on the container");
    for (name, restarts, last) in restarts(&pods) {
        assert_eq!((restarts, last.as_deref()), (0, None), "{name} restarted during the sync:\n{}", support::node::report(&it.ns));
    }
    assert!(peak_mib < limit_mib, "peak {peak_mib:.0} MiB under the {limit_mib:.0} MiB limit");
    assert_rebuild_matches(&client, it.rebuild_args(), std::slice::from_ref(&bulk), Duration::from_secs(300)).await;
    it.remove(&client).await;
    // The objects go before the next test binary lists ConfigMaps: the namespace controller
    // deletes them (one deletecollection answering with all 100,000 of them would not).
    delete_namespace(&client, &bulk).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(Duration::from_secs(600), "the namespace of the bulk ConfigMaps deleted", || {
        let namespaces = namespaces.clone();
        let bulk = bulk.clone();
        async move { namespaces.get_opt(&bulk).await.ok().filter(Option::is_none).map(|_| ()) }
    })
    .await;
}
