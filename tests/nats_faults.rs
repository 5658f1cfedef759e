//! Faults against the real nats-server: a restart in the middle of a stream of updates.
//! In a test binary of its own, so the restart does not disturb other tests.

mod support;

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, nats};
use support::kube::{client, delete_namespace, namespace};
use support::nats::{Msg, STREAM, jetstream, read_until};

fn of<'a>(msgs: &'a [Msg], subject: &str) -> Vec<&'a Msg> {
    msgs.iter().filter(|m| m.headers.get("ce-subject").map(String::as_str) == Some(subject)).collect()
}

/// A restart of the NATS server in the middle of a stream of updates loses nothing and
/// reorders nothing: every update of every object is stored once, in order.
#[tokio::test(flavor = "multi_thread")]
async fn a_nats_server_restart_mid_stream_loses_and_reorders_nothing() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-nats-restart").await;
    let cluster = support::unique("c");
    let mut bridge = Bridge::start(&TestConfig::new().cluster(&cluster).configmaps(&ns).nats(nats(&env.nats)).toml());
    bridge.wait_ready(Duration::from_secs(60));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let names = ["a", "b", "c"];
    for n in names {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": n}, "data": {"i": "0"}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    const UPDATES: usize = 60;
    let mut restarted = None;
    for i in 1..=UPDATES {
        for n in names {
            cms.patch(n, &PatchParams::default(), &Patch::Merge(&json!({"data": {"i": i.to_string()}}))).await.unwrap();
        }
        if i == UPDATES / 3 {
            let ctl = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/nats/ctl");
            restarted = Some(std::thread::spawn(move || Command::new(ctl).arg("restart").status().expect("run nats ctl")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(restarted.unwrap().join().unwrap().success(), "tests/env/nats/ctl restart failed");

    let js = jetstream().await;
    let last = UPDATES.to_string();
    let done = |m: &[Msg]| names.iter().all(|n| of(m, &format!("{ns}/{n}")).last().is_some_and(|e| e.json()["data"]["i"].as_str() == Some(last.as_str())));
    let msgs = read_until(&js, STREAM, Duration::from_secs(120), done).await;
    for n in names {
        let events = of(&msgs, &format!("{ns}/{n}"));
        let values: Vec<usize> = events.iter().map(|e| e.json()["data"]["i"].as_str().unwrap().parse().unwrap()).collect();
        assert_eq!(values, (0..=UPDATES).collect::<Vec<_>>(), "every update of {n}, once, in order");
        let ids: HashSet<&str> = events.iter().map(|e| e.header("ce-id")).collect();
        assert_eq!(ids.len(), events.len());
    }
    // The restart really hit the bridge while it was publishing.
    assert!(bridge.log_text().contains("Disconnected from NATS"), "the bridge never saw the restart:\n{}", bridge.log_text());
    drop(bridge);
    delete_namespace(&client, &ns).await;
}
