//! The use-case configs of config/ run end to end against the real servers, as they are,
//! with only the environment overrides a user would set (brokers, and here a unique
//! cluster name and topic prefix so tests do not see each other's events: two tests under
//! one cluster name would be two deployments on one route, and the second would not lead it).

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use serde_json::json;
use support::bridge::Bridge;
use support::kube::{client, delete_namespace, eventually, namespace};
use support::state::assert_rebuild_matches;

/// `deltaship run --config config/<name>` with `envs`, until ready.
fn run(name: &str, envs: &[(&str, &str)]) -> Bridge {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config").join(name);
    let mut bridge = Bridge::start_file(&config, envs);
    bridge.wait_ready(Duration::from_secs(60));
    bridge
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_trigger_ships_exactly_one_event_per_pod_template_change() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "uc-trigger").await;
    let cluster = support::unique("c");
    let _run = run("deploy-trigger.toml", &[("DELTASHIP_SINK__URL", &env.nats), ("DELTASHIP_CLUSTER", &cluster)]);
    let deploys: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
    deploys.create(&PostParams::default(), &support::deployment::deployment("web", "nginx:1.27")).await.unwrap();
    // Let the controller-manager finish its status and annotation updates.
    eventually(Duration::from_secs(60), "the Deployment to be observed", || {
        let deploys = deploys.clone();
        async move { deploys.get("web").await.ok()?.status?.observed_generation.filter(|g| *g >= 1) }
    })
    .await;
    support::deployment::set_image(&deploys, "web", "nginx:1.28").await;
    // Scaling changes the spec but not the pod template: no trigger.
    deploys.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 2}}))).await.unwrap();
    eventually(Duration::from_secs(60), "the rollout's status updates", || {
        let deploys = deploys.clone();
        async move { deploys.get("web").await.ok()?.status?.observed_generation.filter(|g| *g >= 3) }
    })
    .await;
    // A last pod-template change as a sentinel: events of one object keep their order, so
    // anything shipped for the status and scaling updates would come before it.
    let sentinel = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.29"}]}}}});
    deploys.patch("web", &PatchParams::default(), &Patch::Strategic(&sentinel)).await.unwrap();
    let js = support::nats::jetstream().await;
    let subject = format!("deltaship.{cluster}.apps.deployment.{ns}.web");
    let image = |m: &support::nats::Msg| m.json()["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    let msgs =
        support::nats::read_until(&js, support::nats::STREAM, Duration::from_secs(60), |m| m.iter().any(|m| m.subject == subject && image(m) == "nginx:1.29"))
            .await;
    let mine: Vec<_> = msgs.iter().filter(|m| m.subject == subject).collect();
    assert_eq!(mine.len(), 2, "exactly one trigger per template change: {:?}", mine.iter().map(|m| (m.event_type(), image(m))).collect::<Vec<_>>());
    assert!(mine.iter().all(|m| m.event_type() == "dev.deltaship.object.updated"));
    assert_eq!(image(mine[0]), "nginx:1.28");
    delete_namespace(&kube, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_ships_every_change_with_secrets_redacted() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "uc-audit").await;
    let prefix = support::unique("audit");
    let cluster = support::unique("c");
    let template = format!("{prefix}.{{group}}.{{plural}}");
    // One Secret exists before the start (shipped from the initial list, whose items carry
    // no kind), one is created after (shipped from a watch event).
    let secrets = Api::<Secret>::namespaced(kube.clone(), &ns);
    let before: Secret = serde_json::from_value(json!({"metadata": {"name": "early"}, "stringData": {"password": "audit-secret-value"}})).unwrap();
    secrets.create(&PostParams::default(), &before).await.unwrap();
    let _run = run("audit.toml", &[("DELTASHIP_SINK__BROKERS", &env.kafka), ("DELTASHIP_SINK__TOPIC_TEMPLATE", &template), ("DELTASHIP_CLUSTER", &cluster)]);
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "db"}, "stringData": {"password": "audit-secret-value"}})).unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.patch("c", &PatchParams::default(), &Patch::Merge(&json!({"data": {"a": "2"}}))).await.unwrap();
    cms.delete("c", &DeleteParams::default()).await.unwrap();
    let key = format!("{ns}/c");
    let records = support::kafka::read_until(&env.kafka, &format!("{prefix}.core.configmaps"), Duration::from_secs(60), |r| {
        r.iter().filter(|r| r.key.as_deref() == Some(key.as_str())).count() == 3
    });
    let types: Vec<&str> = records.iter().filter(|r| r.key.as_deref() == Some(key.as_str())).map(|r| r.event_type()).collect();
    assert_eq!(types, ["dev.deltaship.object.added", "dev.deltaship.object.updated", "dev.deltaship.object.deleted"]);
    let db = format!("{ns}/db");
    let early = format!("{ns}/early");
    let shipped = support::kafka::read_until(&env.kafka, &format!("{prefix}.core.secrets"), Duration::from_secs(60), |r| {
        [&db, &early].iter().all(|k| r.iter().any(|r| r.key.as_deref() == Some(k.as_str())))
    });
    for r in shipped.iter().filter(|r| r.event_type().contains(".object.")) {
        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        // "audit-secret-value" in base64, as the API server stores it.
        assert!(!value.contains("audit-secret-value") && !value.contains("YXVkaXQtc2VjcmV0LXZhbHVl"), "{value}");
        assert_eq!((r.json()["apiVersion"].as_str(), r.json()["kind"].as_str()), (Some("v1"), Some("Secret")), "{value}");
    }
    delete_namespace(&kube, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replica_keeps_compacted_topics_with_tombstones_that_rebuild_the_cluster_state() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "uc-replica").await;
    let prefix = support::unique("replica");
    let cluster = support::unique("c");
    let template = format!("{prefix}.{{group}}.{{plural}}");
    let _run = run("replica.toml", &[("DELTASHIP_SINK__BROKERS", &env.kafka), ("DELTASHIP_SINK__TOPIC_TEMPLATE", &template), ("DELTASHIP_CLUSTER", &cluster)]);
    let topic = format!("{prefix}.core.configmaps");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &env.kafka).create().unwrap();
    let described = admin.describe_configs(&[ResourceSpecifier::Topic(&topic)], &AdminOptions::new()).await.unwrap();
    let policy = described[0].as_ref().unwrap().get("cleanup.policy").and_then(|e| e.value.clone());
    assert_eq!(policy.as_deref(), Some("compact"), "the topic is compacted");

    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for i in 0..10 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("o{i}")}, "data": {"v": "1"}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    for i in 0..10 {
        if i % 3 == 0 {
            cms.delete(&format!("o{i}"), &DeleteParams::default()).await.unwrap();
        } else {
            cms.patch(&format!("o{i}"), &PatchParams::default(), &Patch::Merge(&json!({"data": {"v": "2"}}))).await.unwrap();
        }
    }
    let gone = format!("{ns}/o0");
    let records = support::kafka::read_until(&env.kafka, &topic, Duration::from_secs(60), |r| {
        r.iter().any(|r| r.key.as_deref() == Some(gone.as_str()) && r.value.is_none())
    });
    let o0: Vec<_> = records.iter().filter(|r| r.key.as_deref() == Some(gone.as_str())).collect();
    assert!(o0.last().unwrap().value.is_none(), "a tombstone follows the delete");

    let args = vec!["--kafka".into(), env.kafka.clone(), "--topic".into(), topic];
    assert_rebuild_matches(&kube, args, std::slice::from_ref(&ns), Duration::from_secs(60)).await;
    delete_namespace(&kube, &ns).await;
}
