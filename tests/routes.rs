//! Routes against the real API server, Kafka and NATS: one watch feeding two sinks, each
//! with its own queue, selection and shape. In a test binary of its own: it stops the
//! shared brokers.

mod support;

use std::time::{Duration, Instant};

use deltaship::config::{EventFormat, FilterConfig, JetStreamConfig, KafkaConfig, NatsConfig, PayloadMode, RouteConfig, SinkConfig};
use deltaship::model::ChangeType;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::bridge::Bridge;
use support::churn::{ctl, metric, try_ctl};
use support::config::{TestConfig, kafka, nats, partitions, resource};
use support::kube::{client, delete_namespace, namespace};
use support::nats::{Msg, STREAM, jetstream, read_until};
use support::state::assert_rebuild_matches;

/// The default stream (subjects `deltaship.>`), shared by the NATS tests; each test has a
/// cluster name of its own, so its subjects are its own.
const OBJECTS: usize = 20;

/// The tests of this binary run one at a time: the fan-out test stops the brokers the
/// other one reads from.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts a stopped test server again when dropped, so a failing test leaves the
/// environment as it found it.
struct Down(&'static str);

impl Down {
    fn stop(component: &'static str) -> Down {
        ctl(component, "stop");
        Down(component)
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        if let Err(e) = try_ctl(self.0, "start") {
            eprintln!("could not start {} again: {e}", self.0);
        }
    }
}

/// A route named `name` to `sink`, with every resource as it is configured.
fn route(name: &str, sink: SinkConfig) -> RouteConfig {
    RouteConfig { name: name.into(), sink, resources: Vec::new(), payload: None, format: None, filter: FilterConfig::default() }
}

fn fan_out_config(cluster: &str, ns: &str, topic_prefix: &str) -> String {
    let env = support::env();
    let analytics = route("analytics", SinkConfig::Kafka(Box::new(kafka(&env.kafka, &format!("{topic_prefix}.{{group}}.{{plural}}")))));
    let functions = route("functions", SinkConfig::Nats(Box::new(nats(&env.nats))));
    TestConfig::new().cluster(cluster).with(|c| c.delivery.retry_max_ms = 2000).configmaps(ns).with(|c| c.routes = vec![analytics, functions]).toml()
}

async fn set_all(cms: &Api<ConfigMap>, names: &[String], value: usize) {
    for n in names {
        cms.patch(n, &PatchParams::default(), &Patch::Merge(&json!({"data": {"i": value.to_string()}}))).await.unwrap();
    }
}

/// Waits until /readyz fails naming `route` (its sink's probe noticed the outage).
fn wait_unready_naming(bridge: &Bridge, route: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((503, body)) = bridge.get("/readyz")
            && body.contains(&format!("route {route}: the sink is not reachable"))
        {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "/readyz never named route {route}: {:?}", bridge.get("/readyz"));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Per test object (`cm-*`; every namespace also has the API server's `kube-root-ca.crt`),
/// the `data.i` values of its stored events in stream order (deletes as -1).
fn values_by_object(msgs: &[Msg], cluster: &str) -> std::collections::BTreeMap<String, Vec<i64>> {
    let mut out: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    let ours = |m: &&Msg| m.headers.get("ce-cluster").map(String::as_str) == Some(cluster) && m.headers.get("ce-name").is_some_and(|n| n.starts_with("cm-"));
    for m in msgs.iter().filter(ours) {
        let ty = m.event_type();
        if !ty.contains(".object.") {
            continue;
        }
        let v = if ty.ends_with(".deleted") { -1 } else { m.json()["data"]["i"].as_str().and_then(|s| s.parse().ok()).unwrap_or(-2) };
        out.entry(m.header("ce-subject").to_string()).or_default().push(v);
    }
    out
}

/// One watch feeds a Kafka route and a NATS route. While NATS is down, Kafka keeps
/// receiving every change (the NATS route's own queue holds its events); when NATS is
/// back, it receives them all, in order. Then the same with Kafka down. Both streams
/// rebuild the API server's state.
#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_route_keeps_delivering_to_one_sink_while_the_other_is_down() {
    let _serial = SERIAL.lock().await;
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-routes").await;
    let cluster = support::unique("c");
    let topic_prefix = support::unique("it-routes");
    let topic = format!("{topic_prefix}.core.configmaps");
    let kafka_rebuild = vec!["--kafka".to_string(), env.kafka.clone(), "--topic".into(), topic.clone()];
    let nats_rebuild = vec!["--nats".to_string(), env.nats.clone(), "--stream".into(), STREAM.into(), "--cluster".into(), cluster.clone()];
    let namespaces = [ns.clone()];

    let mut bridge = Bridge::start(&fan_out_config(&cluster, &ns, &topic_prefix));
    bridge.wait_ready(Duration::from_secs(60));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("cm-{i:02}")).collect();
    for n in &names {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": n}, "data": {"i": "0"}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }

    // NATS down: Kafka goes on.
    {
        let nats_down = Down::stop("nats");
        let ready = wait_unready_naming(&bridge, "functions");
        assert!(!ready.contains("route analytics"), "only the NATS route is unready: {ready}");
        for value in 1..=5 {
            set_all(&cms, &names, value).await;
        }
        for n in &names[..5] {
            cms.delete(n, &DeleteParams::default()).await.unwrap();
        }
        assert_rebuild_matches(&client, kafka_rebuild.clone(), &namespaces, Duration::from_secs(60)).await;
        eprintln!("ROUTES: Kafka caught up with the API server while NATS was down");
        drop(nats_down);
    }
    assert_rebuild_matches(&client, nats_rebuild.clone(), &namespaces, Duration::from_secs(120)).await;

    // Kafka down: NATS goes on.
    {
        let kafka_down = Down::stop("kafka");
        wait_unready_naming(&bridge, "analytics");
        for value in 6..=10 {
            set_all(&cms, &names[5..], value).await;
        }
        assert_rebuild_matches(&client, nats_rebuild.clone(), &namespaces, Duration::from_secs(60)).await;
        eprintln!("ROUTES: NATS caught up with the API server while Kafka was down");
        drop(kafka_down);
    }
    assert_rebuild_matches(&client, kafka_rebuild, &namespaces, Duration::from_secs(120)).await;
    bridge.wait_ready(Duration::from_secs(60));

    // Every update reached NATS once each, in order (JetStream drops resent duplicates by id).
    let js = jetstream().await;
    let msgs = read_until(&js, STREAM, Duration::from_secs(30), |m| {
        let v = values_by_object(m, &cluster);
        v.len() == OBJECTS && v.values().all(|vals| matches!(vals.last(), Some(-1 | 10)))
    })
    .await;
    for (subject, vals) in values_by_object(&msgs, &cluster) {
        let want: Vec<i64> = if vals.last() == Some(&-1) { vec![0, 1, 2, 3, 4, 5, -1] } else { (0..=10).collect() };
        assert_eq!(vals, want, "events of {subject} on NATS");
    }
    assert_eq!(bridge.log_text().matches("Watch started").count(), 1, "one watch feeds both routes");
    assert!(bridge.stop(Duration::from_secs(30)).success());
    delete_namespace(&client, &ns).await;
}

fn shapes_config(cluster: &str, ns: &str, topic_prefix: &str) -> String {
    let env = support::env();
    let audit = KafkaConfig { create_topics: partitions(1), ..kafka(&env.kafka, &format!("{topic_prefix}.{{group}}.{{plural}}")) };
    let trigger = RouteConfig {
        resources: vec!["ConfigMap".into()],
        payload: Some(PayloadMode::Reference),
        format: Some(EventFormat::Knative),
        filter: FilterConfig { types: Some(vec![ChangeType::Updated]), ..FilterConfig::default() },
        // JetStream's defaults (an ack timeout of 10 s), not the tests' usual 2 s.
        ..route("trigger", SinkConfig::Nats(Box::new(NatsConfig { jetstream: JetStreamConfig::default(), ..nats(&env.nats) })))
    };
    TestConfig::new()
        .cluster(cluster)
        .configmaps(ns)
        .resource(resource("", "Secret", &[ns]))
        .with(|c| c.routes = vec![route("audit", SinkConfig::Kafka(Box::new(audit))), trigger])
        .toml()
}

async fn create_secret(client: &Client, ns: &str) {
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}})).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &s).await.unwrap();
}

/// Two routes of one watch per resource, each with its own selection and shape: the audit
/// route gets every change of both resources as whole objects; the trigger route only
/// ConfigMap updates, as Knative-shaped references. Filtered events are counted per route.
#[tokio::test(flavor = "multi_thread")]
async fn each_route_ships_its_own_selection_and_shape() {
    let _serial = SERIAL.lock().await;
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-route-shapes").await;
    let cluster = support::unique("c");
    let topic_prefix = support::unique("it-shapes");
    let mut bridge = Bridge::start(&shapes_config(&cluster, &ns, &topic_prefix));
    bridge.wait_ready(Duration::from_secs(60));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"v": "0"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    for v in 1..=2 {
        cms.patch("a", &PatchParams::default(), &Patch::Merge(&json!({"data": {"v": v.to_string()}}))).await.unwrap();
    }
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    create_secret(&client, &ns).await;

    // Audit: everything, whole objects, Secrets redacted.
    let objects = |records: &[support::kafka::Record]| -> Vec<(String, Value)> {
        records
            .iter()
            .filter(|r| r.event_type().contains(".object.") && r.header("ce_name") != "kube-root-ca.crt")
            .map(|r| (r.event_type().rsplit('.').next().unwrap().to_string(), r.json()))
            .collect()
    };
    let cm_records = support::kafka::read_until(&env.kafka, &format!("{topic_prefix}.core.configmaps"), Duration::from_secs(60), |r| {
        objects(r).iter().any(|(t, _)| t == "deleted")
    });
    let cm_events = objects(&cm_records);
    let types: Vec<&str> = cm_events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["added", "updated", "updated", "deleted"]);
    assert_eq!(cm_events[2].1["data"]["v"], "2", "whole objects on the audit route");
    let secret_records = support::kafka::read_until(&env.kafka, &format!("{topic_prefix}.core.secrets"), Duration::from_secs(60), |r| !objects(r).is_empty());
    let secret = &objects(&secret_records)[0].1;
    assert!(!secret.to_string().contains("hunter2"), "Secret values are redacted: {secret}");

    // Trigger: ConfigMap updates only, Knative-shaped references.
    let js = jetstream().await;
    let prefix = format!("deltaship.{cluster}.");
    let mine = |m: &[Msg]| -> Vec<Msg> { m.iter().filter(|m| m.subject.starts_with(&prefix) && !m.subject.contains("._sync.")).cloned().collect() };
    let msgs = read_until(&js, STREAM, Duration::from_secs(60), |m| mine(m).len() >= 2).await;
    // The trigger route has passed the delete (the last change) once it counted it as
    // filtered; then what it shipped is in the stream, and anything extra with it.
    let filtered = |metrics: &str, resource: &str, ty: &str, route: &str| {
        metric(metrics, &format!("deltaship_filtered_events_total{{resource=\"{resource}\",type=\"{ty}\",route=\"{route}\"}}"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let metrics = bridge.get("/metrics").expect("/metrics answers").1;
        if filtered(&metrics, "configmaps", "deleted", "trigger") >= 1.0 {
            break metrics;
        }
        assert!(Instant::now() < deadline, "the trigger route never filtered the delete:\n{metrics}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let msgs = read_until(&js, STREAM, Duration::from_secs(10), |m| m.len() >= msgs.len()).await;
    let trigger = mine(&msgs);
    let types: Vec<&str> = trigger.iter().map(Msg::event_type).collect();
    // Knative's Reference mode: `ref` types, an ObjectReference as data.
    assert_eq!(types, ["dev.knative.apiserver.ref.update", "dev.knative.apiserver.ref.update"], "{trigger:#?}");
    for m in &trigger {
        let data = m.json();
        assert_eq!(data, serde_json::json!({"kind": "ConfigMap", "namespace": data["namespace"], "name": "a", "apiVersion": "v1"}));
        assert!(data["namespace"].is_string(), "{data}");
    }

    let filtered = |resource: &str, ty: &str, route: &str| filtered(&metrics, resource, ty, route);
    assert_eq!((filtered("configmaps", "added", "trigger"), filtered("configmaps", "deleted", "trigger")), (1.0, 1.0), "{metrics}");
    assert_eq!(filtered("configmaps", "added", "audit"), 0.0);
    assert_eq!(bridge.log_text().matches("Watch started").count(), 2, "one watch per resource, shared by the routes");
    assert!(bridge.stop(Duration::from_secs(30)).success());
    delete_namespace(&client, &ns).await;
}
