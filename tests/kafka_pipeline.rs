//! End to end against the real API server and Kafka broker: ConfigMaps, Secrets,
//! Deployments and a CRD's instances, through `deltaship run`, read back from the topics.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, resource};
use support::kafka::{Record, read_until};
use support::kube::{client, delete_namespace, eventually, namespace};

const SECRET_VALUE: &str = "s3cr3t-Value-never-shipped";

fn pp() -> PostParams {
    PostParams::default()
}

fn config(topic_prefix: &str, ns: &str, brokers: &str) -> String {
    test_config(topic_prefix, ns, brokers).toml()
}

fn test_config(topic_prefix: &str, ns: &str, brokers: &str) -> TestConfig {
    TestConfig::new()
        .cluster("it")
        .configmaps(ns)
        .resource(resource("", "Secret", &[ns]))
        .resource(resource("apps", "Deployment", &[ns]))
        .resource(resource("example.deltaship.dev", "Widget", &[ns]))
        .kafka(kafka(brokers, &format!("{topic_prefix}.{{group}}.{{plural}}")))
}

async fn ensure_widget_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.deltaship.dev"},
        "spec": {
            "group": "example.deltaship.dev",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    match crds.create(&pp(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create CRD: {e}"),
    }
    eventually(Duration::from_secs(30), "the Widget CRD to be established", || {
        let crds = crds.clone();
        async move {
            let c = crds.get("widgets.example.deltaship.dev").await.ok()?;
            let established = c.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        }
    })
    .await;
}

fn events_of<'a>(records: &'a [Record], subject: &str) -> Vec<&'a Record> {
    records.iter().filter(|r| r.headers.get("ce_subject").map(String::as_str) == Some(subject)).collect()
}

fn types(records: &[&Record]) -> Vec<String> {
    records.iter().map(|r| r.event_type().trim_start_matches("dev.deltaship.").to_string()).collect()
}

fn has_completed_everywhere(records: &[Record], partitions: usize) -> bool {
    let parts: HashSet<i32> =
        records.iter().filter(|r| r.headers.get("ce_type").map(String::as_str) == Some("dev.deltaship.sync.completed")).map(|r| r.partition).collect();
    parts.len() == partitions
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_stream_carries_every_change_in_order_with_markers_on_every_partition() {
    let env = support::env();
    let client = client().await;
    ensure_widget_crd(&client).await;
    let ns = namespace(&client, "it-kafka").await;
    let prefix = support::unique("it");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let widget_ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.deltaship.dev", "v1", "Widget"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &widget_ar);

    // Present before the bridge starts: delivered as `synced` in the initial sync.
    let before: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "before"}, "data": {"k": "v"}})).unwrap();
    cms.create(&pp(), &before).await.unwrap();

    let mut bridge = Bridge::start(&config(&prefix, &ns, &env.kafka));
    bridge.wait_ready(Duration::from_secs(60));

    // ConfigMap lifecycle, with a name containing dots.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "app.settings"}, "data": {"n": "1"}})).unwrap();
    cms.create(&pp(), &cm).await.unwrap();
    for n in 2..=4 {
        let patch = json!({"data": {"n": n.to_string()}});
        cms.patch("app.settings", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
    cms.delete("app.settings", &DeleteParams::default()).await.unwrap();

    // A Secret whose value must never leave the process.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!("{{\"stringData\":{{\"password\":\"{SECRET_VALUE}\"}}}}")}},
        "stringData": {"password": SECRET_VALUE}
    }))
    .unwrap();
    secrets.create(&pp(), &secret).await.unwrap();

    // A Deployment (the controller-manager adds status updates) and an image change.
    let deploy = support::deployment::deployment("web", "nginx:1.27");
    deploys.create(&pp(), &deploy).await.unwrap();
    support::deployment::set_image(&deploys, "web", "nginx:1.28").await;

    // A custom resource with unusual fields.
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.deltaship.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"x-any": {"nested": [1, {"deep": true}]}}
    }))
    .unwrap();
    widgets.create(&pp(), &widget).await.unwrap();
    widgets.delete("w1", &DeleteParams::default()).await.unwrap();

    let wait = Duration::from_secs(60);
    let cm_topic = format!("{prefix}.core.configmaps");
    let cm_records = read_until(&env.kafka, &cm_topic, wait, |r| {
        types(&events_of(r, &format!("{ns}/app.settings"))).contains(&"object.deleted".to_string()) && has_completed_everywhere(r, 3)
    });
    let secret_records = read_until(&env.kafka, &format!("{prefix}.core.secrets"), wait, |r| !events_of(r, &format!("{ns}/db")).is_empty());
    let deploy_records = read_until(&env.kafka, &format!("{prefix}.apps.deployments"), wait, |r| {
        events_of(r, &format!("{ns}/web")).iter().any(|e| e.json()["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28")
    });
    let widget_records = read_until(&env.kafka, &format!("{prefix}.example.deltaship.dev.widgets"), wait, |r| {
        types(&events_of(r, &format!("{ns}/w1"))).contains(&"object.deleted".to_string())
    });

    // The initial sync: started and completed on every partition, the existing object as
    // `synced` between them, with the marker's sync id.
    let started: Vec<&Record> = cm_records.iter().filter(|r| r.event_type() == "dev.deltaship.sync.started").collect();
    let completed: Vec<&Record> = cm_records.iter().filter(|r| r.event_type() == "dev.deltaship.sync.completed").collect();
    assert_eq!(started.iter().map(|r| r.partition).collect::<HashSet<_>>().len(), 3, "sync.started on every partition");
    assert_eq!(completed.len(), 3, "one sync.completed per partition");
    let marker = completed[0].json();
    assert_eq!(marker["reason"], "initial");
    assert_eq!(marker["mode"], "full");
    assert_eq!(marker["namespace"], ns.as_str());
    // The namespace may also hold kube-root-ca.crt (the controller-manager adds it).
    let synced_in_sync =
        cm_records.iter().filter(|r| r.event_type() == "dev.deltaship.object.synced" && r.header("ce_syncid") == marker["syncId"].as_str().unwrap()).count();
    assert!(synced_in_sync >= 1);
    assert_eq!(marker["counts"], json!({"added": 0, "updated": 0, "deleted": 0, "synced": synced_in_sync}));
    assert_eq!(marker["resource"], json!({"group": "", "version": "v1", "kind": "ConfigMap", "plural": "configmaps"}));
    assert_eq!(completed[0].key, Some(format!("/deltaship/sync/configmaps/{ns}/full/completed")), "one key per watch, mode and phase");
    let before_events = events_of(&cm_records, &format!("{ns}/before"));
    assert_eq!(types(&before_events), ["object.synced"]);
    assert_eq!(before_events[0].header("ce_syncid"), marker["syncId"].as_str().unwrap());
    let p = before_events[0].partition;
    let pos = |r: &Record| (r.partition, r.offset);
    let started_p = started.iter().find(|r| r.partition == p).unwrap();
    let completed_p = completed.iter().find(|r| r.partition == p).unwrap();
    assert!(pos(started_p) < pos(before_events[0]) && pos(before_events[0]) < pos(completed_p));

    // The live lifecycle: in order, one partition, keyed by namespace/name.
    let life = events_of(&cm_records, &format!("{ns}/app.settings"));
    assert_eq!(types(&life), ["object.added", "object.updated", "object.updated", "object.updated", "object.deleted"]);
    assert!(life.iter().all(|r| r.partition == life[0].partition), "one object, one partition");
    assert!(life.windows(2).all(|w| w[0].offset < w[1].offset));
    let versions: Vec<u64> = life.iter().map(|r| r.header("ce_resourceversion").parse().unwrap()).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "resourceVersions increase: {versions:?}");
    let values: Vec<Value> = life.iter().map(|r| r.json()["data"]["n"].clone()).collect();
    assert_eq!(values, [json!("1"), json!("2"), json!("3"), json!("4"), json!("4")]);
    for r in &life {
        assert_eq!(r.key.as_deref(), Some(format!("{ns}/app.settings").as_str()));
        assert_eq!(r.header("ce_partitionkey"), format!("{ns}/app.settings"));
        assert_eq!(r.header("ce_specversion"), "1.0");
        assert_eq!(r.header("ce_source"), "//it/api/v1/configmaps");
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(r.header("ce_cluster"), "it");
        assert_eq!(r.header("ce_apiversion"), "v1");
        assert_eq!(r.header("ce_kind"), "ConfigMap");
        assert_eq!(r.header("ce_namespace"), ns);
        assert_eq!(r.header("ce_name"), "app.settings");
        assert_eq!(r.header("ce_id").len(), 32);
        assert!(!r.headers.contains_key("ce_syncid"), "live events carry no sync id");
        assert!(r.json()["metadata"].get("managedFields").is_none(), "managedFields redacted");
    }
    let ids: HashSet<&str> = life.iter().map(|r| r.header("ce_id")).collect();
    assert_eq!(ids.len(), life.len(), "distinct changes, distinct ids");

    // Redaction: no byte of the secret value in any record of any topic.
    let all: Vec<&Record> = cm_records.iter().chain(&secret_records).chain(&deploy_records).chain(&widget_records).collect();
    for r in &all {
        let bytes = format!("{:?}{:?}", r.headers, String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()));
        assert!(!bytes.contains(SECRET_VALUE), "secret leaked in {r:?}");
    }
    let db = events_of(&secret_records, &format!("{ns}/db"));
    let shipped = db[0].json();
    // No digest key: the values are masked, never an unkeyed digest that could be guessed.
    assert_eq!(shipped["data"]["password"], "***");
    assert_eq!(shipped["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], "***");

    // Deployments: the source of a named group; the image change is shipped.
    let web = events_of(&deploy_records, &format!("{ns}/web"));
    assert_eq!(web[0].header("ce_source"), "//it/apis/apps/v1/deployments");
    assert_eq!(web[0].event_type(), "dev.deltaship.object.added");

    // CRD instances keep their unknown fields.
    let w1 = events_of(&widget_records, &format!("{ns}/w1"));
    assert_eq!(types(&w1), ["object.added", "object.deleted"]);
    assert_eq!(w1[0].json()["spec"]["x-any"]["nested"][1]["deep"], true);
    assert_eq!(w1[0].header("ce_source"), "//it/apis/example.deltaship.dev/v1/widgets");

    // Metrics reflect what was shipped.
    let (_, metrics) = bridge.get("/metrics").expect("/metrics answers");
    assert!(metrics.contains("deltaship_events_total{resource=\"configmaps\",type=\"updated\",route=\"default\"} 3"), "{metrics}");
    assert!(metrics.contains("deltaship_syncs_total"), "{metrics}");
    assert!(metrics.contains("deltaship_publish_latency_seconds_bucket"), "{metrics}");

    let status = bridge.stop(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM exits 0, got {status}");
    delete_namespace(&client, &ns).await;
}

/// Two bridges that see the same change (an HA overlap, or a redelivery) ship it with
/// the same id, so consumers can deduplicate.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_change_gets_the_same_id_from_two_bridges() {
    let env = support::env();
    let client = client().await;
    ensure_widget_crd(&client).await;
    let ns = namespace(&client, "it-ids").await;
    let prefix = support::unique("it");
    let mut a = Bridge::start(&config(&format!("{prefix}-a"), &ns, &env.kafka));
    let mut b = Bridge::start(&config(&format!("{prefix}-b"), &ns, &env.kafka));
    a.wait_ready(Duration::from_secs(60));
    b.wait_ready(Duration::from_secs(60));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "same"}, "data": {"a": "1"}})).unwrap();
    cms.create(&pp(), &cm).await.unwrap();
    cms.patch("same", &PatchParams::default(), &Patch::Merge(&json!({"data": {"a": "2"}}))).await.unwrap();
    let subject = format!("{ns}/same");
    let read =
        |suffix: &str| read_until(&env.kafka, &format!("{prefix}-{suffix}.core.configmaps"), Duration::from_secs(60), |r| events_of(r, &subject).len() >= 2);
    let (ra, rb) = (read("a"), read("b"));
    let ids = |r: &[Record]| -> BTreeMap<String, String> {
        events_of(r, &subject).iter().map(|e| (e.event_type().to_string(), e.header("ce_id").to_string())).collect()
    };
    assert_eq!(ids(&ra), ids(&rb));
    assert_eq!(ids(&ra).len(), 2);
    drop((a, b));
    delete_namespace(&client, &ns).await;
}

/// A marker is a barrier: nothing more joins the records in flight when it goes up, or the
/// marker's own, until they are acknowledged, so they are sent without waiting out
/// `linger.ms`. The linger here is 20 s (the checkpoint writes, bounded to 30 s, need it
/// shorter than that), and an initial sync has three such waits (the `started` marker, the
/// synced objects, the `completed` marker): one waited out would keep the bridge unready
/// past 15 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_sync_does_not_wait_out_a_long_producer_linger() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-linger").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for name in ["a", "b", "c"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        cms.create(&pp(), &cm).await.unwrap();
    }
    let prefix = support::unique("it");
    let mut sink = kafka(&env.kafka, &format!("{prefix}.{{group}}.{{plural}}"));
    sink.librdkafka.insert("linger.ms".into(), "20000".into());
    let mut bridge = Bridge::start(&TestConfig::new().cluster("it").configmaps(&ns).kafka(sink).toml());
    bridge.wait_ready(Duration::from_secs(15));
    let records = read_until(&env.kafka, &format!("{prefix}.core.configmaps"), Duration::from_secs(30), |r| has_completed_everywhere(r, 3));
    for name in ["a", "b", "c"] {
        assert_eq!(types(&events_of(&records, &format!("{ns}/{name}"))), ["object.synced"], "{name}");
    }
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// Markers of sync ids differ between runs, so two initial syncs never share event ids.
/// Resume is off: with it, the second start continues from the first one's checkpoint
/// whenever that was written before the kill (tests/resume.rs covers that).
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_bridge_starts_with_a_new_full_sync() {
    let env = support::env();
    let client = client().await;
    ensure_widget_crd(&client).await;
    let ns = namespace(&client, "it-restart").await;
    let prefix = support::unique("it");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    cms.create(&pp(), &cm).await.unwrap();
    let topic = format!("{prefix}.core.configmaps");
    let config = test_config(&prefix, &ns, &env.kafka).with(|c| c.resume.enabled = false).toml();
    for _ in 0..2 {
        let mut bridge = Bridge::start(&config);
        bridge.wait_ready(Duration::from_secs(60));
        bridge.signal("KILL");
    }
    let records =
        read_until(&env.kafka, &topic, Duration::from_secs(30), |r| r.iter().filter(|r| r.event_type() == "dev.deltaship.sync.completed").count() == 6);
    let synced = events_of(&records, &format!("{ns}/x"));
    assert_eq!(types(&synced), ["object.synced", "object.synced"]);
    assert_ne!(synced[0].header("ce_id"), synced[1].header("ce_id"));
    assert_ne!(synced[0].header("ce_syncid"), synced[1].header("ce_syncid"));
    let by_sync: HashMap<&str, usize> = records.iter().filter(|r| r.event_type() == "dev.deltaship.sync.completed").fold(HashMap::new(), |mut m, r| {
        *m.entry(r.header("ce_syncid")).or_default() += 1;
        m
    });
    assert_eq!(by_sync.len(), 2);
    assert!(by_sync.values().all(|n| *n == 3), "each sync completed on all 3 partitions: {by_sync:?}");
    delete_namespace(&client, &ns).await;
}
