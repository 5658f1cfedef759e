//! The example events of the event contract (docs/reference/event-contract.md) are what
//! deltaship really emits: same attributes,
//! extensions, types and data shape as events produced here against the real API server.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;

/// The JSON block that follows `<!-- example: NAME -->` in the documentation.
fn readme_example(name: &str) -> Value {
    let block = support::docs::block(&format!("example: {name}"), "json");
    serde_json::from_str(&block).unwrap_or_else(|e| panic!("example {name} is not JSON: {e}"))
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// Same attribute names, same values for the fixed ones, same data shape.
fn assert_same_shape(doc: &Value, real: &Value, fixed: &[&str]) {
    assert_eq!(keys(doc), keys(real), "attributes differ:\ndocumented: {doc:#}\nreal:   {real:#}");
    for k in fixed {
        assert_eq!(doc[k], real[k], "attribute {k} differs:\nreal event: {real:#}");
    }
    assert_eq!(keys(&doc["data"]), keys(&real["data"]), "data fields differ:\nreal event: {real:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn readme_example_events_match_real_ones() {
    let client = support::kube::client().await;
    let ns = support::kube::namespace(&client, "shop").await;
    let mut bridge = Bridge::start(&format!(
        "cluster = \"prod\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"{ns}\"]\nlabel_selector = \"app=shop\"\n"
    ));
    bridge.wait_ready(Duration::from_secs(60));
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app.settings", "labels": {"app": "shop"}},
        "data": {"color": "blue"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    let events: Vec<Value> = loop {
        let events: Vec<Value> = bridge.lines().iter().map(|l| serde_json::from_str(l).expect("one JSON event per line")).collect();
        if events.iter().any(|e| e["type"] == "dev.deltaship.object.added") {
            break events;
        }
        assert!(Instant::now() < deadline, "no added event; got {events:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let find = |ty: &str| events.iter().find(|e| e["type"] == ty).unwrap_or_else(|| panic!("no {ty} in {events:#?}")).clone();

    let added = find("dev.deltaship.object.added");
    let doc = readme_example("object.added");
    assert_same_shape(&doc, &added, &["specversion", "type", "source", "datacontenttype", "cluster", "apiversion", "kind", "name"]);
    assert_eq!(added["subject"], format!("{ns}/app.settings"));
    assert_eq!(doc["data"]["data"], added["data"]["data"]);
    assert_eq!(keys(&doc["data"]["metadata"]), keys(&added["data"]["metadata"]));

    let completed = find("dev.deltaship.sync.completed");
    let doc = readme_example("sync.completed");
    assert_same_shape(&doc, &completed, &["specversion", "type", "source", "datacontenttype", "cluster"]);
    assert_eq!(doc["partitionkey"], completed["partitionkey"].as_str().unwrap().replace(&ns, "shop"), "marker key");
    for field in ["reason", "mode", "resource", "labelSelector", "counts"] {
        assert_eq!(doc["data"][field], completed["data"][field], "marker field {field}");
    }
    drop(bridge);
    support::kube::delete_namespace(&client, &ns).await;
}
