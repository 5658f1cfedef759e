//! Each consumer library keeps its place: its command, given `--snapshot`, is killed (SIGKILL)
//! part way through a topic and a stream, more events come, and the restart from the snapshot
//! ends with every event applied exactly once: each object's array of patch numbers whole and
//! in order (a patch applied twice, or skipped, would show), the re-sent events skipped as
//! repeats, and every partition's position at its end. A position before the records the
//! broker still holds is an error that says so.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Value, json};

use super::{Consumer, go_rebuild, java_rebuild, python_rebuild};
use crate::support;

/// Objects, one partition in three each; patches per object in each of the two phases.
const OBJECTS: usize = 6;
const PATCHES: usize = 40;
const PARTITIONS: i32 = 3;

/// One event: (object, its id, whether it is the object's whole body, the body).
struct Event {
    object: usize,
    id: String,
    whole: bool,
    body: String,
}

fn patch(run: &str, object: usize, n: usize) -> Event {
    Event { object, id: format!("{run}-{object}-{n}"), whole: false, body: json!([{"op": "add", "path": "/data/seq/-", "value": n}]).to_string() }
}

/// Phase 1: each object added, then its first PATCHES patches, the objects interleaved. Phase
/// 2: each object's last event of phase 1 sent again (same id, same content, as a re-send
/// through a broker restart), then its next PATCHES patches.
fn phase(run: &str, second: bool) -> Vec<Event> {
    let mut events = Vec::new();
    for object in 0..OBJECTS {
        if second {
            events.push(patch(run, object, PATCHES - 1));
        } else {
            let body = json!({"metadata": {"name": format!("o{object}"), "namespace": "ns", "uid": format!("{run}-{object}")}, "data": {"seq": []}});
            events.push(Event { object, id: format!("{run}-{object}-added"), whole: true, body: body.to_string() });
        }
    }
    let from = if second { PATCHES } else { 0 };
    for n in from..from + PATCHES {
        events.extend((0..OBJECTS).map(|object| patch(run, object, n)));
    }
    events
}

/// (name, value) of the attributes of `e`, without the binding's prefix.
fn attributes(e: &Event) -> Vec<(&'static str, String)> {
    let (kind, content) = if e.whole { ("added", "application/json") } else { ("updated", "application/json-patch+json") };
    vec![
        ("id", e.id.clone()),
        ("type", format!("dev.deltaship.object.{kind}")),
        ("subject", format!("ns/o{}", e.object)),
        ("apiversion", "v1".into()),
        ("kind", "ConfigMap".into()),
        ("cluster", "c1".into()),
        ("datacontenttype", content.into()),
    ]
}

fn write_kafka(producer: &BaseProducer, topic: &str, events: &[Event]) {
    for e in events {
        let mut headers = OwnedHeaders::new();
        for (name, value) in attributes(e) {
            let key = if name == "datacontenttype" { "content-type".to_string() } else { format!("ce_{name}") };
            headers = headers.insert(Header { key: &key, value: Some(&value) });
        }
        let key = format!("ns/o{}", e.object);
        let record = BaseRecord::to(topic).partition(e.object as i32 % PARTITIONS).key(&key).payload(&e.body).headers(headers);
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

async fn write_jetstream(js: &async_nats::jetstream::Context, subject: &str, events: &[Event]) {
    for e in events {
        let mut headers = HeaderMap::new();
        for (name, value) in attributes(e) {
            headers.insert(format!("ce-{name}").as_str(), value.as_str());
        }
        js.publish_with_headers(subject.to_string(), headers, e.body.clone().into()).await.unwrap().await.unwrap();
    }
}

/// The positions a snapshot file holds: source to partition to next offset or sequence.
fn positions(snapshot: &Value) -> BTreeMap<String, BTreeMap<String, i64>> {
    serde_json::from_value(snapshot["positions"].clone()).unwrap_or_else(|e| panic!("no positions ({e}): {snapshot}"))
}

fn read_json(file: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap_or_else(|e| panic!("{}: not JSON: {e}", file.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_consumer_killed_mid_stream_resumes_from_its_snapshot_applying_each_event_once() {
    let env = support::env();
    let run = support::unique("resume").replace('-', "");
    let topic = format!("{run}.configmaps");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &env.kafka).create().unwrap();
    let created = admin.create_topics(&[NewTopic::new(&topic, PARTITIONS, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &env.kafka).set("enable.idempotence", "true").create().unwrap();
    let js = support::nats::jetstream().await;
    let stream = format!("RESUME_{run}");
    js.create_stream(async_nats::jetstream::stream::Config { name: stream.clone(), subjects: vec![format!("{run}.>")], ..Default::default() }).await.unwrap();
    let subject = format!("{run}.configmaps");

    let first = phase(&run, false);
    write_kafka(&producer, &topic, &first);
    write_jetstream(&js, &subject, &first).await;

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(support::unique("snapshots"));
    std::fs::create_dir_all(&dir).unwrap();
    let commands: [(&str, Consumer, &str); 3] = [("Python", python_rebuild, "--"), ("Go", go_rebuild, "-"), ("Java", java_rebuild, "--")];
    let sources =
        [("Kafka", [("kafka", env.kafka.clone()), ("topic", topic.clone())]), ("JetStream", [("nats", env.nats.clone()), ("stream", stream.clone())])];
    let command = |consumer: Consumer, dash: &str, source: &[(&str, String); 2], snapshot: &Path| {
        let mut cmd = consumer();
        for (name, value) in source.iter().cloned().chain([("cluster", "c1".to_string()), ("snapshot", snapshot.display().to_string())]) {
            cmd.arg(format!("{dash}{name}")).arg(value);
        }
        cmd
    };

    // Killed part way: saving after every record, it is killed once its first snapshot is there.
    for (language, consumer, dash) in commands {
        for (broker, source) in &sources {
            let snapshot = dir.join(format!("{language}-{broker}.json"));
            let started = Instant::now();
            let mut cmd = command(consumer, dash, source, &snapshot);
            let mut child = cmd.args([format!("{dash}save-every"), "1".into()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
            while !snapshot.exists() {
                assert!(child.try_wait().unwrap().is_none(), "{language} on {broker} ended before it saved a snapshot");
                assert!(started.elapsed() < Duration::from_secs(60), "{language} on {broker} saved no snapshot within 60 s");
                std::thread::sleep(Duration::from_millis(1));
            }
            child.kill().unwrap();
            child.wait().unwrap();
            let read: i64 = positions(&read_json(&snapshot)).values().flat_map(|parts| parts.values()).sum();
            let starts = if *broker == "Kafka" { 0 } else { 1 };
            assert!(
                read > starts && read < first.len() as i64 + starts,
                "{language} on {broker}: killed after {read} of {} records: not part way",
                first.len()
            );
            eprintln!("{language} on {broker}: killed at {read} of {} records after {:?}", first.len(), started.elapsed());
        }
    }

    let second = phase(&run, true);
    write_kafka(&producer, &topic, &second);
    write_jetstream(&js, &subject, &second).await;
    let per_partition = |p: i32| (first.len() / OBJECTS * (0..OBJECTS).filter(|o| *o as i32 % PARTITIONS == p).count() * 2) as i64;
    let want_kafka: BTreeMap<String, i64> = (0..PARTITIONS).map(|p| (p.to_string(), per_partition(p))).collect();
    let want_jetstream = BTreeMap::from([("0".to_string(), (2 * first.len() + 1) as i64)]);
    let seq: Vec<usize> = (0..2 * PATCHES).collect();

    // Restarted from the snapshot, to the end.
    for (language, consumer, dash) in commands {
        for (broker, source) in &sources {
            let snapshot = dir.join(format!("{language}-{broker}.json"));
            let started = Instant::now();
            let state: Value =
                serde_json::from_str(&support::consumers::run(command(consumer, dash, source, &snapshot), &format!("{language} on {broker}, resumed")))
                    .unwrap();
            eprintln!("{language} on {broker}: resumed to the end in {:?}", started.elapsed());
            for object in 0..OBJECTS {
                let got = &state["v1/ConfigMap"][format!("ns/o{object}")]["data"]["seq"];
                assert_eq!(got, &json!(seq), "{language} on {broker}: object {object}: each patch applied once, none skipped");
            }
            let saved = read_json(&snapshot);
            assert_eq!(saved["duplicates"], OBJECTS, "{language} on {broker}: the re-sent events, and nothing else, skipped as repeats");
            assert_eq!(saved["skipped"], json!({}), "{language} on {broker}");
            let (name, want) = if *broker == "Kafka" { (&topic, &want_kafka) } else { (&stream, &want_jetstream) };
            assert_eq!(&positions(&saved)[name], want, "{language} on {broker}: every partition's position at its end");
        }
    }

    // Records deleted before they were read (retention): a position before the partition's
    // beginning is an error that says so, not a silent skip.
    let mut deleted = TopicPartitionList::new();
    deleted.add_partition_offset(&topic, 0, Offset::Offset(5)).unwrap();
    admin.delete_records(&deleted, &AdminOptions::new()).await.unwrap();
    for (language, consumer, dash) in commands {
        let mut saved = read_json(&dir.join(format!("{language}-Kafka.json")));
        saved["positions"][&topic]["0"] = json!(1);
        let behind = dir.join(format!("{language}-behind.json"));
        std::fs::write(&behind, saved.to_string()).unwrap();
        let out = command(consumer, dash, &sources[0].1, &behind).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{language}: {said}");
        assert!(said.contains(&format!("the position of {topic}/0 is offset 1, but the partition begins at 5")), "{language}: {said}");
    }
    js.delete_stream(&stream).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
