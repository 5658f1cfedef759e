//! An object too large for the broker (a ConfigMap near 1 MiB against Kafka's and NATS's
//! 1 MB message limits) is shipped as a truncated reference, in order, never lost.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats};
use support::kube::{client, delete_namespace, namespace};

/// 700 kB of newlines: under the API server's 1 MiB limit on ConfigMap data, but 1.4 MB
/// once JSON-escaped (`\n`), over both brokers' default 1 MB message limits.
fn big() -> String {
    "\n".repeat(700_000)
}

async fn big_then_small(ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client().await, ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "huge"}, "data": {"blob": big()}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let small = json!({"data": {"blob": "small now"}});
    cms.patch("huge", &PatchParams::default(), &Patch::Merge(&small)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_object_reaches_kafka_as_a_truncated_reference_in_order() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-big").await;
    let prefix = support::unique("it");
    let mut bridge = Bridge::start(&TestConfig::new().configmaps(&ns).kafka(kafka(&env.kafka, &format!("{prefix}.{{plural}}.{{group}}"))).toml());
    bridge.wait_ready(Duration::from_secs(60));
    big_then_small(&ns).await;
    let subject = format!("{ns}/huge");
    let records = support::kafka::read_until(&env.kafka, &format!("{prefix}.configmaps.core"), Duration::from_secs(60), |r| {
        r.iter().filter(|r| r.headers.get("ce_subject") == Some(&subject)).count() == 2
    });
    let huge: Vec<_> = records.iter().filter(|r| r.headers.get("ce_subject") == Some(&subject)).collect();
    assert_eq!(huge[0].event_type(), "dev.deltaship.object.added");
    assert_eq!(huge[0].header("ce_truncated"), "true");
    assert_eq!(huge[0].json()["name"], "huge");
    assert!(huge[0].json().get("data").is_none(), "a reference, not the object");
    assert_eq!(huge[1].event_type(), "dev.deltaship.object.updated");
    assert_eq!(huge[1].json()["data"]["blob"], "small now");
    assert!(!huge[1].headers.contains_key("ce_truncated"));
    let (_, metrics) = bridge.get("/metrics").unwrap();
    assert!(metrics.contains("deltaship_events_truncated_total{resource=\"configmaps\",route=\"default\"} 1"), "{metrics}");
    drop(bridge);
    delete_namespace(&kube, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_object_reaches_jetstream_as_a_truncated_reference_in_order() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-big").await;
    let cluster = support::unique("c");
    let mut bridge = Bridge::start(&TestConfig::new().cluster(&cluster).configmaps(&ns).nats(nats(&env.nats)).toml());
    bridge.wait_ready(Duration::from_secs(60));
    big_then_small(&ns).await;
    let js = support::nats::jetstream().await;
    let subject = format!("{ns}/huge");
    let msgs = support::nats::read_until(&js, support::nats::STREAM, Duration::from_secs(60), |m| {
        m.iter().filter(|m| m.headers.get("ce-subject") == Some(&subject)).count() == 2
    })
    .await;
    let huge: Vec<_> = msgs.iter().filter(|m| m.headers.get("ce-subject") == Some(&subject)).collect();
    assert_eq!(huge[0].event_type(), "dev.deltaship.object.added");
    assert_eq!(huge[0].header("ce-truncated"), "true");
    assert_eq!(huge[0].json()["uid"], huge[1].header("ce-uid"));
    assert_eq!(huge[1].json()["data"]["blob"], "small now");
    drop(bridge);
    delete_namespace(&kube, &ns).await;
}
