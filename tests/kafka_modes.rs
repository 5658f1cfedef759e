//! The Kafka binding's options against the real broker: structured content mode,
//! tombstones, ignored status churn of a Deployment, reference payloads and a topic shared
//! by two resources.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use deltaship::config::{ContentMode, KafkaConfig, PayloadMode, ResourceConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, resource};
use support::kafka::{Record, read_until};
use support::kube::{client, delete_namespace, eventually, namespace};

const WAIT: Duration = Duration::from_secs(60);
const STRUCTURED: &str = "application/cloudevents+json; charset=UTF-8";

/// A bridge of cluster `it` shipping `resources` to `sink`.
fn config(resources: &[ResourceConfig], sink: KafkaConfig) -> String {
    TestConfig::new().cluster("it").with(|c| c.resources = resources.to_vec()).kafka(sink).toml()
}

fn per_resource_topics(prefix: &str) -> String {
    format!("{prefix}.{{group}}.{{plural}}")
}

fn of_key<'a>(records: &'a [Record], key: &str) -> Vec<&'a Record> {
    records.iter().filter(|r| r.key.as_deref() == Some(key)).collect()
}

/// The binary-mode type, short (`object.added`); None for tombstones and structured records.
fn ty(r: &Record) -> Option<&str> {
    r.headers.get("ce_type").map(|t| t.trim_start_matches("dev.deltaship."))
}

fn types(records: &[&Record]) -> Vec<String> {
    records.iter().map(|r| ty(r).unwrap_or("tombstone").to_string()).collect()
}

fn completed_on_partitions(records: &[Record], marker_key: &str) -> usize {
    of_key(records, marker_key).iter().filter(|r| ty(r) == Some("sync.completed")).map(|r| r.partition).collect::<HashSet<_>>().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn structured_mode_puts_the_whole_event_in_the_value_and_no_ce_headers() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-structured").await;
    let prefix = support::unique("it");
    let sink = KafkaConfig { content_mode: ContentMode::Structured, ..kafka(&env.kafka, &per_resource_topics(&prefix)) };
    let cfg = config(&[resource("", "ConfigMap", &[&ns])], sink);
    let mut bridge = Bridge::start(&cfg);
    bridge.wait_ready(WAIT);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "conf"}, "data": {"k": "v"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();

    let key = format!("{ns}/conf");
    let kind_of = |r: &Record| r.json()["type"].as_str().unwrap_or_default().to_string();
    let records = read_until(&env.kafka, &format!("{prefix}.core.configmaps"), WAIT, |rs| {
        !of_key(rs, &key).is_empty()
            && rs.iter().filter(|r| kind_of(r) == "dev.deltaship.sync.completed").map(|r| r.partition).collect::<HashSet<_>>().len() == 3
    });
    for r in &records {
        assert_eq!(r.header("content-type"), STRUCTURED, "{r:?}");
        assert!(!r.headers.keys().any(|h| h.starts_with("ce_")), "structured records carry no ce_ headers: {r:?}");
    }
    let conf = of_key(&records, &key);
    assert_eq!(conf.len(), 1, "{conf:?}");
    let e = conf[0].json();
    assert_eq!(e["specversion"], "1.0");
    let id = e["id"].as_str().unwrap();
    assert!(id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    assert_eq!(e["type"], "dev.deltaship.object.added");
    assert_eq!(e["source"], "//it/api/v1/configmaps");
    assert_eq!(e["subject"], key.as_str());
    assert_eq!(e["datacontenttype"], "application/json");
    assert!(e["time"].as_str().is_some_and(|t| t.contains('T')), "{e}");
    let uid = created.metadata.uid.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    for (ext, want) in [
        ("cluster", "it"),
        ("apiversion", "v1"),
        ("kind", "ConfigMap"),
        ("namespace", ns.as_str()),
        ("name", "conf"),
        ("uid", uid.as_str()),
        ("resourceversion", rv.as_str()),
        ("partitionkey", key.as_str()),
    ] {
        assert_eq!(e[ext], want, "extension {ext} in {e}");
    }
    assert_eq!(e["data"]["data"], json!({"k": "v"}), "data is the object");
    assert_eq!(e["data"]["metadata"]["name"], "conf");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_object_is_followed_by_a_tombstone_with_its_key() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-tomb").await;
    let prefix = support::unique("it");
    let sink = KafkaConfig { tombstones: true, ..kafka(&env.kafka, &per_resource_topics(&prefix)) };
    let cfg = config(&[resource("", "ConfigMap", &[&ns])], sink);
    let mut bridge = Bridge::start(&cfg);
    bridge.wait_ready(WAIT);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "gone"}, "data": {"k": "v"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.delete("gone", &DeleteParams::default()).await.unwrap();

    let key = format!("{ns}/gone");
    let records = read_until(&env.kafka, &format!("{prefix}.core.configmaps"), WAIT, |rs| of_key(rs, &key).iter().any(|r| r.value.is_none()));
    let life = of_key(&records, &key);
    assert_eq!(types(&life), ["object.added", "object.deleted", "tombstone"]);
    let deleted = life[1];
    // The very next record of that partition: nothing may come between the delete and
    // its tombstone, or a compacting consumer could see the key resurrected.
    let next =
        records.iter().filter(|r| r.partition == deleted.partition && r.offset > deleted.offset).min_by_key(|r| r.offset).expect("a record after the delete");
    assert_eq!(next.key.as_deref(), Some(key.as_str()));
    assert!(next.value.is_none(), "a null value: {next:?}");
    let tombstones: Vec<_> = records.iter().filter(|r| r.value.is_none()).collect();
    assert_eq!(tombstones.len(), 1, "only deletes get tombstones: {tombstones:?}");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// The object without what `ignore_fields = ["/status"]` and the fingerprint always
/// leave out: two shipped events equal in this view would be an invisible update.
fn visible(object: &Value) -> Value {
    let mut v = object.clone();
    let m = v.as_object_mut().unwrap();
    m.remove("status");
    let meta = m.get_mut("metadata").and_then(Value::as_object_mut).unwrap();
    meta.remove("resourceVersion");
    meta.remove("managedFields");
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_lifecycle_ships_in_order_without_status_only_updates() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-deploy").await;
    let prefix = support::unique("it");
    let deployments = ResourceConfig { ignore_fields: vec!["/status".into()], ..resource("apps", "Deployment", &[&ns]) };
    let cfg = config(&[deployments], kafka(&env.kafka, &per_resource_topics(&prefix)));
    let mut bridge = Bridge::start(&cfg);
    bridge.wait_ready(WAIT);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deploy = support::deployment::deployment("web", "nginx:1.27");
    deploys.create(&PostParams::default(), &deploy).await.unwrap();
    support::deployment::set_image(&deploys, "web", "nginx:1.28").await;
    // Let the controller-manager write status for the new generation, so status-only
    // updates did happen while the bridge watched.
    eventually(WAIT, "the deployment controller to observe generation 2", || {
        let deploys = deploys.clone();
        async move {
            let d = deploys.get("web").await.ok()?;
            (d.status?.observed_generation? >= 2).then_some(())
        }
    })
    .await;
    deploys.delete("web", &DeleteParams::default()).await.unwrap();

    let key = format!("{ns}/web");
    let records = read_until(&env.kafka, &format!("{prefix}.apps.deployments"), WAIT, |rs| of_key(rs, &key).iter().any(|r| ty(r) == Some("object.deleted")));
    let life = of_key(&records, &key);
    let t = types(&life);
    assert_eq!(t.first().map(String::as_str), Some("object.added"), "{t:?}");
    assert_eq!(t.last().map(String::as_str), Some("object.deleted"), "{t:?}");
    assert!(t.len() >= 3 && t[1..t.len() - 1].iter().all(|x| x == "object.updated"), "{t:?}");
    assert!(life.iter().all(|r| r.partition == life[0].partition), "one object, one partition");
    let versions: Vec<u64> = life.iter().map(|r| r.header("ce_resourceversion").parse().unwrap()).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "in the API server's order: {versions:?}");
    assert!(life.windows(2).all(|w| w[0].offset < w[1].offset));
    let objects: Vec<Value> = life.iter().map(|r| r.json()).collect();
    assert!(objects.iter().any(|o| o["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"), "the image change is shipped");
    for (i, pair) in objects.windows(2).enumerate() {
        if t[i + 1] == "object.updated" {
            assert_ne!(visible(&pair[0]), visible(&pair[1]), "update #{} only changed /status", i + 1);
        }
    }
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_payload_ships_only_the_identity_of_the_object() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-ref").await;
    let prefix = support::unique("it");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let make = |name: &str| -> ConfigMap { serde_json::from_value(json!({"metadata": {"name": name}, "data": {"body": "not-in-a-reference"}})).unwrap() };
    // Present at start: its `synced` event is a reference too.
    let before = cms.create(&PostParams::default(), &make("before")).await.unwrap();
    let references = ResourceConfig { payload: PayloadMode::Reference, ..resource("", "ConfigMap", &[&ns]) };
    let cfg = config(&[references], kafka(&env.kafka, &per_resource_topics(&prefix)));
    let mut bridge = Bridge::start(&cfg);
    bridge.wait_ready(WAIT);
    let created = cms.create(&PostParams::default(), &make("ref")).await.unwrap();
    cms.patch("ref", &PatchParams::default(), &Patch::Merge(&json!({"data": {"body": "changed"}}))).await.unwrap();
    cms.delete("ref", &DeleteParams::default()).await.unwrap();

    let (key, before_key) = (format!("{ns}/ref"), format!("{ns}/before"));
    // Both objects: they may sit on different partitions, read in any order.
    let records = read_until(&env.kafka, &format!("{prefix}.core.configmaps"), WAIT, |rs| {
        of_key(rs, &key).iter().any(|r| ty(r) == Some("object.deleted")) && !of_key(rs, &before_key).is_empty()
    });
    let life = of_key(&records, &key);
    assert_eq!(types(&life), ["object.added", "object.updated", "object.deleted"]);
    let before_events = of_key(&records, &before_key);
    assert_eq!(types(&before_events), ["object.synced"]);
    let uid_of = |name: &str| if name == "ref" { created.metadata.uid.clone() } else { before.metadata.uid.clone() };
    for r in life.iter().chain(&before_events) {
        let name = r.header("ce_name");
        let want = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": name,
            "uid": uid_of(name).unwrap(), "resourceVersion": r.header("ce_resourceversion"),
        });
        assert_eq!(r.json(), want, "{}", ty(r).unwrap());
    }
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shared_topic_prefixes_keys_with_the_resource_and_keys_markers_per_resource() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-shared").await;
    let topic = format!("{}-all", support::unique("it"));
    let resources = [resource("", "ConfigMap", &[&ns]), resource("", "Secret", &[&ns])];
    let mut bridge = Bridge::start(&config(&resources, kafka(&env.kafka, &topic)));
    bridge.wait_ready(WAIT);
    // Same name in both resources: only the prefix keeps compaction from merging them.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "same"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "same"}, "stringData": {"k": "v"}})).unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await.unwrap();

    let (cm_key, secret_key) = (format!("configmaps/{ns}/same"), format!("secrets/{ns}/same"));
    let (cm_marker, secret_marker) = (format!("/deltaship/sync/configmaps/{ns}/full/completed"), format!("/deltaship/sync/secrets/{ns}/full/completed"));
    let records = read_until(&env.kafka, &topic, WAIT, |rs| {
        !of_key(rs, &cm_key).is_empty()
            && !of_key(rs, &secret_key).is_empty()
            && completed_on_partitions(rs, &cm_marker) == 3
            && completed_on_partitions(rs, &secret_marker) == 3
    });
    for (key, kind) in [(&cm_key, "ConfigMap"), (&secret_key, "Secret")] {
        let events = of_key(&records, key);
        assert_eq!(types(&events), ["object.added"], "{key}");
        assert_eq!(events[0].header("ce_kind"), kind);
        assert_eq!(events[0].header("ce_partitionkey"), key.as_str(), "partitionkey is the record key");
        assert_eq!(events[0].header("ce_subject"), format!("{ns}/same"), "the subject stays the object key");
    }
    // Every record is either a prefixed object or a marker of one of the two resources.
    let (cm_prefix, secret_prefix) = (format!("configmaps/{ns}/"), format!("secrets/{ns}/"));
    for r in &records {
        let k = r.key.as_deref().unwrap_or_default();
        let is_marker = ty(r).is_some_and(|t| t.starts_with("sync."));
        if is_marker {
            let phase = ty(r).unwrap().trim_start_matches("sync.");
            let resource = if r.header("ce_kind") == "Secret" { "secrets" } else { "configmaps" };
            assert_eq!(k, format!("/deltaship/sync/{resource}/{ns}/full/{phase}"), "marker key");
        } else {
            assert!(k.starts_with(&cm_prefix) || k.starts_with(&secret_prefix), "unprefixed key {k}");
        }
    }
    drop(bridge);
    delete_namespace(&client, &ns).await;
}
