//! End to end against the real API server and nats-server with JetStream: ConfigMaps and
//! Deployments through `deltaship run`, read back from the stream.

mod support;

use std::time::Duration;

use deltaship::config::{NatsConfig, NatsMode, ResourceConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, nats, resource};
use support::kube::{client, delete_namespace, namespace};
use support::nats::{Msg, STREAM, jetstream, read_until};

fn config(cluster: &str, ns: &str, url: &str, mode: NatsMode) -> String {
    let deployments = ResourceConfig { ignore_fields: vec!["/status".into()], ..resource("apps", "Deployment", &[ns]) };
    TestConfig::new().cluster(cluster).configmaps(ns).resource(deployments).nats(NatsConfig { mode, ..nats(url) }).toml()
}

fn of<'a>(msgs: &'a [Msg], subject: &str) -> Vec<&'a Msg> {
    msgs.iter().filter(|m| m.headers.get("ce-subject").map(String::as_str) == Some(subject)).collect()
}

fn types(msgs: &[&Msg]) -> Vec<String> {
    msgs.iter().map(|m| m.event_type().trim_start_matches("dev.deltaship.").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn jetstream_stream_carries_every_change_with_headers_subjects_and_markers() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-nats").await;
    let cluster = support::unique("c");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let mut bridge = Bridge::start(&config(&cluster, &ns, &env.nats, NatsMode::Jetstream));
    bridge.wait_ready(Duration::from_secs(60));

    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "app.settings"}, "data": {"n": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.patch("app.settings", &PatchParams::default(), &Patch::Merge(&json!({"data": {"n": "2"}}))).await.unwrap();
    cms.delete("app.settings", &DeleteParams::default()).await.unwrap();
    let deploy = support::deployment::deployment("web", "nginx:1.27");
    deploys.create(&PostParams::default(), &deploy).await.unwrap();
    support::deployment::set_image(&deploys, "web", "nginx:1.28").await;
    deploys.delete("web", &DeleteParams::default()).await.unwrap();

    let js = jetstream().await;
    let cm_key = format!("{ns}/app.settings");
    let web_key = format!("{ns}/web");
    let msgs = read_until(&js, STREAM, Duration::from_secs(60), |m| {
        types(&of(m, &cm_key)).last().map(String::as_str) == Some("object.deleted")
            && types(&of(m, &web_key)).last().map(String::as_str) == Some("object.deleted")
    })
    .await;

    // Markers on the per-resource subject, one subject per watch, mode and phase, around
    // the (empty) initial sync.
    let marker_subject = format!("deltaship.{cluster}._.configmap._sync.{ns}.full.");
    let markers: Vec<&Msg> = msgs.iter().filter(|m| m.subject.starts_with(&marker_subject)).collect();
    assert_eq!(types(&markers), ["sync.started", "sync.completed"]);
    assert_eq!(markers.iter().map(|m| m.subject.as_str()).collect::<Vec<_>>(), [format!("{marker_subject}started"), format!("{marker_subject}completed")]);
    assert_eq!(markers[1].json()["reason"], "initial");
    let life = of(&msgs, &cm_key);
    assert!(markers[1].sequence < life[0].sequence);

    // The ConfigMap: in order, on its own subject, each name field one token.
    assert_eq!(types(&life), ["object.added", "object.updated", "object.deleted"]);
    let subject = format!("deltaship.{cluster}._.configmap.{ns}.app%2Esettings");
    for m in &life {
        assert_eq!(m.subject, subject);
        let data = m.json();
        // Headers decode back exactly to the event's attributes.
        assert_eq!(m.header("ce-specversion"), "1.0");
        assert_eq!(m.header("ce-source"), format!("//{cluster}/api/v1/configmaps"));
        assert_eq!(m.header("ce-datacontenttype"), "application/json");
        assert_eq!(m.header("ce-uid"), data["metadata"]["uid"].as_str().unwrap());
        assert_eq!(m.header("ce-resourceversion"), data["metadata"]["resourceVersion"].as_str().unwrap());
        assert_eq!(m.header("ce-namespace"), ns);
        assert_eq!(m.header("ce-name"), "app.settings");
        assert!(chrono::DateTime::parse_from_rfc3339(m.header("ce-time")).is_ok());
        // The stream deduplicates by the event id.
        assert_eq!(m.header("nats-msg-id"), m.header("ce-id"));
    }
    assert_eq!(life[1].json()["data"]["n"], "2");

    // The Deployment: its image change shipped; status-only changes not (each shipped
    // update differs from the one before outside /status and the resourceVersion).
    let web = of(&msgs, &web_key);
    assert_eq!(web[0].subject, format!("deltaship.{cluster}.apps.deployment.{ns}.web"));
    let shipped: Vec<serde_json::Value> = web
        .iter()
        .filter(|m| m.event_type() != "dev.deltaship.object.deleted")
        .map(|m| {
            let mut v = m.json();
            v.as_object_mut().unwrap().remove("status");
            v["metadata"].as_object_mut().unwrap().remove("resourceVersion");
            v
        })
        .collect();
    assert!(shipped.windows(2).all(|w| w[0] != w[1]), "a status-only update was shipped: {:?}", types(&web));
    let mut images: Vec<&str> = shipped.iter().map(|v| v["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap()).collect();
    images.dedup();
    assert_eq!(images, ["nginx:1.27", "nginx:1.28"]);

    // A redelivery (the same event published again, as after a lost ack) is dropped by
    // the stream as a duplicate.
    let again = life[1];
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", again.header("nats-msg-id"));
    let ack = js.publish_with_headers(again.subject.clone(), headers, again.payload.clone().into()).await.unwrap().await.unwrap();
    assert!(ack.duplicate, "the stream recognised the redelivery: {ack:?}");
    assert_eq!(ack.sequence, again.sequence, "no second copy was stored");

    assert!(bridge.stop(Duration::from_secs(30)).success());
    delete_namespace(&client, &ns).await;
}

/// Core NATS: published to the object's subject, at most once, no stream needed.
#[tokio::test(flavor = "multi_thread")]
async fn core_mode_publishes_binary_events_to_subscribers() {
    use futures::StreamExt;
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-core").await;
    let cluster = support::unique("c");
    let nc = async_nats::connect(&env.nats).await.unwrap();
    let mut sub = nc.subscribe(format!("deltaship.{cluster}.>")).await.unwrap();
    let mut bridge = Bridge::start(&config(&cluster, &ns, &env.nats, NatsMode::Core));
    bridge.wait_ready(Duration::from_secs(60));
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let m = sub.next().await.unwrap();
            if m.subject.as_str().ends_with(&format!(".{ns}.x")) {
                return m;
            }
        }
    })
    .await
    .expect("the added event arrives");
    let headers = msg.headers.unwrap();
    assert_eq!(headers.get("ce-type").unwrap().as_str(), "dev.deltaship.object.added");
    let data: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(data["data"]["k"], "v");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}
