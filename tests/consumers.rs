//! The consumer libraries of consumers/ (vectors/README.md: the protocol they share): each
//! passes the shared test vectors in its own test runner, and rebuilds the API server's
//! state from the real Kafka broker and NATS server after a bridge shipped live changes.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use deltaship::config::{FilterConfig, RouteConfig, SinkConfig, Template};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats, partitions};
use support::kube::{client, delete_namespace, namespace};
use support::state::{api_configmaps, assert_rebuild_matches};

fn consumers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("consumers")
}

fn python() -> Command {
    let mut cmd = Command::new(support::var("DELTASHIP_TEST_PYTHON"));
    cmd.current_dir(consumers().join("python")).env("PYTHONPATH", consumers().join("python"));
    cmd
}

fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_python_consumer_passes_the_shared_vectors() {
    let mut pytest = python();
    pytest.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
    let said = run(pytest, "pytest consumers/python");
    assert!(said.contains("passed") && !said.contains("skipped"), "{said}");
}

/// The ConfigMaps of `ns` in a consumer's printed state: key to resourceVersion.
fn configmaps(state: &str, ns: &str) -> BTreeMap<String, String> {
    let state: Value = serde_json::from_str(state).unwrap_or_else(|e| panic!("not a state document ({e}): {state}"));
    state["v1/ConfigMap"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.starts_with(&format!("{ns}/")))
        .map(|(key, o)| (key.clone(), o["metadata"]["resourceVersion"].as_str().unwrap_or("<none>").to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_consumer_rebuilds_the_api_servers_state_from_the_real_brokers() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-consumers").await;
    let cluster = support::unique("c");
    let u = support::unique("cons").replace('-', "");
    let topic = format!("{u}.configmaps");
    let stream = format!("CONS_{u}");
    let mut k = kafka(&env.kafka, &format!("{u}.{{plural}}"));
    k.create_topics = partitions(3);
    let mut n = nats(&env.nats);
    n.jetstream.stream = stream.clone();
    n.jetstream.subjects = vec![format!("{u}.>")];
    n.subject_template = Template::parse(&format!("{u}.{{cluster}}.{{group}}.{{kind}}.{{namespace}}.{{name}}")).unwrap();
    n.marker_subject_template = Template::parse(&format!("{u}.{{cluster}}.{{group}}.{{kind}}._sync")).unwrap();
    let route = |name: &str, sink| RouteConfig { name: name.into(), sink, resources: Vec::new(), payload: None, format: None, filter: FilterConfig::default() };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 0..5 {
        api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("before-{i}")}, "data": {"v": "0"}})).unwrap())
            .await
            .unwrap();
    }
    let config = TestConfig::new()
        .cluster(&cluster)
        .configmaps(&ns)
        .with(|c| c.routes = vec![route("kafka", SinkConfig::Kafka(Box::new(k))), route("nats", SinkConfig::Nats(Box::new(n)))]);
    let mut bridge = Bridge::start(&config.toml());
    bridge.wait_ready(Duration::from_secs(60));
    for i in 0..5 {
        api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("live-{i}")}, "data": {"v": "0"}})).unwrap())
            .await
            .unwrap();
        api.patch(&format!("before-{i}"), &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "1"}}))).await.unwrap();
    }
    api.delete("before-0", &DeleteParams::default()).await.unwrap();
    api.delete("live-4", &DeleteParams::default()).await.unwrap();
    let namespaces = [ns.clone()];
    assert_rebuild_matches(&client, vec!["--kafka".into(), env.kafka.clone(), "--topic".into(), topic.clone()], &namespaces, Duration::from_secs(120)).await;
    assert_rebuild_matches(&client, vec!["--nats".into(), env.nats.clone(), "--stream".into(), stream.clone()], &namespaces, Duration::from_secs(120)).await;
    let want = api_configmaps(&client, &namespaces).await;

    let mut from_kafka = python();
    from_kafka.args(["-m", "deltaship_consumer", "--kafka", &env.kafka, "--topic", &topic, "--cluster", &cluster]);
    assert_eq!(configmaps(&run(from_kafka, "the Python consumer on Kafka"), &ns), want, "Python, Kafka");
    let mut from_nats = python();
    from_nats.args(["-m", "deltaship_consumer", "--nats", &env.nats, "--stream", &stream, "--cluster", &cluster]);
    assert_eq!(configmaps(&run(from_nats, "the Python consumer on JetStream"), &ns), want, "Python, JetStream");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}
