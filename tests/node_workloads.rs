//! Operating deltaship on the test node, issue 37's scenario 2: a real workload. The release
//! watches the Deployments of a namespace with the serverless trigger's filter
//! (config/deploy-trigger.toml: `updated` events whose pod template changed) and ships them
//! to a JetStream stream. A Deployment of the node's busybox image is rolled out by the real
//! controllers and kubelet: created, its pod template's environment changed twice, scaled up
//! and down in between. Its status churns through every rollout and scale (replica counts,
//! conditions, observed generations); the trigger fires exactly once per template change.
//!
//! Needs `tests/env/up` (the node, its registry, the API server and NATS; root).

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::churn::metric;
use support::kube::eventually;
use support::node::{NatsInstall, leader_among, metrics, node_client, release};

/// Two replicas of the test busybox image, with environment variable `STAGE`.
fn deployment(image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", "exec sleep 3600"], "env": [{"name": "STAGE", "value": "one"}]}],
                },
            },
        },
    }))
    .unwrap()
}

/// The Deployment once its controller has seen its last change and `replicas` pods of the
/// current template are ready.
async fn rolled_out(deploys: &Api<Deployment>, replicas: i32) -> Deployment {
    eventually(Duration::from_secs(120), &format!("web rolled out with {replicas} ready replicas"), || async {
        let d = deploys.get("web").await.ok()?;
        let (generation, status) = (d.metadata.generation?, d.status.clone()?);
        let done = status.observed_generation == Some(generation)
            && status.updated_replicas == Some(replicas)
            && status.ready_replicas == Some(replicas)
            && status.replicas == Some(replicas);
        done.then_some(d)
    })
    .await
}

async fn set_stage(deploys: &Api<Deployment>, stage: &str) {
    let env = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "STAGE", "value": stage}]}]}}}});
    deploys.patch("web", &PatchParams::default(), &Patch::Strategic(&env)).await.unwrap();
}

async fn scale(deploys: &Api<Deployment>, replicas: i32) {
    deploys.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": replicas}}))).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_rolled_out_on_the_node_triggers_once_per_pod_template_change() {
    // support::nats reads what was stored since its clock started: start it now, before
    // the rollouts (it starts at its first use otherwise, after them).
    let _ = *support::nats::STARTED;
    let client = node_client().await;
    let nats = support::var("DELTASHIP_TEST_NATS");
    let it = NatsInstall::start_with(&client, release(), "node-workload", &nats, |watched, values| {
        let trigger = json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespaces": [watched],
                             "filter": {"types": ["updated"], "changed_paths": ["/spec/template"]}});
        values["config"]["resources"].as_array_mut().unwrap().push(trigger);
        values["rbac"] = json!({"resources": [{"group": "", "resource": "configmaps"}, {"group": "apps", "resource": "deployments"}]});
    })
    .await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &it.watched);
    deploys.create(&PostParams::default(), &deployment(&support::var("DELTASHIP_TEST_NODE_BUSYBOX_IMAGE"))).await.unwrap();
    rolled_out(&deploys, 2).await;
    set_stage(&deploys, "two").await;
    rolled_out(&deploys, 2).await;
    scale(&deploys, 3).await;
    rolled_out(&deploys, 3).await;
    scale(&deploys, 1).await;
    rolled_out(&deploys, 1).await;
    set_stage(&deploys, "three").await;
    rolled_out(&deploys, 1).await;

    // The stream holds the trigger's events; the last template change comes last (one
    // object's events keep their order), so waiting for it waits for all.
    let js = async_nats::jetstream::new(async_nats::connect(&nats).await.unwrap());
    let subject = format!("{}.apps.deployment.{}.web", it.cluster, it.watched);
    let stage = |m: &support::nats::Msg| m.json()["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"].clone();
    let msgs = support::nats::read_until(&js, &it.stream, Duration::from_secs(60), |m| m.iter().any(|m| m.subject == subject && stage(m) == "three")).await;
    let triggers: Vec<(String, Value)> = msgs.iter().filter(|m| m.subject == subject).map(|m| (m.event_type().to_owned(), stage(m))).collect();
    // The leader's filter left out every other update of the Deployment.
    let leader = leader_among(&client, &it.ns, &it.pods, Duration::from_secs(30)).await;
    let text = metrics(&it.ns, &leader).expect("the leader's /metrics");
    let deployments: String = text.lines().filter(|l| l.contains("resource=\"deployments.apps\"")).map(|l| format!("{l}\n")).collect();
    let left_out = metric(&deployments, "deltaship_filtered_events_total");
    assert_eq!(
        triggers,
        [("dev.deltaship.object.updated".to_owned(), json!("two")), ("dev.deltaship.object.updated".to_owned(), json!("three"))],
        "one trigger per template change, none for the {left_out} other changes of rollouts, scaling and status"
    );
    assert!(left_out >= 6.0, "the rollouts and scales changed the Deployment's status: {deployments}");
    eprintln!("2 triggers for 2 template changes; {left_out} other events of the Deployment left out by the filter (rollouts, scales, status)");
    it.remove(&client).await;
}
