//! The consumer libraries of consumers/ (vectors/README.md: the protocol they share): each
//! passes the shared test vectors in its own test runner, and rebuilds the API server's
//! state from the real Kafka broker and NATS server after a bridge shipped live changes,
//! and from committed Kafka transactions only; and `deltaship rebuild --follow` keeps a
//! state file current as more changes come; each library resumes from its snapshot after a
//! kill (`tests/consumers/resume.rs`).

#[path = "consumers/resume.rs"]
mod resume;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use deltaship::config::{FilterConfig, RouteConfig, SinkConfig, Template};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use serde_json::{Value, json};

use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats, partitions};
use support::consumers::{dir as consumers, python, python_rebuild, run};
use support::kafka::write_recorded;
use support::kube::{client, delete_namespace, namespace};
use support::secured_kafka::secured;
use support::state::{api_configmaps, assert_rebuild_matches};

fn go() -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(consumers().join("go")).env("GOTOOLCHAIN", "local");
    cmd
}

/// The Go consumer's command, built once into the target directory.
fn go_rebuild() -> Command {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BUILT.get_or_init(|| {
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deltaship-rebuild-go");
        let mut build = go();
        build.args(["build", "-o"]).arg(&bin).arg("./cmd/deltaship-rebuild");
        run(build, "go build ./cmd/deltaship-rebuild");
        bin
    });
    Command::new(bin)
}

/// `mvn package` of the Java consumer (its tests, then its jar), once: what the tests said.
fn java_built() -> &'static str {
    static BUILT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let mut mvn = Command::new("mvn");
        mvn.args(["-B", "package"]).current_dir(consumers().join("java"));
        run(mvn, "mvn package in consumers/java")
    })
}

fn java_rebuild() -> Command {
    java_built();
    let mut cmd = Command::new("java");
    cmd.arg("-jar").arg(consumers().join(format!("java/target/deltaship-consumer-{}-all.jar", support::consumers::java_version())));
    cmd
}

#[test]
fn the_java_consumer_passes_the_shared_vectors() {
    let said = java_built();
    for class in ["VectorsTest", "HostileTest", "StateDigestTest", "RepeatsTest", "SnapshotTest", "LongRunTest"] {
        assert!(
            said.lines().any(|l| l.contains("Failures: 0, Errors: 0, Skipped: 0") && l.ends_with(&format!("dev.deltaship.consumer.{class}"))),
            "{class}: {said}"
        );
    }
}

#[test]
fn the_go_consumer_passes_the_shared_vectors() {
    let mut test = go();
    test.args(["test", "-count=1", "-v", "./..."]);
    let said = run(test, "go test ./... in consumers/go");
    for package in ["deltaship.dev/consumer/v2\t", "deltaship.dev/consumer/v2/kafka\t"] {
        assert!(said.lines().any(|l| l.starts_with("ok") && l.contains(package)), "{package}: {said}");
    }
    assert!(said.contains("--- PASS: TestMillionsOfEventsKeepMemoryFlat") && !said.contains("--- SKIP"), "{said}");
}

/// A consumer's rebuild command, ready for its flags.
type Consumer = fn() -> Command;

#[test]
fn the_python_consumer_passes_the_shared_vectors() {
    let mut pytest = python();
    pytest.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rp"]);
    let said = run(pytest, "pytest consumers/python");
    // The last line counts them ("135 passed in 31.62s"); -rp lists each one passed above it.
    let summary = said.lines().last().unwrap_or_default();
    assert!(summary.contains("passed") && !summary.contains("skipped") && !summary.contains("failed"), "{said}");
    assert!(said.contains("PASSED tests/test_long_run.py::test_millions_of_events_keep_memory_flat"), "{said}");
    let passed: usize = summary.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(passed >= 2 * 30 + 15, "the hostile vectors did not all run: {said}");
}

/// What one consumer's command made of a recorded stream: the state it printed and the
/// reasons of the records it reported skipped, counted.
struct Outcome {
    state: Value,
    skipped: BTreeMap<String, u64>,
}

/// `rebuild`, Python, Go, Java on `file` for `cluster`.
fn every_outcome(file: &Path, cluster: &str) -> Vec<(&'static str, Outcome)> {
    let mut rebuild = Command::new(env!("CARGO_BIN_EXE_deltaship"));
    rebuild.args(["rebuild", "--cluster", cluster, "--records"]).arg(file);
    let doc: Value = serde_json::from_str(&run(rebuild, &format!("rebuild {}", file.display()))).unwrap();
    let skipped = serde_json::from_value(doc["summary"]["skipped"].clone()).unwrap();
    let mut all = vec![("rebuild", Outcome { state: doc["resources"].clone(), skipped })];
    let commands: [(&str, Consumer, &str); 3] = [("Python", python_rebuild, "--"), ("Go", go_rebuild, "-"), ("Java", java_rebuild, "--")];
    for (language, command, dash) in commands {
        let mut cmd = command();
        cmd.arg(format!("{dash}records")).arg(file).arg(format!("{dash}cluster")).arg(cluster);
        let out = cmd.output().unwrap_or_else(|e| panic!("{language}: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the {language} consumer on {}: {stderr}", file.display());
        let state = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{language} on {} printed no JSON state ({e}): {stderr}", file.display()));
        let mut skipped = BTreeMap::new();
        for line in stderr.lines().filter_map(|l| l.strip_prefix("skipped record ")) {
            *skipped.entry(line.split(": ").nth(1).unwrap_or_default().to_string()).or_default() += 1;
        }
        all.push((language, Outcome { state, skipped }));
    }
    all
}

/// The hostile vectors (vectors/hostile/, vectors/README.md): the Rust `rebuild` and the
/// three libraries' commands end each stream in its expected state, skipping (and
/// reporting) exactly its expected records.
#[test]
fn every_consumer_agrees_with_rebuild_on_every_hostile_vector() {
    let hostile = consumers().parent().unwrap().join("vectors/hostile");
    let mut checked = 0;
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&hostile).unwrap().map(|e| e.unwrap().path()).filter(|d| d.join("expected.json").is_file()).collect();
    cases.sort();
    for dir in cases {
        let expected: Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        let file = ["kafka.jsonl", "nats.jsonl"].iter().map(|f| dir.join(f)).find(|f| f.is_file()).unwrap();
        for (cluster, state) in expected["clusters"].as_object().unwrap() {
            let skipped: BTreeMap<String, u64> = serde_json::from_value(expected["skipped"][cluster].clone()).unwrap();
            for (consumer, outcome) in every_outcome(&file, cluster) {
                assert_eq!(&outcome.state, state, "{consumer} on {}: state", dir.display());
                assert_eq!(outcome.skipped, skipped, "{consumer} on {}: records skipped", dir.display());
            }
        }
        checked += 1;
    }
    assert!(checked >= 30, "hostile vectors checked: {checked}");
}

/// What one consumer's command made of a count-and-digest vector under `--verify`: its exit
/// code, state, `state mismatch` lines and `verification:` summary.
struct Verified {
    code: Option<i32>,
    state: Value,
    mismatches: Vec<String>,
    summary: Value,
}

/// The four consumers' rebuild commands: (name, command, the dash its long options take).
fn rebuild_commands() -> [(&'static str, Consumer, &'static str); 4] {
    fn rebuild() -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltaship"));
        cmd.arg("rebuild");
        cmd
    }
    [("rebuild", rebuild, "--"), ("Python", python_rebuild, "--"), ("Go", go_rebuild, "-"), ("Java", java_rebuild, "--")]
}

/// `rebuild`, Python, Go, Java with `--verify` on `file` for `cluster`.
fn every_verification(file: &Path, cluster: &str) -> Vec<(&'static str, Verified)> {
    let commands = rebuild_commands();
    commands
        .into_iter()
        .map(|(consumer, command, dash)| {
            let mut cmd = command();
            cmd.arg(format!("{dash}verify")).arg(format!("{dash}records")).arg(file).arg(format!("{dash}cluster")).arg(cluster);
            let out = cmd.output().unwrap_or_else(|e| panic!("{consumer}: {e}"));
            let stderr = String::from_utf8_lossy(&out.stderr);
            let printed: Value =
                serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{consumer} on {} printed no JSON ({e}): {stderr}", file.display()));
            let state = if consumer == "rebuild" { printed["resources"].clone() } else { printed };
            let mismatches = stderr.lines().filter(|l| l.starts_with("state mismatch at marker ")).map(str::to_string).collect();
            let summary = stderr.lines().find_map(|l| l.strip_prefix("verification: ")).map_or(Value::Null, |s| serde_json::from_str(s).unwrap());
            (consumer, Verified { code: out.status.code(), state, mismatches, summary })
        })
        .collect()
}

/// The count-and-digest vectors (vectors/state-digest/, vectors/README.md): under
/// `--verify`, the four commands end each stream in its expected state, print the same
/// `state mismatch` lines (one per expected mismatch, naming its marker, partition and
/// figures) and the same summary, and exit 3 exactly on the tampered ones.
#[test]
fn every_consumer_verifies_the_clean_state_digest_vectors_and_flags_the_tampered_ones() {
    let dir = consumers().parent().unwrap().join("vectors/state-digest");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|d| d.join("expected.json").is_file()).collect();
    cases.sort();
    let mut flagged = 0;
    for case in &cases {
        let expected: Value = serde_json::from_slice(&std::fs::read(case.join("expected.json")).unwrap()).unwrap();
        let file = ["kafka.jsonl", "nats.jsonl"].iter().map(|f| case.join(f)).find(|f| f.is_file()).unwrap();
        for (cluster, state) in expected["clusters"].as_object().unwrap() {
            let want = &expected["verification"][cluster];
            let mismatched = want["mismatched"].as_u64().unwrap();
            let all = every_verification(&file, cluster);
            let reference = &all[0].1;
            assert_eq!(reference.mismatches.len() as u64, mismatched, "rebuild on {}: {:?}", case.display(), reference.mismatches);
            for (consumer, v) in &all {
                let what = format!("{consumer} on {}, cluster {cluster}", case.display());
                assert_eq!(v.code, Some(if mismatched > 0 { 3 } else { 0 }), "{what}: exit code");
                assert_eq!(&v.state, state, "{what}: state");
                assert_eq!(v.summary, json!({"verified": want["verified"], "mismatched": want["mismatched"]}), "{what}: summary");
                assert_eq!(v.mismatches, reference.mismatches, "{what}: mismatch lines");
            }
            flagged += usize::from(mismatched > 0 && cluster == "c1");
        }
    }
    assert!(cases.len() >= 7 && flagged >= 5, "state-digest vectors: {cases:?}, {flagged} flagged");
}

/// A Kafka line of an `added` whose value is `size` bytes (vectors/README.md, "Hostile
/// vectors": the record-size bound).
fn big_record(name: &str, size: usize) -> String {
    let head = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"big":""}}}}"#);
    let value = format!("{}{}{}", &head[..head.len() - 3], "x".repeat(size - head.len()), &head[head.len() - 3..]);
    let headers = [
        ["ce_id", name],
        ["ce_type", "dev.deltaship.object.added"],
        ["ce_subject", &format!("ns/{name}")],
        ["ce_apiversion", "v1"],
        ["ce_kind", "ConfigMap"],
        ["ce_cluster", "c1"],
    ];
    format!("{}\n", json!({"topic": "big", "partition": 0, "offset": 0, "key": null, "headers": headers, "value": value}))
}

/// Records at the size bound are applied and larger ones skipped as `too_large`, by all
/// four, from lines longer than Go's old 16 MB reader and strings longer than Jackson's
/// 20 MB default.
#[test]
fn every_consumer_applies_a_record_of_the_size_bound_and_skips_a_larger_one() {
    let bound = deltaship::rebuild::decode::MAX_RECORD_BYTES;
    let dir = std::env::temp_dir().join(support::unique("big"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.jsonl");
    std::fs::write(&file, [big_record("a", bound), big_record("b", 20_000_001), big_record("c", 100)].concat()).unwrap();
    for (consumer, outcome) in every_outcome(&file, "c1") {
        let objects = outcome.state["v1/ConfigMap"].as_object().unwrap_or_else(|| panic!("{consumer}: no ConfigMaps"));
        assert_eq!(objects.keys().collect::<Vec<_>>(), ["ns/a", "ns/c"], "{consumer}");
        assert_eq!(serde_json::to_string(&objects["ns/a"]).unwrap().len(), bound, "{consumer}: ns/a whole");
        assert_eq!(outcome.skipped, BTreeMap::from([("too_large".to_string(), 1)]), "{consumer}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
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

    // Each consumer's command, with its flags' dash: Kafka, then JetStream.
    let commands: [(&str, Consumer, &str); 3] = [("Python", python_rebuild, "--"), ("Go", go_rebuild, "-"), ("Java", java_rebuild, "--")];
    for (language, command, dash) in commands {
        for (broker, source) in [("Kafka", [("kafka", &env.kafka), ("topic", &topic)]), ("JetStream", [("nats", &env.nats), ("stream", &stream)])] {
            let mut cmd = command();
            for (name, value) in source.into_iter().chain([("cluster", &cluster)]) {
                cmd.arg(format!("{dash}{name}")).arg(value);
            }
            assert_eq!(configmaps(&run(cmd, &format!("the {language} consumer on {broker}")), &ns), want, "{language}, {broker}");
        }
    }

    // `rebuild --follow` on both brokers: the files follow the changes made after the end.
    let dir = std::env::temp_dir().join(support::unique("follow"));
    std::fs::create_dir_all(&dir).unwrap();
    let follow = |source: [&str; 4], out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_deltaship"))
            .arg("rebuild")
            .args(source)
            .args(["--cluster", &cluster, "--follow", "--out"])
            .arg(out)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let files = [dir.join("kafka.json"), dir.join("nats.json")];
    let mut followers = [follow(["--kafka", &env.kafka, "--topic", &topic], &files[0]), follow(["--nats", &env.nats, "--stream", &stream], &files[1])];
    let current =
        |file: &Path| std::fs::read_to_string(file).ok().map(|text| configmaps(&serde_json::from_str::<Value>(&text).unwrap()["resources"].to_string(), &ns));
    let wait_files = |want: BTreeMap<String, String>| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for file in &files {
            while current(file).as_ref() != Some(&want) {
                assert!(std::time::Instant::now() < deadline, "{} never showed {want:?}: {:?}", file.display(), current(file));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    wait_files(want);
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "after"}, "data": {"v": "0"}})).unwrap()).await.unwrap();
    api.patch("before-1", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    api.delete("live-0", &DeleteParams::default()).await.unwrap();
    wait_files(api_configmaps(&client, &namespaces).await);
    for f in &mut followers {
        assert!(Command::new("kill").args(["-TERM", &f.id().to_string()]).status().unwrap().success());
        assert!(f.wait().unwrap().success(), "rebuild --follow did not stop with 0 on SIGTERM");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    drop(bridge);
    delete_namespace(&client, &ns).await;
}

/// A ConfigMap of namespace `ns` written in a transaction: (partition, name, `data.v`).
type TxnRecord = (i32, &'static str, &'static str);

/// Writes `txns` (committed or not, their records) to a new topic of 3 partitions, as
/// deltaship's Kafka records are written; returns the topic.
async fn write_transactions(brokers: &str, txns: &[(bool, &[TxnRecord])]) -> String {
    let topic = support::unique("it-consumers-txn");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    let created = admin.create_topics(&[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).set("transactional.id", support::unique("it-txn")).create().unwrap();
    let t = Duration::from_secs(30);
    producer.init_transactions(t).unwrap();
    for (n, (commit, records)) in txns.iter().enumerate() {
        producer.begin_transaction().unwrap();
        for (i, &(p, name, v)) in records.iter().enumerate() {
            let value = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": format!("{n}{i}")}, "data": {"v": v}}).to_string();
            let (id, subject) = (format!("{topic}-{n}-{i}"), format!("ns/{name}"));
            let mut headers = OwnedHeaders::new();
            for (key, value) in [
                ("ce_id", id.as_str()),
                ("ce_type", "dev.deltaship.object.added"),
                ("ce_subject", &subject),
                ("ce_apiversion", "v1"),
                ("ce_kind", "ConfigMap"),
                ("ce_cluster", "c1"),
            ] {
                headers = headers.insert(Header { key, value: Some(value) });
            }
            producer.send(BaseRecord::to(&topic).partition(p).key(&subject).payload(&value).headers(headers)).unwrap();
        }
        // An abort would purge records not yet sent: the aborted ones must reach the log.
        producer.flush(t).unwrap();
        if *commit { producer.commit_transaction(t) } else { producer.abort_transaction(t) }.unwrap();
    }
    topic
}

/// A fenced route writes its records inside Kafka transactions (src/sink/kafka/transaction.rs):
/// each reader applies the committed records only, and ends a partition whose last offsets
/// hold transaction markers (no record is delivered at them) as soon as it reached them,
/// not after its 30 s wait for a record.
#[tokio::test(flavor = "multi_thread")]
async fn every_consumer_applies_committed_records_only_and_ends_at_a_transaction_marker() {
    let env = support::env();
    // Partitions 0 and 1 end with a commit marker, partition 2 holds an aborted record only.
    let aborted: &[TxnRecord] = &[(0, "a", "aborted"), (0, "x", "aborted"), (1, "y", "aborted"), (2, "z", "aborted")];
    let txns: [(bool, &[TxnRecord]); 3] = [(true, &[(0, "a", "1"), (0, "b", "1"), (1, "c", "1")]), (false, aborted), (true, &[(0, "d", "1"), (1, "c", "2")])];
    let topic = write_transactions(&env.kafka, &txns).await;
    // 9 records and 7 markers (one per transaction and partition): the aborted records are in the log.
    // 18 was seen once on a loaded machine (not explained; likely a transaction's end sent
    // again after a timeout, which writes its markers again); what each consumer applies,
    // checked below, must not change with it.
    let total = support::kafka::total(&env.kafka, &topic);
    assert!((16..=19).contains(&total), "{total} offsets: expected 9 records and 7 markers (and at most one set of markers again)");
    let want = BTreeMap::from([("ns/a", "1"), ("ns/b", "1"), ("ns/c", "2"), ("ns/d", "1")].map(|(k, v)| (k.to_string(), v.to_string())));

    let commands = rebuild_commands();
    for (consumer, command, dash) in commands {
        let mut cmd = command();
        for (name, value) in [("kafka", env.kafka.as_str()), ("topic", &topic), ("cluster", "c1")] {
            cmd.arg(format!("{dash}{name}")).arg(value);
        }
        let started = std::time::Instant::now();
        let printed: Value = serde_json::from_str(&run(cmd, &format!("the {consumer} consumer"))).unwrap();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{consumer} took {took:?} to read {topic}");
        let state = if consumer == "rebuild" { &printed["resources"] } else { &printed };
        let data: BTreeMap<String, String> = state["v1/ConfigMap"]
            .as_object()
            .unwrap_or_else(|| panic!("{consumer}: no ConfigMaps: {printed}"))
            .iter()
            .map(|(key, o)| (key.clone(), o["data"]["v"].as_str().unwrap_or_default().to_string()))
            .collect();
        assert_eq!(data, want, "{consumer}");
    }
}

/// The TLS and SASL options of the commands (docs/consumers/): the Go and Java ones read a
/// recorded stream, written through the plaintext listener, over the broker's mutual-TLS
/// listener and over SASL_SSL with SCRAM-SHA-512, Python's over the latter, each to the
/// vector's state; a wrong password and a client certificate of a CA the broker does not
/// trust fail with an exit code and an error naming the cause, never showing a password.
#[tokio::test(flavor = "multi_thread")]
async fn every_consumer_reads_over_mutual_tls_and_sasl_ssl_and_names_what_the_broker_refused() {
    let env = support::env();
    let s = secured();
    let vector = consumers().parent().unwrap().join("vectors/initial-and-live");
    let topic = write_recorded(&env.kafka, &vector.join("kafka.jsonl")).await;
    let expected: Value = serde_json::from_slice(&std::fs::read(vector.join("expected.json")).unwrap()).unwrap();
    let path = |name: &str| s.file(name).display().to_string();
    let mtls = |client: &str| {
        let (cert, key) = (path(&format!("{client}.pem")), path(&format!("{client}.key")));
        vec![("kafka", s.mtls.clone()), ("tls-ca-file", path("ca.pem")), ("tls-cert-file", cert), ("tls-key-file", key)]
    };
    let scram = |password_file: String| {
        let user = s.read("scram-sha-512.user");
        vec![
            ("kafka", s.sasl_ssl.clone()),
            ("tls-ca-file", path("ca.pem")),
            ("sasl-mechanism", "SCRAM-SHA-512".into()),
            ("sasl-username", user),
            ("sasl-password-file", password_file),
        ]
    };
    let command = |consumer: Consumer, dash: &str, flags: Vec<(&str, String)>| {
        let mut cmd = consumer();
        for (name, value) in flags.into_iter().chain([("topic", topic.clone()), ("cluster", "vectors".to_string())]) {
            cmd.arg(format!("{dash}{name}")).arg(value);
        }
        cmd
    };
    let password_file = path("scram-sha-512.password");
    let reads = [
        ("Go over mutual TLS", command(go_rebuild, "-", mtls("client"))),
        ("Go over SCRAM-SHA-512", command(go_rebuild, "-", scram(password_file.clone()))),
        ("Java over mutual TLS", command(java_rebuild, "--", mtls("client"))),
        ("Java over SCRAM-SHA-512", command(java_rebuild, "--", scram(password_file.clone()))),
        ("Python over SCRAM-SHA-512", command(python_rebuild, "--", scram(password_file))),
    ];
    for (what, cmd) in reads {
        let started = std::time::Instant::now();
        let state: Value = serde_json::from_str(&run(cmd, what)).unwrap();
        assert_eq!(state, expected["clusters"]["vectors"], "{what}");
        eprintln!("{what}: {:?}", started.elapsed());
    }

    let password = s.read("scram-sha-512.password");
    let dir = std::env::temp_dir().join(support::unique("wrong-password"));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = format!("wr0ng-{}", support::unique("pw"));
    std::fs::write(dir.join("password"), &wrong).unwrap();
    let wrong_file = dir.join("password").display().to_string();
    let refused = [
        ("Go, a wrong password", command(go_rebuild, "-", scram(wrong_file.clone())), "SASL Authentication failed"),
        ("Go, an untrusted client certificate", command(go_rebuild, "-", mtls("untrusted-client")), "certificate"),
        ("Java, a wrong password", command(java_rebuild, "--", scram(wrong_file.clone())), "Authentication failed"),
        ("Java, an untrusted client certificate", command(java_rebuild, "--", mtls("untrusted-client")), "certificate"),
        ("Python, a wrong password", command(python_rebuild, "--", scram(wrong_file)), "Authentication failed"),
        ("Python, an untrusted client certificate", command(python_rebuild, "--", mtls("untrusted-client")), "certificate"),
    ];
    for (what, mut cmd, cause) in refused {
        let started = std::time::Instant::now();
        let out = cmd.output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!("{what}: {:?}: {said}", started.elapsed());
        assert_eq!(out.status.code(), Some(1), "{what}: {said}");
        let error = said.lines().last().unwrap_or_default();
        assert!(error.starts_with("error: ") && error.contains(cause), "{what}: the error does not name the cause ({cause}): {said}");
        assert!(!said.contains(&wrong) && !said.contains(&password), "{what}: a password is shown: {said}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
