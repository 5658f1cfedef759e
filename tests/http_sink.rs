//! The HTTP sink against ce-receiver, a receiver built on the official CloudEvents Go SDK
//! (tests/env/cloudevents/receiver): every event decoded by the SDK in binary and structured
//! mode; through 500s, 429 with Retry-After, resets mid-request, answers slower than the
//! timeout and a receiver outage, nothing lost or reordered and every retry with the same
//! id; 413 and other 4xx by their policies; Knative's K_SINK, K_CE_OVERRIDES and Reference
//! mode; a bearer token over TLS with a custom CA and a client certificate; a server
//! certificate that cannot be verified fails `check` and stops the run.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use support::bridge::Bridge;
use support::churn::{Arrivals, Churn, Item, audit, metric};
use support::config::{TestConfig, http};
use support::kube::{client, delete_namespace, namespace};
use support::receiver::Receiver;

/// An accepted event as the churn audit reads it.
fn item(received: &Value) -> Item {
    let e = &received["event"];
    let s = |name: &str| e[name].as_str();
    Item::decode(s("type").unwrap(), s("subject"), s("id").unwrap(), s("syncid"), &serde_json::to_vec(&e["data"]).unwrap())
}

/// Waits until every written seq arrived at `receiver`; its items.
fn wait_arrivals(receiver: &Receiver, written: &BTreeMap<String, u64>, timeout: Duration) -> Vec<Item> {
    let deadline = Instant::now() + timeout;
    loop {
        let items: Vec<Item> = receiver.events().iter().map(item).collect();
        let mut arrivals = Arrivals::new(written);
        items.iter().for_each(|i| arrivals.see(i));
        if arrivals.complete() {
            return items;
        }
        assert!(Instant::now() < deadline, "not every write reached the receiver within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn receiver_failures_and_an_outage_lose_and_reorder_nothing() {
    let client = client().await;
    let ns = namespace(&client, "it-http-faults").await;
    let mut receiver = Receiver::start(&[]);
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(http(&receiver.url("http"))).with(|c| {
        c.delivery.retry_initial_ms = 50;
        c.delivery.retry_max_ms = 5_000;
    });
    let mut bridge = Bridge::start(&config.toml());
    bridge.wait_ready(Duration::from_secs(60));

    let mut churn = Churn::create(&client, &ns, 12, 200).await;
    churn.start(3, Duration::from_millis(50), None);
    // Each fault, then until the receiver gave it as many times as asked.
    let faults: [(Value, &str, usize); 5] = [
        (json!({"mode": "status", "status": 500, "count": 20}), "500", 20),
        (json!({"mode": "status", "status": 429, "count": 3, "retry_after": "2"}), "429", 3),
        (json!({"mode": "reset", "count": 10}), "reset", 10),
        // Slower than the sink's 1 s timeout: retried while the receiver still takes it.
        (json!({"mode": "slow", "delay_ms": 2500, "count": 3}), "slow", 3),
        // Until told otherwise: for 2 s after the first.
        (json!({"mode": "status", "status": 503, "count": -1}), "503", 1),
    ];
    for (fault, answer, count) in faults {
        churn.wait_writes(churn.writes() + 30).await;
        receiver.control(fault);
        let deadline = Instant::now() + Duration::from_secs(60);
        while receiver.attempts().iter().filter(|a| a["answer"] == answer).count() < count {
            assert!(Instant::now() < deadline, "the receiver did not answer {answer} {count} times within 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    receiver.control(json!({"mode": "ok"}));
    churn.wait_writes(churn.writes() + 30).await;
    // An outage: nothing listens for 3 s.
    receiver.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    receiver.restart();
    churn.wait_writes(churn.writes() + 30).await;
    let written = churn.finish().await;

    let items = wait_arrivals(&receiver, &written, Duration::from_secs(120));
    let report = audit(&[items], &written);
    report.print(
        "http_receiver_faults",
        written.values().map(|s| *s as usize).sum(),
        "500x20,429x3(Retry-After 2),reset x10,slow x3,503 2s,outage 3s",
        0.0,
        "",
    );
    report.assert_clean();

    // The state rebuilt from what the receiver accepted is the API server's.
    let mut rebuilt: BTreeMap<String, String> = BTreeMap::new();
    for e in receiver.events().iter().map(|e| &e["event"]) {
        let (Some(ty), Some(key)) = (e["type"].as_str(), e["subject"].as_str()) else { continue };
        match ty {
            "dev.deltaship.object.deleted" => rebuilt.remove(key),
            t if t.starts_with("dev.deltaship.object.") => rebuilt.insert(key.to_string(), e["data"]["data"]["seq"].as_str().unwrap_or("").to_string()),
            _ => None,
        };
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let listed: BTreeMap<String, String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|cm| (format!("{ns}/{}", cm.metadata.name.unwrap()), cm.data.unwrap_or_default().get("seq").cloned().unwrap_or_default()))
        .collect();
    assert_eq!(rebuilt, listed, "rebuilt from the receiver vs the API server");

    let attempts = receiver.attempts();
    let answers: HashMap<&str, usize> = attempts.iter().fold(HashMap::new(), |mut m, a| {
        *m.entry(a["answer"].as_str().unwrap()).or_default() += 1;
        m
    });
    for answer in ["500", "429", "reset", "slow", "503", "200"] {
        assert!(answers.get(answer).is_some_and(|n| *n > 0), "no {answer} answered: {answers:?}");
    }
    // Every event that failed was sent again with the same id and accepted.
    let accepted: HashSet<&str> = attempts.iter().filter(|a| a["answer"] == "200").map(|a| a["id"].as_str().unwrap()).collect();
    for a in attempts.iter().filter(|a| !matches!(a["answer"].as_str(), Some("200" | "slow")) && a["id"] != "") {
        assert!(accepted.contains(a["id"].as_str().unwrap()), "{a} was never accepted later");
    }
    // A 429 with Retry-After: 2 is not tried again before 2 s.
    for (i, a) in attempts.iter().enumerate().filter(|(_, a)| a["answer"] == "429") {
        let next = attempts[i + 1..].iter().find(|b| b["id"] == a["id"]).expect("the event was retried");
        let waited = Duration::from_nanos(next["at"].as_u64().unwrap() - a["at"].as_u64().unwrap());
        assert!(waited >= Duration::from_millis(1_950), "retried {waited:?} after a 429 asking for 2 s: {a} then {next}");
    }
    let metrics = bridge.get("/metrics").unwrap().1;
    assert!(metric(&metrics, "deltaship_sink_errors_total{sink=\"http\",route=\"default\",error_kind=\"unavailable\"}") >= 1.0, "{metrics}");
    assert!(bridge.ready(), "/readyz after the receiver came back");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// Knative's conventions: the URL from K_SINK, the extensions of K_CE_OVERRIDES on every
/// event, and Reference mode's types and data; in structured mode, decoded by the SDK.
#[tokio::test(flavor = "multi_thread")]
async fn structured_knative_references_go_to_k_sink_with_the_overrides() {
    let client = client().await;
    let ns = namespace(&client, "it-http-knative").await;
    let receiver = Receiver::start(&[]);
    let mut sink = http("http://unused.invalid/");
    sink.url = None;
    sink.content_mode = deltaship::config::ContentMode::Structured;
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(sink).with(|c| {
        c.resources[0].format = deltaship::config::EventFormat::Knative;
        c.resources[0].payload = deltaship::config::PayloadMode::Reference;
    });
    let url = receiver.url("http");
    let mut bridge = Bridge::start_with_env(&config.toml(), &[("K_SINK", &url), ("K_CE_OVERRIDES", r#"{"extensions": {"team": "shop"}}"#)]);
    bridge.wait_ready(Duration::from_secs(60));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "web"}, "data": {"k": "v"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("web", &DeleteParams::default()).await.unwrap();

    let mine = wait_events(&receiver, "the delete", |events| {
        let mine: Vec<Value> = events.into_iter().filter(|e| e["event"]["namespace"] == ns.as_str() && e["event"]["name"] == "web").collect();
        mine.iter().any(|e| e["event"]["type"] == "dev.knative.apiserver.ref.delete").then_some(mine)
    });
    let types: Vec<&str> = mine.iter().map(|e| e["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["dev.knative.apiserver.ref.add", "dev.knative.apiserver.ref.delete"]);
    for e in &mine {
        assert_eq!(e["mode"], "structured");
        assert_eq!(e["event"]["data"], json!({"kind": "ConfigMap", "namespace": ns, "name": "web", "apiVersion": "v1"}));
        assert_eq!(e["event"]["subject"], format!("/apis/v1/namespaces/{ns}/configmaps/web"));
    }
    // Every event, markers too, carries the override.
    let all = receiver.events();
    assert!(!all.is_empty() && all.iter().all(|e| e["event"]["team"] == "shop"), "{all:#?}");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// 413 ships the object as a truncated reference (the oversize policy); another 4xx is
/// skipped and counted with `on_client_error = "skip"`, and stops the bridge by default.
#[tokio::test(flavor = "multi_thread")]
async fn too_large_and_client_errors_follow_their_policies() {
    let client = client().await;
    let ns = namespace(&client, "it-http-4xx").await;
    let receiver = Receiver::start(&[]);
    let mut sink = http(&receiver.url("http"));
    sink.on_client_error = deltaship::config::ClientErrorPolicy::Skip;
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(sink);
    let mut bridge = Bridge::start(&config.toml());
    bridge.wait_ready(Duration::from_secs(60));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let create = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();

    receiver.control(json!({"mode": "status", "status": 413, "count": 1}));
    api.create(&PostParams::default(), &create("big")).await.unwrap();
    let truncated = wait_for(&receiver, &ns, "big");
    // Binary mode carries extensions as header strings.
    assert_eq!(truncated["event"]["truncated"], "true", "{truncated}");
    assert_eq!(truncated["event"]["data"]["name"], "big");

    // Sends of different objects may overlap: "after" is written once the 400 has gone to "refused".
    receiver.control(json!({"mode": "status", "status": 400, "count": 1}));
    api.create(&PostParams::default(), &create("refused")).await.unwrap();
    wait_events(&receiver, "400 answer", |_| receiver.attempts().iter().any(|a| a["answer"] == "400").then_some(()));
    api.create(&PostParams::default(), &create("after")).await.unwrap();
    wait_for(&receiver, &ns, "after");
    assert!(!receiver.events().iter().any(|e| e["event"]["name"] == "refused"), "the refused event was not dropped");
    let metrics = bridge.get("/metrics").unwrap().1;
    assert_eq!(metric(&metrics, "deltaship_events_dropped_total{resource=\"configmaps\",reason=\"rejected\",route=\"default\"}"), 1.0, "{metrics}");
    drop(bridge);

    // The default policy: the bridge stops, naming the status.
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(http(&receiver.url("http")));
    receiver.control(json!({"mode": "status", "status": 400, "count": -1}));
    let (status, _, stderr) = support::bridge::run_to_exit(&config.toml(), Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(rejected): the server answered 400: told to fail"), "{stderr}");
    delete_namespace(&client, &ns).await;
}

/// What `found` finds in the events the receiver accepted, within 60 s.
fn wait_events<T>(receiver: &Receiver, what: &str, found: impl Fn(Vec<Value>) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = found(receiver.events()) {
            return t;
        }
        assert!(Instant::now() < deadline, "no {what} within 60 s: {:#?}\nanswers: {:?}", receiver.events(), receiver.attempts());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The first accepted event of `ns/name`.
fn wait_for(receiver: &Receiver, ns: &str, name: &str) -> Value {
    wait_events(receiver, &format!("event of {ns}/{name}"), |events| events.into_iter().find(|e| e["event"]["namespace"] == ns && e["event"]["name"] == name))
}

/// TLS with the test CA and a client certificate of it, and a bearer token from a file;
/// a wrong token stops the bridge naming the refusal.
#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_over_mutual_tls_with_a_custom_ca() {
    let tls = std::path::PathBuf::from(support::var("DELTASHIP_TEST_KAFKA_TLS_DIR"));
    let p = |f: &str| tls.join(f).to_str().unwrap().to_string();
    let receiver = Receiver::start(&["-token", "s3cret", "-tls-cert", &p("server.pem"), "-tls-key", &p("server.key"), "-client-ca", &p("ca.pem")]);
    let client = client().await;
    let ns = namespace(&client, "it-http-tls").await;
    let dir = std::env::temp_dir().join(support::unique("http-auth"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "s3cret\n").unwrap();
    std::fs::write(dir.join("wrong"), "guess\n").unwrap();
    let sink = |token: &str| {
        let mut s = http(&receiver.url("https"));
        s.tls.ca_file = Some(p("ca.pem").into());
        s.tls.cert_file = Some(p("client.pem").into());
        s.tls.key_file = Some(p("client.key").into());
        s.auth.token_file = Some(dir.join(token));
        s
    };
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(sink("token"));
    let (ok, out, err) = support::bridge::command(&["check"], &config.toml(), &[]);
    assert!(ok.success() && out.contains("HTTP server reachable at"), "{out}{err}");
    let mut bridge = Bridge::start(&config.toml());
    bridge.wait_ready(Duration::from_secs(60));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "tls"}})).unwrap()).await.unwrap();
    let e = wait_for(&receiver, &ns, "tls");
    assert_eq!(e["mode"], "binary");
    assert!(!bridge.log_text().contains("s3cret"), "the token is in the log");
    drop(bridge);

    let wrong = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(sink("wrong"));
    let (status, _, stderr) = support::bridge::run_to_exit(&wrong.toml(), Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(authentication): the server answered 401") && !stderr.contains("guess"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
    delete_namespace(&client, &ns).await;
}

/// A server certificate that cannot be verified (issued by a CA the bridge does not trust):
/// `check` fails naming the problem and the setting that fixes it, and `run` stops within
/// seconds with an ERROR naming the URL (its secret masked), never ready and never
/// retrying; with the CA that issued it, both pass.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_certificate_that_cannot_be_verified_fails_check_and_stops_the_run() {
    let tls = std::path::PathBuf::from(support::var("DELTASHIP_TEST_KAFKA_TLS_DIR"));
    let p = |f: &str| tls.join(f).to_str().unwrap().to_string();
    let receiver = Receiver::start(&["-tls-cert", &p("server.pem"), "-tls-key", &p("server.key")]);
    let client = client().await;
    let ns = namespace(&client, "it-http-untrusted").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "cert"}})).unwrap()).await.unwrap();
    let url = format!("{}?access_token=s3cret", receiver.url("https"));
    let shown = format!("{}?access_token=***", receiver.url("https"));
    let config = |ca_file: Option<&str>| {
        let mut sink = http(&url);
        sink.tls.ca_file = ca_file.map(|f| p(f).into());
        TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(sink).toml()
    };
    let problem = format!("[FAIL] tls: the certificate of the HTTPS server at {shown} cannot be verified: unknown issuer");
    // The system's CA store, then a CA file that does not hold the issuer.
    for (ca_file, fix) in [
        (None, "; fix: set sink.tls.ca_file to the PEM file of the CA that issued it"),
        (Some("untrusted-ca.pem"), &format!("; fix: sink.tls.ca_file ({}) does not hold the CA that issued it", p("untrusted-ca.pem"))),
    ] {
        let (status, out, err) = support::bridge::command(&["check"], &config(ca_file), &[]);
        assert_eq!(status.code(), Some(1), "{out}{err}");
        let failed: Vec<&str> = out.lines().filter(|l| l.starts_with("[FAIL]")).collect();
        assert!(failed.len() == 1 && failed[0].starts_with(&problem) && failed[0].contains(fix), "{ca_file:?}:\n{out}{err}");
        assert!(!out.contains("s3cret") && !err.contains("s3cret"), "{out}{err}");
    }

    let started = Instant::now();
    let mut bridge = Bridge::start(&config(None));
    while bridge.running() {
        assert!(!bridge.ready(), "ready although the certificate cannot be verified:\n{}", bridge.log_text());
        assert!(started.elapsed() < Duration::from_secs(60), "still running after 60 s:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = bridge.wait_exit(Duration::from_secs(1));
    let log = bridge.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    let refused = format!("the certificate of the HTTPS server at {shown} cannot be verified: unknown issuer");
    assert!(log.lines().any(|l| l.contains("ERROR") && l.contains(&refused)), "no ERROR naming the certificate:\n{log}");
    assert!(log.contains(&format!("error: the sink refused an event of configmaps for good (tls): {refused}")), "{log}");
    assert!(!log.contains("Send failed; retrying") && !log.contains("s3cret"), "{log}");
    assert!(receiver.attempts().is_empty(), "a request went through: {:?}", receiver.attempts());

    // With the CA that issued it: `check` passes and events arrive.
    let (status, out, err) = support::bridge::command(&["check"], &config(Some("ca.pem")), &[]);
    assert!(
        status.success() && out.contains(&format!("[ok]   HTTP server reachable at {}, its certificate verified (events go to {shown})", receiver.addr)),
        "{out}{err}"
    );
    let mut bridge = Bridge::start(&config(Some("ca.pem")));
    bridge.wait_ready(Duration::from_secs(60));
    wait_for(&receiver, &ns, "cert");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// Basic credentials, the password from a file.
#[tokio::test(flavor = "multi_thread")]
async fn basic_credentials_from_a_file() {
    let receiver = Receiver::start(&["-basic", "deltaship:pa ss:word"]);
    let client = client().await;
    let ns = namespace(&client, "it-http-basic").await;
    let dir = std::env::temp_dir().join(support::unique("http-basic"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("password"), "pa ss:word\n").unwrap();
    let mut sink = http(&receiver.url("http"));
    sink.auth.user = Some("deltaship".into());
    sink.auth.password_file = Some(dir.join("password"));
    let mut bridge = Bridge::start(&TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).http(sink).toml());
    bridge.wait_ready(Duration::from_secs(60));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "basic"}})).unwrap()).await.unwrap();
    wait_for(&receiver, &ns, "basic");
    assert!(receiver.attempts().iter().all(|a| a["answer"] == "200"), "{:?}", receiver.attempts());
    drop(bridge);
    std::fs::remove_dir_all(&dir).unwrap();
    delete_namespace(&client, &ns).await;
}
