//! The Kafka sink's `tls` and `sasl` against the test broker's mutual-TLS and SASL_SSL
//! listeners (tests/env/kafka/ctl): events arrive through each mechanism and are read back
//! through the plaintext listener of the same broker; secrets stay out of logs and
//! print-config; a wrong password and a client certificate of another CA fail `check`
//! naming the cause, and `run` waits unready saying why; the documentation's examples pass `check`.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use deltaship::config::{KafkaConfig, KafkaSasl, KafkaTls, SaslMechanism, Secret};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::bridge::{Bridge, command};
use support::config::{TestConfig, kafka, partitions};
use support::kafka::{Record, read_until};
use support::kube::{client, delete_namespace, namespace};
use support::secured_kafka::{Secured, secured};

/// How long a bridge that cannot authenticate is watched staying alive and unready: longer
/// than a bridge that does connect takes to turn ready here (a few seconds).
const NOT_READY_WINDOW: Duration = Duration::from_secs(15);

impl Secured {
    /// `tls` trusting the test CA, with a client certificate from `client` (`client` or
    /// `untrusted-client`), or without one.
    fn tls(&self, client: Option<&str>) -> KafkaTls {
        let ca_file = Some(self.file("ca.pem"));
        match client {
            Some(c) => {
                KafkaTls { ca_file, cert_file: Some(self.file(&format!("{c}.pem"))), key_file: Some(self.file(&format!("{c}.key"))), ..KafkaTls::default() }
            }
            None => KafkaTls { ca_file, ..KafkaTls::default() },
        }
    }

    /// `mechanism`'s user (`sasl` without a password).
    fn user(&self, mechanism: SaslMechanism) -> KafkaSasl {
        let username = self.read(&format!("{}.user", mechanism.as_str().to_lowercase()));
        KafkaSasl { mechanism, username, password: None, password_file: None }
    }

    /// `sasl` for `mechanism`'s user with the password from its file, and the password
    /// (for scanning logs).
    fn sasl(&self, mechanism: SaslMechanism) -> (KafkaSasl, String) {
        let name = format!("{}.password", mechanism.as_str().to_lowercase());
        (KafkaSasl { password_file: Some(self.file(&name)), ..self.user(mechanism) }, self.read(&name))
    }
}

/// The Kafka sink at `brokers`, to the topic `<topic>.core.configmaps` of one partition.
fn sink(brokers: &str, topic: &str) -> KafkaConfig {
    KafkaConfig { create_topics: partitions(1), ..kafka(brokers, &format!("{topic}.{{group}}.{{plural}}")) }
}

/// ConfigMaps of `ns` to `sink`, drained for at most 5 s at shutdown.
fn config(ns: &str, sink: KafkaConfig) -> String {
    TestConfig::new().configmaps(ns).kafka(sink).with(|c| c.delivery.shutdown_timeout_secs = 5).toml()
}

/// What a shipped ConfigMap left behind.
struct Shipped {
    log: String,
    config: PathBuf,
    topic: String,
    ns: String,
}

/// Runs the bridge (created topics through the admin client, then the producer, both
/// secured by `tls` and `sasl`), creates a ConfigMap in a fresh namespace, and reads its
/// `added` event back through the plaintext listener of the same broker.
async fn ships_a_configmap(brokers: &str, tls: KafkaTls, sasl: Option<KafkaSasl>, envs: &[(&str, &str)]) -> Shipped {
    let plaintext = support::env().kafka;
    let client = client().await;
    let ns = namespace(&client, "it-kafka-sec").await;
    let prefix = support::unique("it-kafka-sec");
    let sink = KafkaConfig { tls: Some(tls), sasl, ..sink(brokers, &prefix) };
    let mut bridge = Bridge::start_with_env(&config(&ns, sink), envs);
    bridge.wait_ready(Duration::from_secs(60));
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    let topic = format!("{prefix}.core.configmaps");
    let subject = format!("{ns}/x");
    let is_ours = |r: &Record| r.headers.get("ce_subject") == Some(&subject) && r.headers.get("ce_type").is_some_and(|t| t == "dev.deltaship.object.added");
    let records = read_until(&plaintext, &topic, Duration::from_secs(30), |rs| rs.iter().any(is_ours));
    let added = records.iter().find(|r| is_ours(r)).unwrap();
    assert_eq!(added.json()["data"]["k"], "v");
    let log = bridge.log_text();
    let config = bridge.config.clone();
    assert!(bridge.stop(Duration::from_secs(30)).success(), "deltaship drains and exits 0:\n{log}");
    delete_namespace(&client, &ns).await;
    Shipped { log, config, topic, ns }
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_with_a_client_certificate_of_the_brokers_ca_ships_events() {
    let s = secured();
    ships_a_configmap(&s.mtls, s.tls(Some("client")), None, &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sasl_plain_over_tls_with_a_password_file_ships_events_and_never_logs_the_password() {
    let s = secured();
    let (sasl, password) = s.sasl(SaslMechanism::Plain);
    let shipped = ships_a_configmap(&s.sasl_ssl, s.tls(None), Some(sasl), &[]).await;
    assert!(!shipped.log.contains(&password), "the password is in the log:\n{}", shipped.log);
}

#[tokio::test(flavor = "multi_thread")]
async fn sasl_scram_sha_256_over_tls_with_a_password_file_ships_events_and_never_logs_the_password() {
    let s = secured();
    let (sasl, password) = s.sasl(SaslMechanism::ScramSha256);
    let shipped = ships_a_configmap(&s.sasl_ssl, s.tls(None), Some(sasl), &[]).await;
    assert!(!shipped.log.contains(&password), "the password is in the log:\n{}", shipped.log);
}

/// Also `rebuild --config`: the reference consumer reads the topic through the SASL_SSL
/// listener with the bridge's own config.
#[tokio::test(flavor = "multi_thread")]
async fn sasl_scram_sha_512_over_tls_ships_events_and_rebuild_reads_them_with_the_same_config() {
    let s = secured();
    let (sasl, password) = s.sasl(SaslMechanism::ScramSha512);
    let shipped = ships_a_configmap(&s.sasl_ssl, s.tls(None), Some(sasl), &[]).await;
    assert!(!shipped.log.contains(&password), "the password is in the log:\n{}", shipped.log);

    let out = Command::new(env!("CARGO_BIN_EXE_deltaship"))
        .args(["rebuild", "--kafka", &s.sasl_ssl, "--topic", &shipped.topic, "--config"])
        .arg(&shipped.config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rebuild failed: {stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("rebuild prints the state as JSON");
    let key = format!("{}/x", shipped.ns);
    assert_eq!(doc["resources"]["v1/ConfigMap"][&key]["data"]["k"], "v", "{doc:#}");
    assert!(!stderr.contains(&password), "{stderr}");

    // Without the config, the reader cannot get past SASL_SSL.
    let out = Command::new(env!("CARGO_BIN_EXE_deltaship")).args(["rebuild", "--kafka", &s.sasl_ssl, "--topic", &shipped.topic]).output().unwrap();
    assert!(!out.status.success(), "rebuild read a SASL_SSL listener without credentials");
}

/// librdkafka's `sasl.password` cannot be set from the environment (its name has a dot);
/// `sasl.password` of deltaship can.
#[tokio::test(flavor = "multi_thread")]
async fn the_sasl_password_from_the_environment_authenticates_and_is_never_logged() {
    let s = secured();
    let password = s.read("scram-sha-256.password");
    let sasl = s.user(SaslMechanism::ScramSha256);
    let shipped = ships_a_configmap(&s.sasl_ssl, s.tls(None), Some(sasl), &[("DELTASHIP_SINK__SASL__PASSWORD", &password)]).await;
    assert!(!shipped.log.contains(&password), "the password is in the log:\n{}", shipped.log);
}

/// `check` fails naming authentication without showing the password; `run` stays alive and
/// unready (the brokers may accept the user later: librdkafka keeps trying), logs the
/// cause at ERROR, and never the password.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_fails_check_naming_authentication_and_keeps_run_unready_without_showing_it() {
    let s = secured();
    const WRONG: &str = "wr0ng-kafka-pw-93";
    let sasl = KafkaSasl { password: Some(Secret::new(WRONG)), ..s.user(SaslMechanism::ScramSha512) };
    // Nothing is created in "default": no clean-up needed after a failure.
    let toml = config("default", KafkaConfig { tls: Some(s.tls(None)), sasl: Some(sasl), ..sink(&s.sasl_ssl, &support::unique("it-kafka-badpw")) });
    let (status, out, err) = command(&["check"], &toml, &[]);
    assert!(!status.success(), "check passed:\n{out}{err}");
    let fail = out.lines().find(|l| l.starts_with("[FAIL]")).unwrap_or_else(|| panic!("no [FAIL] line:\n{out}"));
    assert!(fail.contains("authentication") && fail.contains("SASL"), "{fail}");
    assert!(!out.contains(WRONG) && !err.contains(WRONG), "check shows the password:\n{out}{err}");

    let bridge = Bridge::start(&toml);
    let deadline = Instant::now() + NOT_READY_WINDOW;
    while Instant::now() < deadline {
        let readyz = bridge.get("/readyz");
        assert!(!matches!(readyz, Some((200, _))), "became ready: {readyz:?}\n{}", bridge.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(bridge.get("/healthz").map(|r| r.0), Some(200), "still alive:\n{}", bridge.log_text());
    let log = bridge.log_text();
    let cause = log.lines().find(|l| l.contains("ERROR") && l.contains("Kafka authentication failed"));
    assert!(cause.is_some_and(|l| l.contains("SASL authentication error")), "the log names the cause at ERROR:\n{log}");
    assert!(log.contains("Sink unreachable") && log.contains("authentication"), "the probe says why:\n{log}");
    assert!(!log.contains(WRONG), "the password is in the log:\n{log}");
}

#[test]
fn a_client_certificate_of_another_ca_fails_check_naming_tls() {
    let s = secured();
    let toml = config("default", KafkaConfig { tls: Some(s.tls(Some("untrusted-client"))), ..sink(&s.mtls, &support::unique("it-kafka-badcert")) });
    let (status, out, err) = command(&["check"], &toml, &[]);
    assert!(!status.success(), "check passed:\n{out}{err}");
    let fail = out.lines().find(|l| l.starts_with("[FAIL]")).unwrap_or_else(|| panic!("no [FAIL] line:\n{out}"));
    assert!(fail.contains("TLS failed") && fail.contains("SSL"), "{fail}");
}

#[test]
fn print_config_masks_the_sasl_password_inline_or_from_the_environment() {
    let s = secured();
    const PASSWORD: &str = "pr1nt-me-not";
    let user = KafkaSasl { mechanism: SaslMechanism::Plain, username: "u".into(), password: None, password_file: None };
    let inline = config("default", KafkaConfig { sasl: Some(KafkaSasl { password: Some(Secret::new(PASSWORD)), ..user.clone() }), ..sink(&s.sasl_ssl, "t") });
    let no_password = config("default", KafkaConfig { sasl: Some(user), ..sink(&s.sasl_ssl, "t") });
    for (toml, env) in [(&inline, vec![]), (&no_password, vec![("DELTASHIP_SINK__SASL__PASSWORD", PASSWORD)])] {
        let (status, out, err) = command(&["print-config"], toml, &env);
        assert!(status.success(), "print-config failed: {err}");
        assert!(!out.contains(PASSWORD) && !err.contains(PASSWORD), "print-config shows the password:\n{out}{err}");
        let shown: Value = serde_json::from_str(&out).expect("print-config prints JSON");
        assert_eq!(shown["sink"]["sasl"]["password"], "***", "{out}");
        assert_eq!(shown["sink"]["sasl"]["mechanism"], "PLAIN", "{out}");
    }
}

/// Where the documentation's examples keep their files.
const README_DIR: &str = "/etc/deltaship/kafka/";

/// The documentation's snippet `name` as it is, with its files (README_DIR + the names in
/// `files`) copied from the test set into a scratch folder, passes `check` against
/// `brokers` with the environment overrides `envs`.
fn readme_example_passes_check(name: &str, files: &[(&str, &str)], envs: &[(&str, &str)]) {
    let s = secured();
    let snippet = support::docs::block(&format!("config: {name}"), "toml");
    let dir = std::env::temp_dir().join(support::unique("readme-kafka"));
    std::fs::create_dir_all(&dir).unwrap();
    for (readme_name, test_name) in files {
        assert!(snippet.contains(&format!("{README_DIR}{readme_name}")), "config snippet {name} does not name {readme_name}:\n{snippet}");
        std::fs::copy(s.file(test_name), dir.join(readme_name)).unwrap();
    }
    // The snippet's own text, not the builder's: the documentation is tested as users copy it.
    let toml = format!("[[resources]]\nversion = \"v1\"\nkind = \"ConfigMap\"\n{}", snippet.replace(README_DIR, &format!("{}/", dir.display())));
    let (status, out, err) = command(&["check"], &toml, envs);
    assert!(status.success(), "config snippet {name} fails check:\n{out}{err}");
    assert!(out.contains("[ok]   Kafka brokers reachable"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_readme_sasl_ssl_example_passes_check_against_the_broker() {
    let s = secured();
    let user = s.read("scram-sha-512.user");
    readme_example_passes_check(
        "kafka-sasl-ssl",
        &[("ca.pem", "ca.pem"), ("password", "scram-sha-512.password")],
        &[("DELTASHIP_SINK__BROKERS", &s.sasl_ssl), ("DELTASHIP_SINK__SASL__USERNAME", &user)],
    );
}

#[test]
fn the_readme_mutual_tls_example_passes_check_against_the_broker() {
    let s = secured();
    readme_example_passes_check(
        "kafka-mtls",
        &[("ca.pem", "ca.pem"), ("client.pem", "client.pem"), ("client.key", "client.key")],
        &[("DELTASHIP_SINK__BROKERS", &s.mtls)],
    );
}
