//! The NATS sink's [sink.auth] and [sink.tls] against real nats-servers of the tests' own
//! (support::nats_server), each configured for one method: events arrive through each,
//! secrets stay out of logs and print-config, and wrong or missing credentials, an
//! untrusted certificate and a missing stream fail the way the documentation promises.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use async_nats::{ConnectOptions, jetstream};
use deltaship::config::{NatsAuth, NatsConfig, NatsTls, Secret};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::bridge::{Bridge, command, run_to_exit};
use support::config::{TestConfig, nats};
use support::kube::{client, delete_namespace, namespace};
use support::nats::{Msg, STREAM, read_until};
use support::nats_server::NatsServer;

/// Each server is fresh, so the default stream holds only the test's own events.
/// How long a bridge that cannot reach its server is watched staying alive and unready:
/// longer than the 10 s between sink probes (src/pipeline/mod.rs, PROBE_INTERVAL), the
/// time a bridge that does connect can take to turn ready.
const NOT_READY_WINDOW: Duration = Duration::from_secs(15);

/// ConfigMaps of `ns` to `sink`.
fn config(ns: &str, sink: NatsConfig) -> String {
    TestConfig::new().configmaps(ns).nats(sink).toml()
}

/// The NATS sink at `url` with `auth`.
fn with_auth(url: &str, auth: NatsAuth) -> NatsConfig {
    NatsConfig { auth, ..nats(url) }
}

/// The user `deltaship` with `password` inline.
fn user_and_password(password: &str) -> NatsAuth {
    NatsAuth { user: Some("deltaship".into()), password: Some(Secret::new(password)), ..NatsAuth::default() }
}

/// The test's own reader of the server's stream, with the bridge's credentials.
async fn reader(opts: ConnectOptions, url: &str) -> jetstream::Context {
    jetstream::new(opts.connect(url).await.expect("the test connects with the same credentials"))
}

/// Runs the bridge, creates a ConfigMap, and reads its `added` event back from the stream
/// through `js`; returns the bridge's log.
async fn ships_a_configmap(sink: NatsConfig, js: &jetstream::Context) -> String {
    let client = client().await;
    let ns = namespace(&client, "it-nats-auth").await;
    let mut bridge = Bridge::start(&config(&ns, sink));
    bridge.wait_ready(Duration::from_secs(60));
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    let key = format!("{ns}/x");
    let is_ours = |m: &Msg| m.headers.get("ce-subject") == Some(&key);
    let msgs = read_until(js, STREAM, Duration::from_secs(30), |m| m.iter().any(is_ours)).await;
    let event = msgs.iter().find(|m| is_ours(m)).unwrap();
    assert_eq!(event.event_type(), "dev.deltaship.object.added");
    assert_eq!(event.json()["data"]["k"], "v");
    let log = bridge.log_text();
    assert!(bridge.stop(Duration::from_secs(30)).success(), "deltaship drains and exits 0");
    delete_namespace(&client, &ns).await;
    log
}

/// Watches `bridge` for NOT_READY_WINDOW: /readyz never 200, and at the end the process
/// still answers /healthz (alive) and /readyz says 503. Returns the /readyz body.
fn assert_alive_but_never_ready(bridge: &Bridge) -> String {
    let deadline = Instant::now() + NOT_READY_WINDOW;
    while Instant::now() < deadline {
        let readyz = bridge.get("/readyz");
        assert!(!matches!(readyz, Some((200, _))), "became ready: {readyz:?}\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(bridge.get("/healthz").map(|r| r.0), Some(200), "still alive:\n{}", bridge.log_text());
    match bridge.get("/readyz") {
        Some((503, body)) => body,
        other => panic!("/readyz should be 503, got {other:?}:\n{}", bridge.log_text()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn user_and_password_from_a_file_authenticate_and_the_password_is_never_shown() {
    const PASSWORD: &str = "s3cret-pw";
    let server = NatsServer::start(&format!("authorization {{ user: deltaship, password: \"{PASSWORD}\" }}"));
    let url = format!("nats://{}", server.addr());
    let file = server.file("password", &format!("{PASSWORD}\n"));
    let js = reader(ConnectOptions::with_user_and_password("deltaship".into(), PASSWORD.into()), &url).await;
    let auth = NatsAuth { user: Some("deltaship".into()), password_file: Some(file), ..NatsAuth::default() };
    let log = ships_a_configmap(with_auth(&url, auth), &js).await;
    assert!(!log.contains(PASSWORD), "the password is in the log:\n{log}");

    // Given inline, in the file or from the environment, print-config masks it.
    let inline = config("default", with_auth(&url, user_and_password(PASSWORD)));
    let user_only = config("default", with_auth(&url, NatsAuth { user: Some("deltaship".into()), ..NatsAuth::default() }));
    for (toml, env) in [(&inline, vec![]), (&user_only, vec![("DELTASHIP_SINK__AUTH__PASSWORD", PASSWORD)])] {
        let (status, out, err) = command(&["print-config"], toml, &env);
        assert!(status.success(), "print-config failed: {err}");
        assert!(!out.contains(PASSWORD) && !err.contains(PASSWORD), "print-config shows the password:\n{out}{err}");
        let shown: serde_json::Value = serde_json::from_str(&out).expect("print-config prints JSON");
        assert_eq!(shown["sink"]["auth"]["password"], "***", "{out}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_from_a_file_authenticates_the_bridge_and_rebuild() {
    let server = NatsServer::start("authorization { token: \"tok-123\" }");
    let url = format!("nats://{}", server.addr());
    let file = server.file("token", "tok-123\n");
    let js = reader(ConnectOptions::with_token("tok-123".into()), &url).await;
    let sink = with_auth(&url, NatsAuth { token_file: Some(file), ..NatsAuth::default() });
    let log = ships_a_configmap(sink.clone(), &js).await;
    assert!(!log.contains("tok-123"), "the token is in the log:\n{log}");

    // `rebuild --config` reads the stream with the sink's credentials (`command` appends
    // `--config <file>`); without them the server refuses the reader.
    let rebuild = ["rebuild", "--nats", url.as_str(), "--stream", STREAM];
    let (status, stdout, stderr) = command(&rebuild, &config("default", sink), &[]);
    assert!(status.success(), "{stderr}");
    let state: serde_json::Value = serde_json::from_str(&stdout).expect("rebuild prints the state");
    let configmaps = state["resources"]["v1/ConfigMap"].as_object().expect("the ConfigMap shipped");
    assert!(configmaps.values().any(|cm| cm["data"]["k"] == "v"), "{stdout}");
    assert!(!stderr.contains("tok-123") && !stdout.contains("tok-123"), "the token is shown");
    let anonymous = std::process::Command::new(env!("CARGO_BIN_EXE_deltaship")).args(rebuild).output().unwrap();
    assert_eq!(anonymous.status.code(), Some(1), "{}", String::from_utf8_lossy(&anonymous.stderr));
}

/// The config builder writes an inline secret as it is (only print-config masks it): the
/// token reaches the server, and never the log.
#[tokio::test(flavor = "multi_thread")]
async fn an_inline_token_authenticates_and_is_never_logged() {
    const TOKEN: &str = "tok-inline-456";
    let server = NatsServer::start(&format!("authorization {{ token: \"{TOKEN}\" }}"));
    let url = format!("nats://{}", server.addr());
    let js = reader(ConnectOptions::with_token(TOKEN.into()), &url).await;
    let log = ships_a_configmap(with_auth(&url, NatsAuth { token: Some(Secret::new(TOKEN)), ..NatsAuth::default() }), &js).await;
    assert!(!log.contains(TOKEN), "the token is in the log:\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_nkey_seed_file_authenticates() {
    let key = nkeys::KeyPair::new_user();
    let seed = key.seed().unwrap();
    let server = NatsServer::start(&format!("authorization {{ users: [ {{ nkey: {} }} ] }}", key.public_key()));
    let url = format!("nats://{}", server.addr());
    let file = server.file("user.nk", &format!("{seed}\n"));
    let js = reader(ConnectOptions::with_nkey(seed.clone()), &url).await;
    let log = ships_a_configmap(with_auth(&url, NatsAuth { nkey_seed_file: Some(file), ..NatsAuth::default() }), &js).await;
    assert!(!log.contains(&seed), "the seed is in the log:\n{log}");
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
    assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a server certificate it signed for IP 127.0.0.1 (P-256 keys: quick to make),
/// in `dir`: (CA certificate, server certificate, server key).
fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let ca = ["-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", "/CN=deltaship test CA"];
    let ca_ext = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"];
    openssl(dir, &[&["req", "-x509"][..], &new_key, &ca, &ca_ext].concat());
    let csr = ["-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1"];
    openssl(dir, &[&["req"][..], &new_key, &csr].concat());
    std::fs::write(dir.join("server.ext"), "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n").unwrap();
    let sign = ["-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-days", "2", "-extfile", "server.ext"];
    openssl(dir, &[&["x509", "-req", "-in", "server.csr", "-out", "server.pem"][..], &sign].concat());
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server-key.pem"))
}

/// TLS with a CA of the test's own: trusted through ca_file, events arrive; without it the
/// server's certificate is refused, and the bridge waits unready instead of crashing.
#[tokio::test(flavor = "multi_thread")]
async fn tls_with_a_custom_ca_file_connects_and_without_it_the_bridge_stays_unready() {
    let certs = std::env::temp_dir().join(support::unique("nats-certs"));
    std::fs::create_dir_all(&certs).unwrap();
    let (ca, cert, key) = make_certs(&certs);
    let server = NatsServer::start(&format!("tls {{ cert_file: {cert:?}, key_file: {key:?} }}"));
    let url = format!("tls://{}", server.addr());

    let js = reader(ConnectOptions::new().add_root_certificates(ca.clone()).require_tls(true), &url).await;
    let tls = NatsTls { ca_file: Some(ca.clone()), required: true, ..NatsTls::default() };
    ships_a_configmap(NatsConfig { tls, ..nats(&url) }, &js).await;

    // The system roots do not know the test CA.
    let client = client().await;
    let ns = namespace(&client, "it-nats-tls").await;
    let bridge = Bridge::start(&config(&ns, NatsConfig { tls: NatsTls { required: true, ..NatsTls::default() }, ..nats(&url) }));
    assert_alive_but_never_ready(&bridge);
    drop(bridge);
    delete_namespace(&client, &ns).await;
    std::fs::remove_dir_all(&certs).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_keeps_the_bridge_alive_and_unready_and_the_log_says_why() {
    let server = NatsServer::start("authorization { user: deltaship, password: \"s3cret-pw\" }");
    let client = client().await;
    let ns = namespace(&client, "it-nats-badpw").await;
    let wrong = "wr0ng-pw-71";
    let bridge = Bridge::start(&config(&ns, with_auth(&format!("nats://{}", server.addr()), user_and_password(wrong))));
    assert_alive_but_never_ready(&bridge);
    let log = bridge.log_text();
    assert!(log.to_lowercase().contains("authorization violation"), "the log names the cause:\n{log}");
    assert!(!log.contains(wrong), "the password is in the log:\n{log}");
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// docs/reference/cli.md: `run` "runs until SIGTERM or SIGINT, then drains (exit 0)", and start-up waits
/// end on SIGTERM too; a bridge that never got through to its server is no exception.
#[test]
fn sigterm_ends_a_bridge_that_cannot_authenticate() {
    let server = NatsServer::start("authorization { user: deltaship, password: \"s3cret-pw\" }");
    let sink = with_auth(&format!("nats://{}", server.addr()), user_and_password("wr0ng"));
    // Nothing is created in the namespace: "default" needs no clean-up after a failure.
    let config = TestConfig::new().configmaps("default").nats(sink).with(|c| c.delivery.shutdown_timeout_secs = 2).toml();
    let bridge = Bridge::start(&config);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !bridge.log_text().contains("authorization violation") {
        assert!(Instant::now() < deadline, "no authorization violation logged:\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Shutdown timeout 2 s, plus the final flush's 5 s, plus slack.
    let status = bridge.stop(Duration::from_secs(20));
    assert!(status.success(), "exit {status}");
}

#[test]
fn a_missing_password_file_stops_start_up_naming_the_key_and_the_path() {
    let auth = NatsAuth { user: Some("deltaship".into()), password_file: Some("/nonexistent".into()), ..NatsAuth::default() };
    // The file is read before the first connection attempt: any URL will do.
    let started = Instant::now();
    let (status, _, stderr) = run_to_exit(&config("default", with_auth(&support::env().nats, auth)), Duration::from_secs(30));
    let took = started.elapsed();
    assert!(!status.success(), "exit {status}:\n{stderr}");
    assert!(took < Duration::from_secs(15), "took {took:?} to fail");
    assert!(stderr.contains("sink.auth.password_file") && stderr.contains("/nonexistent"), "{stderr}");
}

/// With creation off, a missing stream is a start-up error with its fix, in `run` and in
/// `check`, and nothing creates the stream behind the operator's back.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_stream_with_creation_off_stops_start_up_and_fails_check() {
    let server = NatsServer::start("");
    let url = format!("nats://{}", server.addr());
    let mut sink = nats(&url);
    sink.jetstream.create = false;
    let toml = config("default", sink);
    let (status, _, stderr) = run_to_exit(&toml, Duration::from_secs(60));
    assert!(!status.success(), "exit {status}:\n{stderr}");
    assert!(stderr.contains("does not exist") && stderr.contains("sink.jetstream.create"), "{stderr}");

    let (status, out, err) = command(&["check"], &toml, &[]);
    assert!(!status.success(), "check passed:\n{out}{err}");
    let fail = out.lines().find(|l| l.starts_with("[FAIL]") && l.contains(STREAM));
    assert!(fail.is_some_and(|l| l.contains("does not exist") && l.contains("sink.jetstream.create")), "{out}");

    let js = reader(ConnectOptions::new(), &url).await;
    assert!(js.get_stream(STREAM).await.is_err(), "the stream was created");
}
