//! The `deltaship` binary as an operator meets it before anything runs: `check` against the
//! real API server (discovery, RBAC), `print-config`, invalid configs, and `run` when the
//! broker cannot be reached.

mod support;

use std::time::{Duration, Instant};

use deltaship::config::KafkaConfig;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::bridge::{Bridge, EXIT_CONFIG, command, run_to_exit};
use support::config::{TestConfig, kafka, resource};
use support::kube::{client, delete_namespace, eventually, namespace};

/// The ConfigMaps of `ns` in cluster `it` (to stdout unless a sink is added).
fn configmaps_in(ns: &str) -> TestConfig {
    TestConfig::new().cluster("it").configmaps(ns)
}

/// `deltaship check` off the async runtime's worker (it is a blocking child process).
async fn check(config: String) -> (Option<i32>, String) {
    tokio::task::spawn_blocking(move || {
        let (status, stdout, stderr) = command(&["check"], &config, &[]);
        (status.code(), format!("{stdout}{stderr}"))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn check_reports_version_resolution_and_access_and_passes_for_a_valid_config() {
    support::env();
    let client = client().await;
    let ns = namespace(&client, "it-check").await;
    let (code, out) = check(configmaps_in(&ns).toml()).await;
    assert_eq!(code, Some(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "[ok]   API server reachable, version v1.34.4".to_string(),
        "[ok]   resources[0]: ConfigMap resolves to configmaps (namespaced)".to_string(),
        format!("[ok]   list and watch allowed on configmaps in {ns}"),
    ] {
        assert!(lines.contains(&want.as_str()), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("[FAIL]"), "{out}");
    delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn check_fails_on_a_misspelled_kind_and_suggests_the_served_one() {
    support::env();
    let config = TestConfig::new().resource(resource("apps", "Deploymnet", &[])).toml();
    let (code, out) = check(config).await;
    assert_eq!(code, Some(1), "{out}");
    let want = "[FAIL] resources[0]: kind Deploymnet in apps/v1 is not served by the API server; did you mean kind Deployment in apps/v1?";
    assert!(out.lines().any(|l| l == want), "missing {want:?} in:\n{out}");
}

/// The limited user starts with no RBAC; each grant moves the failure to the next verb,
/// until `check` passes and `run` starts. Discovery works for it (system:discovery is
/// bound to every authenticated user), so the failures are about the verbs alone.
#[tokio::test(flavor = "multi_thread")]
async fn check_and_run_name_the_missing_verb_until_list_and_watch_are_granted() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-rbac").await;
    let config = configmaps_in(&ns).with(|c| c.kubernetes.kubeconfig = Some(env.limited_kubeconfig.into())).toml();

    let (code, out) = check(config.clone()).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("[ok]   resources[0]: ConfigMap resolves to configmaps (namespaced)"), "discovery is allowed: {out}");
    let no_list = format!("[FAIL] not allowed to list configmaps in namespace {ns}");
    assert!(out.lines().any(|l| l.starts_with(&no_list)), "missing {no_list:?} in:\n{out}");

    let run_config = config.clone();
    let (status, stdout, stderr) = tokio::task::spawn_blocking(move || run_to_exit(&run_config, Duration::from_secs(60))).await.unwrap();
    assert!(!status.success(), "run must fail without RBAC: {stderr}");
    assert!(stderr.contains(&format!("not allowed to list configmaps in namespace {ns}")), "{stderr}");
    assert!(stdout.is_empty(), "nothing is watched or shipped before the failure: {stdout}");

    // Grant list only: now watch is what is missing.
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    grant(&client, &ns, &["list"]).await;
    let no_watch = format!("[FAIL] not allowed to watch configmaps in namespace {ns}");
    check_until(&config, "check to name the missing watch verb", |code, out| code == Some(1) && out.lines().any(|l| l.starts_with(&no_watch))).await;

    // Grant both: check passes and run becomes ready as the limited user.
    roles.patch("configmaps-reader", &PatchParams::default(), &Patch::Merge(&json!({"rules": configmaps_rule(&["list", "watch"])}))).await.unwrap();
    let allowed = format!("[ok]   list and watch allowed on configmaps in {ns}");
    let out = check_until(&config, "check to pass with list and watch granted", |code, _| code == Some(0)).await;
    assert!(out.lines().any(|l| l == allowed), "missing {allowed:?} in:\n{out}");
    let mut bridge = Bridge::start(&config);
    bridge.wait_ready(Duration::from_secs(60));
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// `check` again until `done(exit code, output)` holds (the API server's authorizer sees new
/// RBAC objects through an informer); its output.
async fn check_until(config: &str, what: &str, done: impl Fn(Option<i32>, &str) -> bool) -> String {
    eventually(Duration::from_secs(30), what, || {
        let check = check(config.to_string());
        let done = &done;
        async move {
            let (code, out) = check.await;
            done(code, &out).then_some(out)
        }
    })
    .await
}

/// A rule of `verbs` on ConfigMaps.
fn configmaps_rule(verbs: &[&str]) -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}])
}

/// Grants the limited user `verbs` on the ConfigMaps of `ns` (Role and RoleBinding
/// `configmaps-reader`).
async fn grant(client: &kube::Client, ns: &str, verbs: &[&str]) {
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "configmaps-reader"}, "rules": configmaps_rule(verbs)})).unwrap();
    Api::<Role>::namespaced(client.clone(), ns).create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "configmaps-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "deltaship-limited"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns).create(&PostParams::default(), &binding).await.unwrap();
}

/// With resume on and a checkpoint kept (here in `resume.directory`), `check` says which
/// `get`s a resume lacks, as warnings: without `get` on the watched objects every start is a
/// full initial sync (a checkpoint cannot be proven to belong to the API server's history);
/// without `get` on the kube-system namespace checkpoints are not checked against the
/// cluster's identity. Granted, each becomes an `[ok]` line.
#[tokio::test(flavor = "multi_thread")]
async fn check_warns_when_resume_lacks_the_gets_that_prove_a_checkpoint() {
    let env = support::env();
    let client = client().await;
    let ns = namespace(&client, "it-rbac-get").await;
    let dir = std::env::temp_dir().join(support::unique("it-resume"));
    let config = configmaps_in(&ns)
        .with(|c| {
            c.kubernetes.kubeconfig = Some(env.limited_kubeconfig.into());
            c.resume.directory = Some(dir.clone());
        })
        .toml();
    grant(&client, &ns, &["list", "watch"]).await;
    let no_get = format!("[warn] get not allowed on configmaps in {ns}: with resume on, its checkpoint cannot be proven");
    let no_identity = "[warn] get not allowed on namespace kube-system: checkpoints are not checked against the cluster's identity";
    let out = check_until(&config, "check to pass with list and watch granted", |code, _| code == Some(0)).await;
    assert!(out.lines().any(|l| l.starts_with(&no_get)), "missing {no_get:?} in:\n{out}");
    assert!(out.lines().any(|l| l.starts_with(no_identity)), "missing {no_identity:?} in:\n{out}");

    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    roles.patch("configmaps-reader", &PatchParams::default(), &Patch::Merge(&json!({"rules": configmaps_rule(&["get", "list", "watch"])}))).await.unwrap();
    let allowed = format!("[ok]   get allowed on configmaps in {ns} (a resume proves its checkpoint against the API server)");
    let out = check_until(&config, "check to find get granted", |code, out| code == Some(0) && out.lines().any(|l| l == allowed)).await;
    assert!(out.lines().any(|l| l.starts_with(no_identity)), "the limited user still cannot read kube-system:\n{out}");
    delete_namespace(&client, &ns).await;
}

#[test]
fn print_config_masks_secret_client_options_and_shows_environment_overrides() {
    let config = r#"
[[resources]]
version = "v1"
kind = "ConfigMap"
[sink]
type = "kafka"
brokers = "from-the-file:9092"
[sink.librdkafka]
"sasl.password" = "hunter2-never-printed"
"linger.ms" = "7"
"#;
    let (status, stdout, stderr) = command(&["print-config"], config, &[("DELTASHIP_SINK__BROKERS", "from-the-env:9093")]);
    assert!(status.success(), "{stderr}");
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"), "the secret leaked:\n{stdout}{stderr}");
    let shown: Value = serde_json::from_str(&stdout).expect("print-config prints JSON");
    assert_eq!(shown["sink"]["librdkafka"]["sasl.password"], "***");
    assert_eq!(shown["sink"]["librdkafka"]["linger.ms"], "7", "non-secret options are shown as they are");
    assert_eq!(shown["sink"]["brokers"], "from-the-env:9093", "the environment wins over the file");
}

/// docs/reference/configuration.md: values of the file from the environment, secrets masked, an
/// unset variable refused naming the key and the variable.
#[test]
fn the_readme_environment_example_takes_its_values_from_the_environment() {
    let config = support::docs::block("config: environment", "toml");
    let env = [("APP_NAMESPACE", "shop"), ("KAFKA_BROKERS", "k0:9092,k1:9092"), ("KAFKA_PASSWORD", "pw-from-the-env")];
    let (status, stdout, stderr) = command(&["print-config"], &config, &env);
    assert!(status.success(), "{stderr}");
    assert!(!stdout.contains("pw-from-the-env") && !stderr.contains("pw-from-the-env"), "the password is shown: {stdout}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["cluster"], "prod", "the default");
    assert_eq!(shown["resources"][0]["namespaces"], serde_json::json!(["shop"]));
    assert_eq!(shown["sink"]["brokers"], "k0:9092,k1:9092");
    assert_eq!(shown["sink"]["sasl"]["password"], "***");
    let (status, _, stderr) = command(&["print-config"], &config, &env[..2]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("`sink.sasl.password`: the environment variable KAFKA_PASSWORD is not set; fix:"), "{stderr}");
}

#[test]
fn a_zero_queue_capacity_is_refused_as_an_invalid_config_naming_the_key_and_the_fix() {
    // Invalid on purpose, so written as text (as every invalid config of this file): the
    // refusal of what a file says is the point.
    let config = "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[delivery]\nqueue_capacity = 0\n";
    let (status, _, stderr) = command(&["check"], config, &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("delivery.queue_capacity"), "{stderr}");
    assert!(stderr.contains("fix:"), "{stderr}");
    assert!(stderr.contains("config.toml"), "names the file: {stderr}");
}

#[test]
fn an_unknown_top_level_key_is_refused_as_an_invalid_config_naming_it_and_listing_the_expected_keys() {
    // Text: the builder cannot write an unknown key.
    let config = "queue_size = 5\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n";
    let (status, _, stderr) = command(&["run"], config, &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("queue_size"), "{stderr}");
    for key in ["cluster", "kubernetes", "resources", "sink", "delivery", "http", "log"] {
        assert!(stderr.contains(&format!("`{key}`")), "expected key {key} not listed: {stderr}");
    }
    assert!(stderr.contains("fix:"), "{stderr}");
}

/// docs/reference/configuration.md: "every problem at once". A typo and a bad value in one file
/// must both be reported, so the operator fixes them in one round.
#[test]
fn a_config_that_parses_lists_every_validation_problem_at_once() {
    // Parse errors (unknown keys, wrong types) stop parsing at the first one; once the
    // file parses, every validation problem is reported in one go. Invalid on purpose, so
    // written as text.
    let config = "cluster = \"Bad_Name\"\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n[delivery]\nqueue_capacity = 0\n";
    let (status, _, stderr) = command(&["check"], config, &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("`cluster`") && stderr.contains("`delivery.queue_capacity`"), "{stderr}");
    let unknown = "queue_size = 5\n[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n";
    let (status, _, stderr) = command(&["check"], unknown, &[]);
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
    assert!(stderr.contains("`queue_size`: unknown field") && !stderr.contains("default."), "{stderr}");
}

/// `run` against a closed port, with no `create_topics` (which would fail start-up). The
/// port is the discard port, below the ephemeral range: a port that `free_port` found free
/// could be taken meanwhile by another test's listener, or by the bridge's own outgoing
/// connection to it (a TCP self-connect), and then something answers.
async fn run_with_a_closed_broker(tag: &str) -> (Bridge, kube::Client, String) {
    support::env();
    let closed = "127.0.0.1:9";
    assert!(std::net::TcpStream::connect(closed).is_err(), "something listens on {closed}; these tests need it closed");
    let client = client().await;
    let ns = namespace(&client, tag).await;
    let sink = KafkaConfig { create_topics: None, ..kafka(closed, &format!("{}.{{group}}.{{plural}}", support::unique("it"))) };
    let config = configmaps_in(&ns).kafka(sink).with(|c| c.delivery.shutdown_timeout_secs = 2).toml();
    let bridge = Bridge::start(&config);
    let deadline = Instant::now() + Duration::from_secs(30);
    while bridge.get("/healthz").is_none() {
        assert!(Instant::now() < deadline, "the HTTP server never answered:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    (bridge, client, ns)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_broker_keeps_the_bridge_alive_and_unready() {
    let (mut bridge, client, ns) = run_with_a_closed_broker("it-nobroker").await;
    // Watch it for 10 s: alive every time, never ready, the reason naming the sink.
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let health = bridge.get("/healthz");
        assert_eq!(health.as_ref().map(|h| h.0), Some(200), "/healthz: {health:?}\n{}", bridge.log_text());
        let (status, body) = bridge.get("/readyz").expect("/readyz answers");
        assert_eq!(status, 503, "ready without a broker: {body}");
        assert!(body.contains("sink") && body.contains("reachable"), "the reason names the sink: {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    bridge.signal("TERM");
    let status = bridge.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM exits 0 even with undelivered events, got {status}; log tail:\n{}", tail(&bridge.log_text()));
    delete_namespace(&client, &ns).await;
}

/// docs/operations/behaviour-under-trouble.md: "`/readyz` reports the sink unreachable; the
/// state change is logged once."
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_broker_is_logged_once_not_once_per_reconnect() {
    let (bridge, client, ns) = run_with_a_closed_broker("it-nobroker-log").await;
    // Past the first sink probe and the first send timeout (10 s each).
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        assert!(bridge.get("/healthz").is_some(), "the bridge died:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = bridge.log_text();
    let said_unreachable = log.lines().filter(|l| l.contains("deltaship") && l.to_lowercase().contains("unreachable")).count();
    let loud = log.lines().filter(|l| l.contains("ERROR") || l.contains("WARN")).count();
    drop(bridge);
    delete_namespace(&client, &ns).await;
    assert_eq!(said_unreachable, 1, "deltaship logs the sink unreachable exactly once; log:\n{}", tail(&log));
    assert!(loud <= 10, "{loud} WARN/ERROR lines in 12 s for one outage; log tail:\n{}", tail(&log));
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// docs/reference/cli.md: start-up waits end on SIGTERM. An API server that accepts connections
/// and never answers holds the first start-up step until the client's timeouts; a SIGTERM
/// meanwhile ends the run at once, with 0.
#[test]
fn sigterm_ends_a_start_up_that_waits_on_an_api_server_that_does_not_answer() {
    // Connections queue in the listener's backlog and are never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = std::env::temp_dir().join(support::unique("deltaship-silent"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let server = format!("https://{}", silent.local_addr().unwrap());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\", insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let config = configmaps_in("default").with(|c| c.kubernetes.kubeconfig = Some(kubeconfig)).toml();
    let mut bridge = Bridge::start(&config);
    std::thread::sleep(Duration::from_secs(3));
    assert!(bridge.running(), "the bridge should still wait on the API server:\n{}", bridge.log_text());
    let signalled = Instant::now();
    let status = bridge.stop(Duration::from_secs(30));
    let took = signalled.elapsed();
    assert!(status.success(), "SIGTERM during start-up exits 0, got {status}");
    assert!(took < Duration::from_secs(5), "took {took:?} to stop after SIGTERM");
    drop(silent);
}

/// Credentials inside URLs: query parameters that hold secrets are masked in
/// `print-config`; credentials before the host (which neither the NATS nor the HTTP client
/// sends) are refused, the refusal showing the URL masked.
#[test]
fn print_config_masks_credentials_inside_urls_and_refuses_them_before_the_host() {
    let cm = "[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n";
    let http = format!("{cm}[sink]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/events?token=TOK-never-shown&team=shop&sig=SIG-never-shown\"\n");
    let (status, stdout, stderr) = command(&["print-config"], &http, &[]);
    assert!(status.success(), "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["sink"]["url"], "http://127.0.0.1:9/events?token=***&team=shop&sig=***");
    let urls = [
        ("nats", "nats://deltaship:PW-never-shown@127.0.0.1:1,nats://TOK-never-shown@127.0.0.1:2", "nats://deltaship:***@127.0.0.1:1,nats://***@127.0.0.1:2"),
        ("http", "http://deltaship:PW-never-shown@127.0.0.1:9/events?access_token=TOK-never-shown", "http://deltaship:***@127.0.0.1:9/events?access_token=***"),
    ];
    for (kind, url, masked) in urls {
        let config = format!("{cm}[sink]\ntype = \"{kind}\"\nurl = \"{url}\"\n");
        for args in [&["print-config"][..], &["check"], &["run"]] {
            let (status, stdout, stderr) = command(args, &config, &[]);
            assert_eq!(status.code(), Some(EXIT_CONFIG), "{args:?} {stdout}{stderr}");
            assert!(!format!("{stdout}{stderr}").contains("never-shown"), "{args:?}: a credential is shown:\n{stdout}{stderr}");
            assert!(stderr.contains(&format!("`sink.url`: `{masked}` holds credentials before")) && stderr.contains("set `auth`"), "{args:?}: {stderr}");
        }
    }
}

/// `check`'s lines and the bridge's log at trace level show the sink's URL with its token
/// masked, though the token is sent (the server sees the whole URL).
#[tokio::test(flavor = "multi_thread")]
async fn check_and_trace_logs_never_show_a_token_inside_the_sink_url() {
    support::env();
    let client = client().await;
    let ns = namespace(&client, "it-url-token").await;
    let receiver = support::receiver::Receiver::start(&[]);
    let url = format!("{}?access_token=TOK-never-shown&team=shop", receiver.url("http"));
    let config = configmaps_in(&ns).http(support::config::http(&url)).toml();
    let (code, out) = check(config.clone()).await;
    assert_eq!(code, Some(0), "{out}");
    let want = format!("[ok]   HTTP server reachable at {} (events go to {}?access_token=***&team=shop)", receiver.addr, receiver.url("http"));
    assert!(out.lines().any(|l| l == want), "missing {want:?} in:\n{out}");
    assert!(!out.contains("never-shown"), "{out}");

    let mut bridge = Bridge::start_with_env(&config, &[("RUST_LOG", "trace")]);
    bridge.wait_ready(Duration::from_secs(60));
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = serde_json::from_value(json!({"metadata": {"name": "web"}, "data": {"k": "v"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    eventually(Duration::from_secs(30), "the ConfigMap's event at the receiver", || {
        let got = receiver.events().iter().any(|e| e["event"]["subject"] == format!("{ns}/web").as_str());
        async move { got.then_some(()) }
    })
    .await;
    let log = bridge.log_text();
    drop(bridge);
    assert!(log.len() > 10_000 && log.contains("TRACE"), "a trace log: {}", log.len());
    assert!(!log.contains("never-shown"), "the token is in the log");
    delete_namespace(&client, &ns).await;
}
