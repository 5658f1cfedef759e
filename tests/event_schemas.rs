//! The JSON Schemas of schemas/events/ hold for real events: a bridge with four routes to
//! stdout (object, reference, patch and Knative reference payloads) ships a ConfigMap's
//! life; every event validates against event.schema.json (markers and references against
//! their data schemas through it), and with `dataschema_base` set, markers and references
//! name the schema file their data follows.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deltaship::config::{EventFormat, FilterConfig, PayloadMode, RouteConfig, SinkConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::bridge::Bridge;
use support::config::TestConfig;
use support::kube::{client, delete_namespace, namespace};

const BASE: &str = "https://schemas.example.com/deltaship/events/";

fn schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/events")
}

/// Resolves the schemas' relative references (`marker.schema.json`) to the files beside them.
struct Files;

impl jsonschema::Retrieve for Files {
    fn retrieve(&self, uri: &jsonschema::Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Ok(serde_json::from_slice(&std::fs::read(uri.path().as_str())?)?)
    }
}

fn validator() -> jsonschema::Validator {
    let path = schemas().join("event.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    jsonschema::options()
        .with_base_uri(format!("file://{}", path.display()))
        .with_retriever(Files)
        .should_validate_formats(true)
        .build(&schema)
        .expect("event.schema.json is a valid schema")
}

fn route(name: &str, payload: PayloadMode, format: EventFormat) -> RouteConfig {
    RouteConfig {
        name: name.into(),
        sink: SinkConfig::Stdout {},
        resources: Vec::new(),
        payload: Some(payload),
        format: Some(format),
        filter: FilterConfig::default(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_events_of_every_payload_follow_the_published_schemas() {
    let client = client().await;
    let ns = namespace(&client, "it-schemas").await;
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).with(|c| {
        c.dataschema_base = Some(BASE.into());
        c.routes = vec![
            route("objects", PayloadMode::Object, EventFormat::Deltaship),
            route("references", PayloadMode::Reference, EventFormat::Deltaship),
            route("patches", PayloadMode::Patch, EventFormat::Deltaship),
            route("knative", PayloadMode::Reference, EventFormat::Knative),
        ];
    });
    let mut bridge = Bridge::start(&config.toml());
    bridge.wait_ready(Duration::from_secs(60));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "1"}})).unwrap()).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let events: Vec<Value> = loop {
        let events: Vec<Value> = bridge.lines().iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let deletes = events
            .iter()
            .filter(|e| e["name"] == "a" && matches!(e["type"].as_str(), Some("dev.deltaship.object.deleted" | "dev.knative.apiserver.ref.delete")))
            .count();
        if deletes == 4 {
            break events;
        }
        assert!(Instant::now() < deadline, "not every route shipped the delete within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    };
    let validator = validator();
    let mut seen = std::collections::BTreeSet::new();
    for e in &events {
        let errors: Vec<String> = validator.iter_errors(e).map(|err| format!("{} {err}", err.instance_path())).collect();
        assert!(errors.is_empty(), "{e}\ndoes not follow event.schema.json: {errors:?}");
        // Markers and references name their schema; objects and patches do not.
        let ty = e["type"].as_str().unwrap();
        let expected = match (ty, e["datacontenttype"].as_str()) {
            (t, _) if t.starts_with("dev.deltaship.sync.") => Some("marker.schema.json"),
            (t, _) if t.starts_with("dev.knative.apiserver.ref.") => Some("knative-reference.schema.json"),
            _ if e["data"].get("metadata").is_none() && e["data"].is_object() => Some("reference.schema.json"),
            _ => None,
        };
        assert_eq!(e["dataschema"].as_str(), expected.map(|f| format!("{BASE}{f}")).as_deref(), "{e}");
        if let Some(file) = expected {
            assert!(schemas().join(file).is_file(), "{file} is not published");
            seen.insert(file);
        }
        if e["datacontenttype"] == "application/json-patch+json" {
            seen.insert("patch");
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["knative-reference.schema.json", "marker.schema.json", "patch", "reference.schema.json"]);
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// What the schemas refuse: a marker without its sync id, a reference with an unknown
/// member, an unknown type.
#[test]
fn the_schemas_refuse_what_the_contract_does_not_allow() {
    let validator = validator();
    let marker = json!({
        "specversion": "1.0", "id": "1", "source": "//c/api/v1/configmaps", "type": "dev.deltaship.sync.started",
        "time": "2026-11-24T10:00:00Z", "datacontenttype": "application/json", "cluster": "c", "apiversion": "v1",
        "kind": "ConfigMap", "partitionkey": "/deltaship/sync", "syncid": "s1",
        "data": {"syncId": "s1", "reason": "initial", "mode": "full", "resource": {"group": "", "version": "v1", "kind": "ConfigMap", "plural": "configmaps"}, "resourceVersion": ""}
    });
    assert!(validator.is_valid(&marker));
    let mut no_sync_id = marker.clone();
    no_sync_id.as_object_mut().unwrap().remove("syncid");
    let mut bad_reason = marker.clone();
    bad_reason["data"]["reason"] = json!("restart");
    let mut unknown_type = marker.clone();
    unknown_type["type"] = json!("dev.deltaship.object.touched");
    let reference = json!({
        "specversion": "1.0", "id": "2", "source": "//c/api/v1/configmaps", "type": "dev.deltaship.object.updated", "subject": "ns/a",
        "time": "2026-11-24T10:00:00Z", "datacontenttype": "application/json", "cluster": "c", "apiversion": "v1", "kind": "ConfigMap",
        "namespace": "ns", "name": "a", "uid": "u", "resourceversion": "5", "partitionkey": "ns/a", "truncated": true,
        "data": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": "u", "resourceVersion": "5"}
    });
    assert!(validator.is_valid(&reference));
    let mut extra = reference.clone();
    extra["data"]["data"] = json!({"k": "v"});
    for (what, e) in [("no syncid", no_sync_id), ("reason restart", bad_reason), ("unknown type", unknown_type), ("truncated with the object", extra)] {
        assert!(!validator.is_valid(&e), "{what} passed");
    }
}
