//! Unusual but legal input is shipped intact: names and labels using every character
//! Kubernetes allows, the longest names, deeply nested custom resources with arbitrary
//! fields (x-kubernetes-preserve-unknown-fields).

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::kube::{client, delete_namespace, eventually, namespace};

fn events(bridge: &Bridge) -> Vec<Value> {
    bridge.lines().iter().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn wait_for(bridge: &Bridge, subject: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(e) = events(bridge).into_iter().find(|e| e["subject"] == subject && e["type"] == "dev.deltaship.object.added") {
            return e;
        }
        assert!(Instant::now() < deadline, "no added event for {subject}:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn names_and_labels_with_every_allowed_character_arrive_intact() {
    support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-odd").await;
    let mut bridge = Bridge::start(&format!("[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\nnamespaces = [\"{ns}\"]\n"));
    bridge.wait_ready(Duration::from_secs(60));
    // The longest name: a DNS subdomain of 253 characters, dots and dashes included.
    let long = format!("{}.{}.{}.{}", "a".repeat(63), "b-1".repeat(21), "c".repeat(63), "d9".repeat(31)).chars().take(253).collect::<String>();
    let long = long.trim_end_matches(['.', '-']).to_string();
    let labels = json!({
        "example.com/a_b-c.d": "A-z_0.9",
        "k8s.io-x/y": "",
        "z": "x".repeat(63),
    });
    let annotations = json!({"note": "quotes \" backslash \\ tab \t newline \n unicode ünï 😀 %41"});
    for name in [long.as_str(), "x.y-z", "0"] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "data": {"key.with-dots_and_underscores": "v", "KEY-9": "unicode value κλειδί ✓"}
        }))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let created = Api::<ConfigMap>::namespaced(kube.clone(), &ns).create(&PostParams::default(), &cm).await;
        created.unwrap_or_else(|e| panic!("the API server refused {name}: {e}"));
    }
    for name in [long.as_str(), "x.y-z", "0"] {
        let e = wait_for(&bridge, &format!("{ns}/{name}"));
        assert_eq!(e["name"], name);
        assert_eq!(e["data"]["metadata"]["labels"], labels);
        assert_eq!(e["data"]["metadata"]["annotations"], annotations);
        assert_eq!(e["data"]["data"]["KEY-9"], "unicode value κλειδί ✓");
        assert_eq!(e["partitionkey"], format!("{ns}/{name}"));
    }
    drop(bridge);
    delete_namespace(&kube, &ns).await;
}

/// Creates (if missing) the namespaced CRD `<plural>.odd.deltaship.dev` (v1alpha1) whose
/// objects may hold any fields, and waits until it is established.
async fn schemaless_crd(kube: &kube::Client, kind: &str, plural: &str, singular: &str) {
    let name = format!("{plural}.odd.deltaship.dev");
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "group": "odd.deltaship.dev",
            "names": {"kind": kind, "plural": plural, "singular": singular},
            "scope": "Namespaced",
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create CRD {name}: {e}"),
    }
    eventually(Duration::from_secs(30), &format!("the {kind} CRD to be established"), || {
        let (crds, name) = (crds.clone(), name.clone());
        async move {
            let c = crds.get(&name).await.ok()?;
            c.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deeply_nested_schemaless_custom_resource_arrives_intact() {
    support::env();
    let kube = client().await;
    schemaless_crd(&kube, "Blob", "blobs", "blob").await;
    let ns = namespace(&kube, "it-nested").await;
    let mut bridge =
        Bridge::start(&format!("[[resources]]\ngroup = \"odd.deltaship.dev\"\nversion = \"v1alpha1\"\nkind = \"Blob\"\nnamespaces = [\"{ns}\"]\n"));
    bridge.wait_ready(Duration::from_secs(60));
    // 60 levels of objects and arrays, numbers at the edges of JSON, null, empty containers.
    let mut deep = json!({"leaf": [1.5e300, -9007199254740991i64, null, true, {}, []]});
    for i in 0..60 {
        deep = if i % 2 == 0 { json!({format!("level-{i}"): deep}) } else { json!([deep, i]) };
    }
    let blob: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "odd.deltaship.dev/v1alpha1", "kind": "Blob",
        "metadata": {"name": "deep"}, "spec": deep, "anyTopLevelField": {"x": 1}
    }))
    .unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("odd.deltaship.dev", "v1alpha1", "Blob"));
    Api::<DynamicObject>::namespaced_with(kube.clone(), &ns, &ar).create(&PostParams::default(), &blob).await.unwrap();
    let e = wait_for(&bridge, &format!("{ns}/deep"));
    assert_eq!(e["data"]["spec"], deep);
    assert_eq!(e["data"]["anyTopLevelField"]["x"], 1);
    assert_eq!(e["source"], "//local/apis/odd.deltaship.dev/v1alpha1/blobs");
    drop(bridge);
    delete_namespace(&kube, &ns).await;
}

/// The API server accepts objects nested up to 1,000 levels, and their managedFields mirror
/// the nesting. One nested 200 levels, whose name sorts first (so the start-up access check
/// lists it), once stopped `run` and failed `check` at every start; now it is shipped as a
/// reference marked `truncated` (the oversize policy's form), counted, and its changes follow.
#[tokio::test(flavor = "multi_thread")]
async fn an_object_nested_deeper_than_the_json_limit_is_shipped_as_a_truncated_reference() {
    support::env();
    let kube = client().await;
    schemaless_crd(&kube, "Abyss", "abysses", "abyss").await;
    let ns = namespace(&kube, "it-abyss").await;
    // Written as text: the test's own client cannot parse the object back either.
    let write = |method: http::Method, name: &str, leaf: u32| {
        let spec = format!("{}{leaf}{}", "[".repeat(200), "]".repeat(200));
        let body = format!(r#"{{"apiVersion":"odd.deltaship.dev/v1alpha1","kind":"Abyss","metadata":{{"name":"{name}"}},"spec":{spec}}}"#);
        let path = format!("/apis/odd.deltaship.dev/v1alpha1/namespaces/{ns}/abysses");
        let (uri, content_type) = match method {
            http::Method::POST => (path, "application/json"),
            _ => (format!("{path}/{name}"), "application/merge-patch+json"),
        };
        http::Request::builder().method(method).uri(uri).header("content-type", content_type).body(body.into_bytes()).unwrap()
    };
    kube.request_text(write(http::Method::POST, "a-deep", 1)).await.expect("the API server takes 200 levels");
    let config = format!("[[resources]]\ngroup = \"odd.deltaship.dev\"\nversion = \"v1alpha1\"\nkind = \"Abyss\"\nnamespaces = [\"{ns}\"]\n");
    let (status, stdout, stderr) = support::bridge::command(&["check"], &config, &[]);
    assert!(status.success(), "check fails on a deep object:\n{stdout}{stderr}");
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(60));
    let synced = |b: &Bridge| events(b).into_iter().find(|e| e["subject"] == format!("{ns}/a-deep") && e["type"] == "dev.deltaship.object.synced");
    let e = synced(&bridge).unwrap_or_else(|| panic!("the deep object is in the initial sync:\n{}", bridge.log_text()));
    assert_eq!(e["truncated"], true, "{e}");
    assert_eq!((e["data"]["name"].as_str(), e["data"]["namespace"].as_str(), e["data"].get("spec")), (Some("a-deep"), Some(ns.as_str()), None), "{e}");
    assert_eq!(e["data"]["resourceVersion"], e["resourceversion"]);
    kube.request_text(write(http::Method::PATCH, "a-deep", 2)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let updated = loop {
        if let Some(e) = events(&bridge).into_iter().find(|e| e["subject"] == format!("{ns}/a-deep") && e["type"] == "dev.deltaship.object.updated") {
            break e;
        }
        assert!(Instant::now() < deadline, "no update of the deep object:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(updated["truncated"], true, "{updated}");
    let metrics = bridge.get("/metrics").unwrap().1;
    assert!(metrics.lines().any(|l| l == "deltaship_bad_objects_total{resource=\"abysses.odd.deltaship.dev\",reason=\"too_deep\"} 2"), "{metrics}");
    drop(bridge);
    delete_namespace(&kube, &ns).await;
}
