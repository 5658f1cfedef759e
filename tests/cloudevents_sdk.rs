//! deltaship's events, in its own shape and in Knative's, are accepted by the official
//! CloudEvents SDK (Go, built by tests/env/cloudevents/ctl).

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deltaship::config::{EventFormat, ResourceConfig};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;
use support::bridge::Bridge;
use support::config::{TestConfig, resource};
use support::kube::{client, delete_namespace, namespace};

/// Feeds JSON lines to ce-validate; returns its "valid <type> <subject>" lines.
fn validate(lines: &[String]) -> Vec<String> {
    let tool = std::env::var("DELTASHIP_TEST_CE_VALIDATE").expect("DELTASHIP_TEST_CE_VALIDATE is not set: run tests/env/up and source tests/env/.state/env.sh");
    let mut child = Command::new(tool).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the CloudEvents SDK rejected an event: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn deltaship_and_knative_shaped_events_pass_the_official_sdk() {
    support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-ce").await;
    let deployments = |format| TestConfig::new().resource(ResourceConfig { format, ..resource("apps", "Deployment", &[&ns]) }).toml();
    let mut ours = Bridge::start(&deployments(EventFormat::Deltaship));
    let mut knative = Bridge::start(&deployments(EventFormat::Knative));
    ours.wait_ready(Duration::from_secs(60));
    knative.wait_ready(Duration::from_secs(60));

    let deploys: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
    let d = support::deployment::deployment("web", "nginx:1.27");
    deploys.create(&PostParams::default(), &d).await.unwrap();
    support::deployment::set_image(&deploys, "web", "nginx:1.28").await;
    deploys.delete("web", &DeleteParams::default()).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let deleted = |b: &Bridge, ty: &str| b.lines().iter().any(|l| l.contains(ty));
    while !(deleted(&ours, "dev.deltaship.object.deleted") && deleted(&knative, "dev.knative.apiserver.resource.delete")) {
        assert!(Instant::now() < deadline, "no delete events:\n{:?}\n{:?}", ours.lines(), knative.lines());
        std::thread::sleep(Duration::from_millis(200));
    }

    let valid = validate(&ours.lines());
    assert!(valid.iter().any(|l| l == &format!("valid dev.deltaship.object.added {ns}/web")), "{valid:?}");
    assert!(valid.iter().any(|l| l.starts_with("valid dev.deltaship.sync.completed")), "{valid:?}");

    let valid = validate(&knative.lines());
    let subject = format!("/apis/apps/v1/namespaces/{ns}/deployments/web");
    for ty in ["add", "update", "delete"] {
        assert!(valid.contains(&format!("valid dev.knative.apiserver.resource.{ty} {subject}")), "{ty}: {valid:?}");
    }
    let server = std::env::var("DELTASHIP_TEST_KUBE_SERVER").unwrap();
    let add: Value =
        knative.lines().iter().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|e| e["type"] == "dev.knative.apiserver.resource.add").unwrap();
    assert_eq!(add["source"], server.trim_end_matches('/'), "the source is the API server's URL");
    assert_eq!(add["data"]["metadata"]["name"], "web", "ResourceType mode: the object is the data");
    drop((ours, knative));
    delete_namespace(&kube, &ns).await;
}
