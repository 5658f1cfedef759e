//! High availability: two bridges elect a leader on a Lease; the leader is killed mid-churn,
//! the standby takes over within the lease duration, and the state rebuilt from the topic
//! matches the API server.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, election, kafka};
use support::kube::{client, delete_namespace, namespace};
use support::state::assert_rebuild_matches;

fn config(ns: &str, lease: &str, prefix: &str, brokers: &str) -> String {
    let election = election(ns, lease);
    TestConfig::new().configmaps(ns).kafka(kafka(brokers, &format!("{prefix}.{{group}}.{{plural}}"))).with(|c| c.leader_election = election).toml()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_standby_takes_over_within_the_lease_and_consumers_rebuild_cleanly() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-ha").await;
    let prefix = support::unique("it");
    let cfg = config(&ns, "deltaship-ha", &prefix, &env.kafka);
    let mut a = Bridge::start(&cfg);
    a.wait_ready(Duration::from_secs(60));
    let mut b = Bridge::start(&cfg);
    b.wait_ready(Duration::from_secs(60)); // a standby is ready too
    let started = Instant::now();
    while !(a.leads() ^ b.leads()) {
        assert!(started.elapsed() < Duration::from_secs(30), "no single leader:\nA:\n{}\nB:\n{}", a.log_text(), b.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };

    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let mut killed_at = None;
    for i in 0..60 {
        let name = format!("cm-{}", i % 20);
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"i": i.to_string()}})).unwrap();
        match i {
            _ if i < 20 => drop(cms.create(&PostParams::default(), &cm).await.unwrap()),
            _ if i % 7 == 0 => drop(cms.delete(&name, &DeleteParams::default()).await),
            _ => drop(cms.patch(&name, &PatchParams::apply("it").force(), &Patch::Apply(&cm)).await.unwrap()),
        }
        if i == 30 {
            leader.signal("KILL");
            killed_at = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed_at = killed_at.unwrap();
    while !standby.leads() {
        assert!(killed_at.elapsed() < Duration::from_secs(60), "the standby never took over:\n{}", standby.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let takeover = killed_at.elapsed();
    let lease_secs = election(&ns, "").lease_duration_secs;
    eprintln!("HA-FIGURES takeover after {takeover:?} (lease {lease_secs} s)");
    // The lease is judged expired by the standby's clock lease_secs after it last saw a
    // renewal, and it retries every second.
    assert!(takeover < Duration::from_secs(lease_secs + 3), "takeover took {takeover:?}");

    let topic = format!("{prefix}.core.configmaps");
    let args = vec!["--kafka".into(), env.kafka.clone(), "--topic".into(), topic];
    assert_rebuild_matches(&kube, args, std::slice::from_ref(&ns), Duration::from_secs(60)).await;
    drop(standby);
    delete_namespace(&kube, &ns).await;
}
