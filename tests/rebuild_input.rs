//! `deltaship rebuild` over hostile input, against the real Kafka broker and NATS server:
//! every kind of bad record mixed with good events is skipped and reported with its
//! position, the state is the good events' state, `--strict` stops at the first bad one;
//! a NATS server restart in the middle of a read skips nothing; and `--follow` on a stream
//! that is deleted stops naming it.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};
use support::nats_server::NatsServer;

/// One record to write: its partition (Kafka; NATS has one sequence), headers as
/// (attribute or header name, value), value, and the reason rebuild must skip it for.
struct Rec {
    partition: i32,
    headers: Vec<(String, Vec<u8>)>,
    value: Option<Vec<u8>>,
    bad: Option<&'static str>,
}

const PATCH: &str = "application/json-patch+json";

fn configmap(name: &str, rv: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}})).unwrap()
}

fn marker(sync: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"syncId": sync, "reason": "initial", "mode": "full", "resource": {"group": "", "version": "v1", "kind": "ConfigMap", "plural": "configmaps"}, "namespace": "ns"}))
        .unwrap()
}

/// The records, per binding: `prefix` is `ce_` (Kafka) or `ce-` (NATS); `not_utf8` a header
/// value that is not UTF-8 once read (raw on Kafka, percent-encoded on NATS).
fn records(prefix: &str, not_utf8: &[u8]) -> Vec<Rec> {
    let mut n = 0;
    let mut rec = |partition: i32, ty: &str, subject: Option<&str>, content_type: &str, value: Option<Vec<u8>>, bad: Option<&'static str>| {
        n += 1;
        let mut headers: Vec<(String, Vec<u8>)> = [
            ("id", format!("e{n}")),
            ("type", ty.to_string()),
            ("cluster", "c".into()),
            ("apiversion", "v1".into()),
            ("kind", "ConfigMap".into()),
            ("datacontenttype", content_type.into()),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{prefix}{k}"), v.into_bytes()))
        .collect();
        if let Some(s) = subject {
            headers.push((format!("{prefix}subject"), s.as_bytes().to_vec()));
        }
        Rec { partition, headers, value, bad }
    };
    let added = "dev.deltaship.object.added";
    let updated = "dev.deltaship.object.updated";
    let json = "application/json";
    let deep = format!("{{\"metadata\":{}1{}}}", "[".repeat(1000), "]".repeat(1000)).into_bytes();
    let mut recs = vec![
        rec(0, added, Some("ns/old"), json, Some(configmap("old", "1")), None),
        rec(0, "dev.deltaship.sync.started", None, json, Some(marker("s1")), None),
        rec(0, added, Some("ns/a"), json, Some(configmap("a", "1")), None),
        rec(0, added, Some("ns/g"), json, Some(b"\x00\xffgarbage\x13".to_vec()), Some("not_json")),
        rec(0, added, Some("ns/b"), json, Some(configmap("b", "1")), None),
        rec(0, added, Some("ns/t"), json, Some(configmap("t", "1")[..30].to_vec()), Some("truncated")),
        rec(0, updated, Some("ns/a"), PATCH, Some(br#"[{"op": "replace", "path": "/metadata/resourceVersion", "value": "2"}]"#.to_vec()), None),
        rec(0, "com.example.other", Some("ns/f"), json, Some(configmap("f", "1")), None),
        rec(0, added, Some("ns/w"), json, Some(b"\"a string, not an object\"".to_vec()), Some("wrong_type")),
        rec(0, added, Some("ns/e"), json, Some(Vec::new()), Some("empty")),
        rec(0, added, Some("ns/d"), json, Some(deep), Some("too_deep")),
        rec(0, updated, Some("ns/b"), PATCH, Some(br#"[{"op": "replace", "path": "/no/such/path", "value": "2"}]"#.to_vec()), Some("patch_not_applied")),
        rec(0, "dev.deltaship.object.exploded", Some("ns/x"), json, Some(configmap("x", "1")), None),
        // Closes the full sync: ns/old received no event since it started.
        rec(0, "dev.deltaship.sync.completed", None, json, Some(marker("s1")), None),
        rec(1, added, Some("ns/q"), json, Some(configmap("q", "7")), None),
        rec(1, added, Some("ns/m"), json, Some(configmap("m", "1")), Some("missing_attribute")),
        rec(1, added, Some("ns/h"), json, Some(configmap("h", "1")), Some("wrong_type")),
    ];
    // A wrongly typed header (not UTF-8), and an event without a type.
    recs[16].headers.last_mut().unwrap().1 = not_utf8.to_vec();
    recs[15].headers.retain(|(k, _)| !k.ends_with("type"));
    recs
}

/// The rebuilt ConfigMaps of the good events: key to resourceVersion.
fn good_state() -> Value {
    json!({"ns/a": "2", "ns/b": "1", "ns/q": "7"})
}

fn rebuild(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deltaship")).arg("rebuild").args(args).output().expect("run deltaship rebuild")
}

/// Checks a lenient rebuild: exit 0, the good events' state, every bad record reported
/// (stderr and the document) at `positions[i]` (its `at` as printed and its position
/// fields), the summary's counts.
fn assert_skips_and_rebuilds(out: &Output, recs: &[Rec], positions: &[(String, Value)]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rebuild failed: {stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("the state document");
    let state: serde_json::Map<String, Value> =
        doc["resources"]["v1/ConfigMap"].as_object().unwrap().iter().map(|(k, o)| (k.clone(), o["metadata"]["resourceVersion"].clone())).collect();
    assert_eq!(Value::Object(state), good_state(), "{stderr}");
    assert_eq!(doc["resources"].as_object().unwrap().len(), 1, "foreign types stored: {}", doc["resources"]);

    let expected: Vec<(&String, &Value, &str)> = recs.iter().zip(positions).filter_map(|(r, (at, pos))| r.bad.map(|b| (at, pos, b))).collect();
    let skipped = doc["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), expected.len(), "{skipped:#?}");
    for ((at, pos, reason), s) in expected.iter().zip(skipped) {
        assert_eq!(s["reason"], *reason, "{s}");
        for (field, value) in pos.as_object().unwrap() {
            assert_eq!(&s[field], value, "{s}");
        }
        let line = format!("skipped record {at}: {reason}: ");
        assert!(stderr.contains(&line), "no `{line}` on stderr:\n{stderr}");
    }
    let summary = &doc["summary"];
    let mut counts = std::collections::BTreeMap::<&str, u64>::new();
    for (_, _, reason) in &expected {
        *counts.entry(reason).or_default() += 1;
    }
    assert_eq!(summary["skipped"], json!(counts), "{summary}");
    assert_eq!(summary["foreign_types"], 2, "{summary}");
    assert_eq!(summary["stale_objects"], 1, "ns/b kept at its content before the patch: {summary}");
    assert_eq!(summary["removed_by_markers"], 1, "{summary}");
    assert!(stderr.contains("\"foreign_types\":2"), "the summary on stderr:\n{stderr}");
}

/// Checks `--strict`: exit 1 naming the first bad record, nothing written.
fn assert_strict_stops(out: &Output, first_bad: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("error: record {first_bad}: not_json: ")), "{stderr}");
    assert!(out.stdout.is_empty(), "wrote a document: {}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_rebuild_skips_and_reports_each_bad_record_and_rebuilds_the_good_ones() {
    let env = support::env();
    let topic = support::unique("it-rebuild-input");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &env.kafka).create().unwrap();
    let created = admin.create_topics(&[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &env.kafka).set("enable.idempotence", "true").create().unwrap();
    let recs = records("ce_", b"\xff\xfe");
    let mut positions = Vec::new();
    for r in &recs {
        // Kafka's binding: the data's content type is the `content-type` header.
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            let key = if k == "ce_datacontenttype" { "content-type" } else { k.as_str() };
            headers = headers.insert(Header { key, value: Some(v) });
        }
        let mut record = FutureRecord::<str, [u8]>::to(&topic).key("k").partition(r.partition).headers(headers);
        record.payload = r.value.as_deref();
        let delivery = producer.send(record, Duration::from_secs(30)).await.map_err(|(e, _)| e).expect("the broker acknowledges");
        let (partition, offset) = (delivery.partition, delivery.offset);
        positions.push((format!("{topic}/{partition}@{offset}"), json!({"topic": topic, "partition": partition, "offset": offset})));
    }

    let out = rebuild(&["--kafka", &env.kafka, "--topic", &topic]);
    assert_skips_and_rebuilds(&out, &recs, &positions);
    let first_bad = recs.iter().position(|r| r.bad.is_some()).unwrap();
    assert_strict_stops(&rebuild(&["--kafka", &env.kafka, "--topic", &topic, "--strict"]), &positions[first_bad].0);
}

/// Publishes `recs` to a new stream `name` (subjects `name.>`): each one's sequence.
async fn publish(js: &async_nats::jetstream::Context, name: &str, recs: &[Rec]) -> Vec<u64> {
    js.create_stream(async_nats::jetstream::stream::Config { name: name.to_string(), subjects: vec![format!("{name}.>")], ..Default::default() })
        .await
        .expect("create the stream");
    let mut sequences = Vec::new();
    for r in recs {
        let mut headers = HeaderMap::new();
        for (k, v) in &r.headers {
            headers.insert(k.as_str(), String::from_utf8(v.clone()).expect("NATS header values are text").as_str());
        }
        let ack = js
            .publish_with_headers(format!("{name}.e"), headers, r.value.clone().unwrap_or_default().into())
            .await
            .unwrap()
            .await
            .expect("the stream acknowledges");
        sequences.push(ack.sequence);
    }
    sequences
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_rebuild_skips_and_reports_each_bad_record_and_each_missing_sequence() {
    let env = support::env();
    let js = support::nats::jetstream().await;
    let name = support::unique("IT_REBUILD_INPUT").replace('-', "_");
    let mut recs = records("ce-", b"%FF%FE");
    // A message deleted from the stream before the last one: a gap rebuild reports.
    let deleted = recs.len() - 1;
    recs.insert(deleted, Rec { partition: 1, headers: Vec::new(), value: Some(b"deleted".to_vec()), bad: Some("missing") });
    let sequences = publish(&js, &name, &recs).await;
    let stream = js.get_stream(&name).await.unwrap();
    assert!(stream.delete_message(sequences[deleted]).await.unwrap());
    let positions: Vec<(String, Value)> = sequences.iter().map(|s| (format!("{name}#{s}"), json!({"stream": name, "sequence": s}))).collect();

    assert_skips_and_rebuilds(&rebuild(&["--nats", &env.nats, "--stream", &name]), &recs, &positions);
    let first_bad = recs.iter().position(|r| r.bad.is_some()).unwrap();
    assert_strict_stops(&rebuild(&["--nats", &env.nats, "--stream", &name, "--strict"]), &positions[first_bad].0);
    js.delete_stream(&name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_rebuild_reads_every_message_through_a_server_restart() {
    // Enough that the read, in batches, lasts long after the restart is triggered.
    const MESSAGES: usize = 20_000;
    // A server of the test's own: the shared one must never restart.
    let monitor = format!("127.0.0.1:{}", support::bridge::free_port());
    let mut server = NatsServer::start(&format!("http: \"{monitor}\""));
    let url = format!("nats://{}", server.addr());
    let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
    js.create_stream(async_nats::jetstream::stream::Config { name: "EVENTS".into(), subjects: vec!["events.>".into()], ..Default::default() }).await.unwrap();
    for batch in (0..MESSAGES).collect::<Vec<_>>().chunks(500) {
        let mut acks = Vec::new();
        for i in batch {
            let mut headers = HeaderMap::new();
            for (k, v) in [
                ("ce-id", format!("e{i}")),
                ("ce-type", "dev.deltaship.object.added".into()),
                ("ce-apiversion", "v1".into()),
                ("ce-kind", "ConfigMap".into()),
                ("ce-subject", format!("ns/o-{i}")),
            ] {
                headers.insert(k, v.as_str());
            }
            acks.push(js.publish_with_headers("events.e", headers, configmap(&format!("o-{i}"), "1").into()).await.unwrap());
        }
        for ack in acks {
            ack.await.expect("the stream acknowledges");
        }
    }

    // Restart once the server has sent the reader about a quarter of the messages, so the
    // restart lands in the middle of the read.
    let connections = || -> Vec<Value> {
        let (_, body) = support::bridge::http_get(&monitor, "/connz").unwrap_or_default();
        serde_json::from_str::<Value>(&body).ok().and_then(|j| j["connections"].as_array().cloned()).unwrap_or_default()
    };
    let ours: Vec<Value> = connections().iter().map(|c| c["cid"].clone()).collect();
    let read_by_reader = || -> u64 { connections().iter().filter(|c| !ours.contains(&c["cid"])).filter_map(|c| c["out_msgs"].as_u64()).sum() };
    let mut reader = Command::new(env!("CARGO_BIN_EXE_deltaship"))
        .args(["rebuild", "--nats", &url, "--stream", "EVENTS"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_by_reader() < (MESSAGES / 4) as u64 {
        assert!(reader.try_wait().unwrap().is_none(), "rebuild ended before the restart");
        assert!(Instant::now() < deadline, "rebuild read too little within 30 s: {:?}", connections());
        std::thread::sleep(Duration::from_millis(10));
    }
    let before_restart = read_by_reader();
    server.restart();
    let out =
        tokio::task::spawn_blocking(move || support::bridge::output_within(reader, Duration::from_secs(120), "rebuild through the restart")).await.unwrap();
    // The restarted server's closed connections: the reader's, once it has ended.
    let (_, closed) = support::bridge::http_get(&monitor, "/connz?state=closed").unwrap_or_default();
    let closed: Value = serde_json::from_str(&closed).unwrap_or_default();
    let read_after_restart: u64 = closed["connections"].as_array().into_iter().flatten().filter_map(|c| c["out_msgs"].as_u64()).sum();

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &doc["summary"];
    assert_eq!(doc["skipped"], json!([]), "{stderr}");
    assert_eq!(summary["events"], MESSAGES, "{summary}");
    assert_eq!(doc["resources"]["v1/ConfigMap"].as_object().unwrap().len(), MESSAGES, "{summary}");
    // The restart landed in the middle of the read: some was read before it, the rest after.
    assert!(before_restart < MESSAGES as u64 && read_after_restart > 0, "read {before_restart} before the restart, {read_after_restart} after: {summary}");
}

/// `rebuild --follow --nats` on a stream that is deleted, or deleted and created again,
/// while it follows: exit 1 within seconds naming the stream and the fix, the state file
/// keeping what was read, never a follow that waits on without a word.
#[tokio::test(flavor = "multi_thread")]
async fn nats_follow_stops_naming_the_stream_when_it_is_deleted() {
    let env = support::env();
    let js = support::nats::jetstream().await;
    let dir = std::env::temp_dir().join(support::unique("follow-gone"));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, recreate) in [false, true].into_iter().enumerate() {
        let name = support::unique("IT_FOLLOW_GONE").replace('-', "_");
        publish(&js, &name, &records("ce-", b"%FF%FE")).await;
        let out = dir.join(format!("state-{i}.json"));
        let follower = Command::new(env!("CARGO_BIN_EXE_deltaship"))
            .args(["rebuild", "--nats", &env.nats, "--stream", &name, "--follow", "--out"])
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let state = || -> Option<Value> {
            let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).ok()?).ok()?;
            let objects = doc["resources"]["v1/ConfigMap"].as_object()?.iter().map(|(k, o)| (k.clone(), o["metadata"]["resourceVersion"].clone()));
            Some(Value::Object(objects.collect()))
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while state() != Some(good_state()) {
            assert!(Instant::now() < deadline, "the state file never showed the stream's state: {:?}", state());
            std::thread::sleep(Duration::from_millis(100));
        }
        js.delete_stream(&name).await.unwrap();
        if recreate {
            js.create_stream(async_nats::jetstream::stream::Config { name: name.clone(), subjects: vec![format!("{name}.>")], ..Default::default() })
                .await
                .unwrap();
        }
        let deleted = Instant::now();
        let ended =
            tokio::task::spawn_blocking(move || support::bridge::output_within(follower, Duration::from_secs(30), "rebuild --follow on a deleted stream"))
                .await
                .unwrap();
        let stderr = String::from_utf8_lossy(&ended.stderr);
        assert_eq!(ended.status.code(), Some(1), "{stderr}");
        assert!(deleted.elapsed() < Duration::from_secs(15), "stopped {:?} after the deletion: {stderr}", deleted.elapsed());
        let said = format!("error: JetStream stream {name} at {} was deleted", env.nats);
        assert!(stderr.contains(&said) && stderr.contains("fix: check that --stream names the bridge's stream"), "{recreate}: {stderr}");
        assert_eq!(state(), Some(good_state()), "the state file keeps what was read");
        if recreate {
            js.delete_stream(&name).await.unwrap();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
