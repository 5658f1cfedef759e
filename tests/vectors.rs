//! The consumer test vectors (vectors/, format in vectors/README.md): the Rust consumer
//! (`deltaship rebuild --records`) rebuilds every recorded stream to its expected state.
//!
//! `DELTASHIP_BLESS=1` first records them again from real runs against the test servers:
//! each scenario runs a bridge with two routes, Kafka and JetStream, from the same watches;
//! once `deltaship rebuild` of both brokers equals the API server's state, every record of
//! the run's topic and every message of its stream is saved, and the state rebuilt from them
//! becomes `expected.json`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

/// `deltaship rebuild --strict --verify --records FILE [--cluster C]`: the rebuilt
/// resources and `{"verified": N, "mismatched": 0}`; a mismatch fails.
fn rebuild_verified(file: &Path, cluster: Option<&str>) -> (Value, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltaship"));
    cmd.args(["rebuild", "--strict", "--verify", "--records"]).arg(file);
    if let Some(c) = cluster {
        cmd.args(["--cluster", c]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "rebuild {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["mismatches"], json!([]), "{}", file.display());
    let summary = &doc["summary"];
    (doc["resources"].clone(), json!({"verified": summary["verified"], "mismatched": summary["mismatched"]}))
}

#[test]
fn the_rust_consumer_rebuilds_every_vector() {
    if std::env::var_os("DELTASHIP_BLESS").is_some() {
        tokio::runtime::Runtime::new().unwrap().block_on(record::all());
    }
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(vectors()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(expected) = std::fs::read(dir.join("expected.json")) else { continue };
        let expected: Value = serde_json::from_slice(&expected).unwrap();
        let clusters = expected["clusters"].as_object().unwrap_or_else(|| panic!("{}: no clusters", dir.display()));
        for stream in ["kafka.jsonl", "nats.jsonl"] {
            let file = dir.join(stream);
            if !file.is_file() {
                continue;
            }
            for (cluster, state) in clusters {
                let (resources, verification) = rebuild_verified(&file, Some(cluster));
                assert_eq!(&resources, state, "{} of cluster {cluster}", file.display());
                // Recorded before the bridge wrote count and digest: nothing to check.
                // `verification` counts the Kafka copies (one per partition); the stream holds
                // one of each marker, which must all verify too.
                if let Some(want) = expected.get("verification") {
                    if stream == "kafka.jsonl" {
                        assert_eq!(&verification, &want[cluster], "{} of cluster {cluster}: markers verified", file.display());
                    } else {
                        let (verified, mismatched) = (verification["verified"].as_u64().unwrap_or(0), verification["mismatched"].as_u64());
                        assert!(verified > 0 && mismatched == Some(0), "{} of cluster {cluster}: markers verified: {verification}", file.display());
                    }
                }
            }
            checked.push(format!("{}/{stream}", dir.file_name().unwrap().to_string_lossy()));
        }
    }
    checked.sort();
    assert!(checked.len() >= 15, "vectors checked: {checked:?}");
}

/// `deltaship rebuild --records FILE --cluster C` (bad records skipped): the rebuilt
/// resources and the skip counts by reason.
fn rebuild_skipping(file: &Path, cluster: &str) -> (Value, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_deltaship")).args(["rebuild", "--cluster", cluster, "--records"]).arg(file).output().unwrap();
    assert!(out.status.success(), "rebuild {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    (doc["resources"].clone(), doc["summary"]["skipped"].clone())
}

/// The hostile vectors (vectors/hostile/, vectors/README.md): streams of records no bridge
/// ships, each rebuilt to its expected state with its expected records skipped.
#[test]
fn the_rust_consumer_rebuilds_every_hostile_vector_skipping_what_it_expects() {
    let mut checked = 0;
    for (name, file, expected) in hostile_vectors() {
        for (cluster, state) in expected["clusters"].as_object().unwrap() {
            let (resources, skipped) = rebuild_skipping(&file, cluster);
            assert_eq!(&resources, state, "{name}: state of cluster {cluster}");
            assert_eq!(&skipped, &expected["skipped"][cluster], "{name}: records skipped for cluster {cluster}");
        }
        checked += 1;
    }
    assert!(checked >= 30, "hostile vectors checked: {checked}");
}

/// The count-and-digest vectors (vectors/state-digest/, vectors/README.md): each rebuilt to
/// its state, with exactly its markers verified and its mismatches reported (on stderr and
/// in the document, with the held figures), and `--verify` exiting 3 when there is one.
#[test]
fn the_rust_consumer_verifies_every_marker_of_the_state_digest_vectors_and_flags_the_tampered_ones() {
    let mut checked = Vec::new();
    for (name, file, expected) in case_vectors("state-digest") {
        for (cluster, state) in expected["clusters"].as_object().unwrap() {
            let want = &expected["verification"][cluster];
            for verify in [false, true] {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltaship"));
                cmd.args(["rebuild", "--cluster", cluster, "--records"]).arg(&file);
                if verify {
                    cmd.arg("--verify");
                }
                let out = cmd.output().unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                let mismatched = want["mismatched"].as_u64().unwrap();
                let code = if verify && mismatched > 0 { 3 } else { 0 };
                assert_eq!(out.status.code(), Some(code), "{name}, cluster {cluster}, --verify {verify}: {stderr}");
                let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(&doc["resources"], state, "{name}: state of cluster {cluster}");
                assert_eq!(&doc["summary"]["skipped"], &expected["skipped"][cluster], "{name}: records skipped for cluster {cluster}");
                assert_eq!(doc["summary"]["verified"], want["verified"], "{name}, cluster {cluster}: {stderr}");
                assert_eq!(doc["summary"]["mismatched"], want["mismatched"], "{name}, cluster {cluster}: {stderr}");
                let found: Vec<Value> = doc["mismatches"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| json!({"syncId": m["syncId"], "partition": m["partition"], "expected": m["expected"], "held": m["held"]}))
                    .collect();
                assert_eq!(&Value::Array(found), &want["mismatches"], "{name}, cluster {cluster}");
                let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("state mismatch at marker ")).collect();
                assert_eq!(lines.len() as u64, mismatched, "{name}: {stderr}");
                for (line, m) in lines.iter().zip(want["mismatches"].as_array().unwrap()) {
                    let names = format!(
                        "marker {} of v1/ConfigMap in namespace ns on partition {} (cluster {cluster}): expected count {} digest {}, held count {} digest {}",
                        m["syncId"].as_str().unwrap(),
                        m["partition"],
                        m["expected"]["count"],
                        m["expected"]["digest"].as_str().unwrap(),
                        m["held"]["count"],
                        m["held"]["digest"].as_str().unwrap()
                    );
                    assert!(line.ends_with(&names), "{name}: {line}\nwant {names}");
                }
                let summary = stderr.lines().find_map(|l| l.strip_prefix("verification: "));
                match verify {
                    true => assert_eq!(
                        serde_json::from_str::<Value>(summary.unwrap()).unwrap(),
                        json!({"verified": want["verified"], "mismatched": want["mismatched"]})
                    ),
                    false => assert_eq!(summary, None, "{name}: a summary without --verify"),
                }
            }
        }
        checked.push((name, expected["verification"]["c1"]["mismatched"].as_u64().unwrap()));
    }
    let flagged = checked.iter().filter(|(_, m)| *m > 0).count();
    assert!(checked.len() >= 7 && flagged >= 5, "state-digest vectors checked: {checked:?}");
}

/// The cases of `vectors/<set>/`: name, one recorded stream, expected.json.
pub fn case_vectors(set: &str) -> Vec<(String, PathBuf, Value)> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(vectors().join(set)).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let expected: Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        let file = ["kafka.jsonl", "nats.jsonl"].iter().map(|f| dir.join(f)).find(|f| f.is_file()).unwrap();
        all.push((dir.file_name().unwrap().to_string_lossy().into_owned(), file, expected));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Every hostile vector: its name, its one recorded stream, its expected.json.
pub fn hostile_vectors() -> Vec<(String, PathBuf, Value)> {
    case_vectors("hostile")
}

mod record {
    //! Recording the vectors from real runs.

    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::{Offset, TopicPartitionList};

    use deltaship::config::{Config, FilterConfig, RouteConfig, SinkConfig};
    use support::bridge::Bridge;
    use support::churn::ctl;
    use support::config::{TestConfig, kafka, nats, partitions};
    use support::kube::{client, namespace};
    use support::state::assert_rebuild_matches;

    /// One recording: its topic and stream, and the namespaces its bridges watch.
    struct Recording {
        name: &'static str,
        topic: String,
        stream: String,
        subjects: String,
        namespaces: Vec<String>,
        api: Vec<Api<ConfigMap>>,
        client: kube::Client,
    }

    impl Recording {
        async fn new(name: &'static str, namespaces: usize) -> Recording {
            let client = client().await;
            let u = support::unique("v").replace('-', "");
            let mut ns = Vec::new();
            for _ in 0..namespaces {
                ns.push(namespace(&client, &format!("vec-{name}")).await);
            }
            let api = ns.iter().map(|n| Api::namespaced(client.clone(), n)).collect();
            Recording { name, topic: format!("vec-{name}-{u}.configmaps"), stream: format!("VEC_{u}"), subjects: u, namespaces: ns, api, client }
        }

        /// A bridge of `cluster` watching the recording's namespace `ns`, to its topic and
        /// stream; `set` adjusts the config.
        fn bridge(&self, cluster: &str, ns: usize, set: impl FnOnce(&mut Config)) -> Bridge {
            let env = support::env();
            let mut k = kafka(&env.kafka, &self.topic.replace(".configmaps", ".{plural}"));
            k.create_topics = partitions(2);
            let mut n = nats(&env.nats);
            n.jetstream.stream = self.stream.clone();
            n.jetstream.subjects = vec![format!("{}.>", self.subjects)];
            n.subject_template =
                deltaship::config::Template::parse(&format!("{}.{{cluster}}.{{group}}.{{kind}}.{{namespace}}.{{name}}", self.subjects)).unwrap();
            n.marker_subject_template = deltaship::config::Template::parse(&format!("{}.{{cluster}}.{{group}}.{{kind}}._sync", self.subjects)).unwrap();
            let route =
                |name: &str, sink| RouteConfig { name: name.into(), sink, resources: Vec::new(), payload: None, format: None, filter: FilterConfig::default() };
            let config = TestConfig::new().cluster(cluster).configmaps(&self.namespaces[ns]).with(|c| {
                c.routes = vec![route("kafka", SinkConfig::Kafka(Box::new(k))), route("nats", SinkConfig::Nats(Box::new(n)))];
                c.resume.enabled = false;
                set(c);
            });
            let mut bridge = Bridge::start(&config.toml());
            bridge.wait_ready(Duration::from_secs(60));
            bridge
        }

        async fn create(&self, ns: usize, name: &str, data: Value) {
            let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
            self.api[ns].create(&PostParams::default(), &cm).await.unwrap();
        }

        async fn update(&self, ns: usize, name: &str, data: Value) {
            self.api[ns].patch(name, &PatchParams::default(), &Patch::Merge(json!({"data": data}))).await.unwrap();
        }

        async fn delete(&self, ns: usize, name: &str) {
            self.api[ns].delete(name, &DeleteParams::default()).await.unwrap();
        }

        /// Waits until both brokers rebuild to the API server's state of the namespaces.
        async fn settled(&self) {
            let env = support::env();
            let kafka = vec!["--kafka".into(), env.kafka.clone(), "--topic".into(), self.topic.clone()];
            let nats = vec!["--nats".into(), env.nats.clone(), "--stream".into(), self.stream.clone()];
            for args in [kafka, nats] {
                assert_rebuild_matches(&self.client, args, &self.namespaces, Duration::from_secs(120)).await;
            }
        }

        /// Saves the topic and the stream; `expected.json` is what they rebuild to.
        async fn save(&self, clusters: &[&str], edit: impl Fn(Vec<Value>) -> Vec<Value>) {
            let dir = vectors().join(self.name);
            std::fs::create_dir_all(&dir).unwrap();
            let mut files = vec![("kafka.jsonl", edit(kafka_records(&self.topic)))];
            if !self.stream.is_empty() {
                files.push(("nats.jsonl", edit(nats_messages(&self.stream).await)));
            }
            for (file, lines) in &files {
                let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
                std::fs::write(dir.join(file), text).unwrap();
            }
            let rebuilt: BTreeMap<&str, (Value, Value)> = clusters.iter().map(|c| (*c, rebuild_verified(&dir.join("kafka.jsonl"), Some(c)))).collect();
            let state: BTreeMap<&str, &Value> = rebuilt.iter().map(|(c, (s, _))| (*c, s)).collect();
            // Recorded with the markers' count and digest: every marker verifies (a
            // mismatch fails `rebuild_verified`); NATS verifies its own in the test.
            let verification: BTreeMap<&str, &Value> = rebuilt.iter().filter(|(_, (_, v))| v["verified"] != 0).map(|(c, (_, v))| (*c, v)).collect();
            let expected = if verification.is_empty() { json!({"clusters": state}) } else { json!({"clusters": state, "verification": verification}) };
            std::fs::write(dir.join("expected.json"), format!("{expected:#}\n")).unwrap();
        }
    }

    /// Every record of `topic`, partition by partition, up to its end now.
    fn kafka_records(topic: &str) -> Vec<Value> {
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", support::env().kafka).set("group.id", support::unique("vectors")).create().unwrap();
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        let mut out = Vec::new();
        for p in md.topics()[0].partitions().iter().map(|p| p.id()) {
            let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap();
            if high <= low {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
            consumer.assign(&tpl).unwrap();
            loop {
                // poll may return early without a record (an event of the assignment).
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                let m = loop {
                    if let Some(m) = consumer.poll(Duration::from_secs(1)) {
                        break m.unwrap();
                    }
                    assert!(std::time::Instant::now() < deadline, "no record of {topic}/{p} within 30 s");
                };
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                let headers: Vec<(String, String)> =
                    m.headers().map(|h| h.iter().map(|h| (h.key.to_string(), text(h.value).unwrap_or_default())).collect()).unwrap_or_default();
                out.push(json!({"topic": topic, "partition": p, "offset": m.offset(), "key": text(m.key()), "headers": headers, "value": text(m.payload())}));
                if m.offset() + 1 >= high {
                    break;
                }
            }
        }
        out
    }

    /// Every message of `stream`, in sequence order, headers as stored (percent-encoded).
    async fn nats_messages(stream: &str) -> Vec<Value> {
        let js = support::nats::jetstream().await;
        let mut s = js.get_stream(stream).await.unwrap();
        let last = s.info().await.unwrap().state.last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            let m = s.get_raw_message(seq).await.unwrap();
            let headers: Vec<(String, String)> = m.headers.iter().flat_map(|(k, vs)| vs.iter().map(move |v| (k.to_string(), v.to_string()))).collect();
            out.push(json!({"stream": stream, "sequence": seq, "subject": m.subject.to_string(), "headers": headers, "data": String::from_utf8(m.payload.to_vec()).unwrap()}));
        }
        out
    }

    fn same(lines: Vec<Value>) -> Vec<Value> {
        lines
    }

    /// Each object event delivered twice in a row, as a producer's retry leaves it in the
    /// log (the copy takes the next offset or sequence; later ones move up by one).
    fn doubled(lines: Vec<Value>) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        let mut shift: BTreeMap<i64, i64> = BTreeMap::new();
        for line in lines {
            let partition = line["partition"].as_i64().unwrap_or(-1);
            let (pos_key, pos) =
                if line.get("offset").is_some() { ("offset", line["offset"].as_i64().unwrap()) } else { ("sequence", line["sequence"].as_i64().unwrap()) };
            let s = *shift.get(&partition).unwrap_or(&0);
            let mut moved = line.clone();
            moved[pos_key] = json!(pos + s);
            let object = line.to_string().contains("dev.deltaship.object.");
            out.push(moved.clone());
            if object {
                moved[pos_key] = json!(pos + s + 1);
                out.push(moved);
                shift.insert(partition, s + 1);
            }
        }
        out
    }

    pub async fn all() {
        let r = Recording::new("initial-and-live", 1).await;
        for n in ["a", "b", "c"] {
            r.create(0, n, json!({"v": "1"})).await;
        }
        let bridge = r.bridge("vectors", 0, |_| {});
        r.create(0, "d", json!({"v": "1"})).await;
        r.update(0, "a", json!({"v": "2"})).await;
        r.delete(0, "b").await;
        r.settled().await;
        drop(bridge);
        r.save(&["vectors"], same).await;

        let r = Recording::new("duplicates", 1).await;
        r.create(0, "a", json!({"v": "1"})).await;
        let bridge = r.bridge("vectors", 0, |_| {});
        r.update(0, "a", json!({"v": "2"})).await;
        r.create(0, "b", json!({"v": "1"})).await;
        r.settled().await;
        drop(bridge);
        r.save(&["vectors"], doubled).await;

        let r = Recording::new("relist-diff", 1).await;
        for n in ["a", "b", "c"] {
            r.create(0, n, json!({"v": "1"})).await;
        }
        let bridge = r.bridge("vectors", 0, |_| {});
        // The watch's connection ends while the bridge is stopped (the API server restarts),
        // the changes happen, and their history is compacted away: the resumed watch gets
        // 410 Gone, and the relist finds them, the delete inferred.
        bridge.signal("STOP");
        ctl("kube", "expire-watches");
        r.delete(0, "b").await;
        r.update(0, "a", json!({"v": "2"})).await;
        r.create(0, "d", json!({"v": "1"})).await;
        ctl("kube", "expire-watches");
        bridge.signal("CONT");
        r.settled().await;
        assert!(bridge.log_text().contains("no longer has this version"), "no relist:\n{}", bridge.log_text());
        drop(bridge);
        r.save(&["vectors"], same).await;

        let r = Recording::new("resync", 1).await;
        r.create(0, "a", json!({"v": "1"})).await;
        r.create(0, "b", json!({"v": "1"})).await;
        let bridge = r.bridge("vectors", 0, |c| c.kubernetes.resync_secs = 2);
        r.update(0, "a", json!({"v": "2"})).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        r.settled().await;
        drop(bridge);
        r.save(&["vectors"], same).await;
        assert!(std::fs::read_to_string(vectors().join("resync/kafka.jsonl")).unwrap().contains("\\\"reason\\\":\\\"resync\\\""), "no resync recorded");

        let r = Recording::new("restart", 1).await;
        for n in ["a", "b", "c"] {
            r.create(0, n, json!({"v": "1"})).await;
        }
        let bridge = r.bridge("vectors", 0, |_| {});
        bridge.signal("KILL");
        drop(bridge);
        r.delete(0, "c").await;
        r.update(0, "a", json!({"v": "2"})).await;
        let bridge = r.bridge("vectors", 0, |_| {});
        r.settled().await;
        drop(bridge);
        r.save(&["vectors"], same).await;

        let r = Recording::new("patch", 1).await;
        r.create(0, "a", json!({"v": "1", "w": "x"})).await;
        let bridge = r.bridge("vectors", 0, |c| c.resources[0].payload = deltaship::config::PayloadMode::Patch);
        r.update(0, "a", json!({"v": "2"})).await;
        r.update(0, "a", json!({"w": null, "z": "new"})).await;
        r.create(0, "b", json!({"v": "1"})).await;
        r.update(0, "b", json!({"v": "3"})).await;
        r.settled().await;
        drop(bridge);
        r.save(&["vectors"], same).await;

        let mut r = Recording::new("truncated", 1).await;
        r.stream = String::new();
        let env = support::env();
        let mut k = kafka(&env.kafka, &r.topic.replace(".configmaps", ".{plural}"));
        k.create_topics = partitions(2);
        k.create_topics.as_mut().unwrap().config.insert("max.message.bytes".into(), "2048".into());
        let config = TestConfig::new().cluster("vectors").configmaps(&r.namespaces[0]).kafka(k).with(|c| c.resume.enabled = false);
        let mut bridge = Bridge::start(&config.toml());
        bridge.wait_ready(Duration::from_secs(60));
        r.create(0, "small", json!({"v": "1"})).await;
        // Random text: compression must not bring it under the topic's limit.
        let random: String = (0..250).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
        r.create(0, "big", json!({"v": random})).await;
        let kafka_args = vec!["--kafka".into(), env.kafka.clone(), "--topic".into(), r.topic.clone()];
        let keys = || async { support::state::api_configmaps(&r.client, &r.namespaces).await.into_keys().collect::<Vec<_>>() };
        let want = keys().await;
        for _ in 0..120 {
            let (got, _) = support::state::rebuilt_configmaps(kafka_args.clone(), &r.namespaces).await.unwrap();
            if got.into_keys().collect::<Vec<_>>() == want {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        drop(bridge);
        r.save(&["vectors"], same).await;
        assert!(
            std::fs::read_to_string(vectors().join("truncated/kafka.jsonl")).unwrap().contains("[\"ce_truncated\",\"true\"]"),
            "no truncated reference recorded"
        );

        let r = Recording::new("two-clusters", 2).await;
        r.create(0, "a", json!({"v": "east"})).await;
        r.create(1, "a", json!({"v": "west"})).await;
        let east = r.bridge("east", 0, |_| {});
        let west = r.bridge("west", 1, |_| {});
        r.update(0, "a", json!({"v": "east-2"})).await;
        r.create(1, "b", json!({"v": "west"})).await;
        r.delete(1, "a").await;
        r.settled().await;
        drop((east, west));
        r.save(&["east", "west"], same).await;
    }
}
