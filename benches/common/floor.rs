//! The floor of the live bench: librdkafka alone, given at a phase's rate the records
//! deltaship ships for the same updates (a bench ConfigMap as the API server serves it, with
//! `data.seq` set and without `metadata.managedFields`; the headers deltaship's Kafka binding
//! writes for an update, built per record by that binding), with the bridge's producer settings
//! (`broker::kafka::client_config`). No watch, no stages: what any bridge built on librdkafka
//! pays per record at that rate.
//!
//! It runs as a child process (the bench binary again, with the argument `floor-producer`),
//! so that its CPU is counted alone: one thread sleeps until each record is due, hands it to
//! librdkafka and serves the delivery reports without waiting; the rest is librdkafka's own
//! threads. The parent writes one line per phase (`<rate> <secs> <tag> <count>`); the child
//! answers `done <ms since the epoch when the phase started>` once every record is
//! acknowledged.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use deltaship::broker::kafka::{ClientRole, client_config};
use deltaship::config::{ContentMode, KafkaConfig};
use deltaship::event::{Envelope, EnvelopeKind, WatchAttributes};
use deltaship::model::{ChangeType, ObjectRef};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::util::Timeout;
use serde_json::json;

use crate::common::Kind;

/// The argument that makes the bench binary the floor's producer.
pub const ARG: &str = "floor-producer";
/// Where `data.seq` goes in the record template.
const SEQ: &str = "@SEQ@";

/// The floor's producer process.
pub struct Floor {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    started: Instant,
    dir: PathBuf,
}

impl Floor {
    /// Starts the producer for `topic`, its records `template` (JSON with `@SEQ@` where the
    /// sequence goes) keyed by `ns`/name.
    pub fn spawn(id: &str, brokers: &str, topic: &str, ns: &str, template: &str) -> Floor {
        let dir = std::env::temp_dir().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("record.json");
        std::fs::write(&path, template).unwrap();
        let started = Instant::now();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([ARG, brokers, topic, ns])
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("floor.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the floor producer: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Floor { child, stdin, lines, started, dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("floor.log")).unwrap_or_default()
    }

    fn answer(&mut self, timeout: Duration) -> String {
        self.lines.recv_timeout(timeout).unwrap_or_else(|e| panic!("the floor producer did not answer ({e}):\n{}", self.log()))
    }

    /// Seconds from the start until the producer knew the topic's partitions.
    pub fn wait_ready(&mut self) -> f64 {
        let line = self.answer(Duration::from_secs(120));
        assert_eq!(line, "ready", "the floor producer:\n{}", self.log());
        self.started.elapsed().as_secs_f64()
    }

    /// One phase: `rate * secs` records, the n-th due n/rate s after the start, `seq` =
    /// `<tag>-<n>`, keyed round-robin over `count` ConfigMaps. Per record, when it was due
    /// (ms since the epoch); how long the phase took until the last acknowledgement.
    pub fn phase(&mut self, rate: f64, secs: f64, tag: &str, count: usize) -> (Vec<Option<i64>>, Duration) {
        let started = Instant::now();
        writeln!(self.stdin, "{rate} {secs} {tag} {count}").unwrap();
        self.stdin.flush().unwrap();
        let line = self.answer(Duration::from_secs_f64(secs * 3.0 + 120.0));
        let start_ms: f64 = line.strip_prefix("done ").and_then(|ms| ms.parse().ok()).unwrap_or_else(|| panic!("the floor producer said {line:?}"));
        let planned = (rate * secs).round() as usize;
        let due = (0..planned).map(|n| Some((start_ms + n as f64 * 1000.0 / rate) as i64)).collect();
        (due, started.elapsed())
    }

    pub fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("the floor producer exited ({status}):\n{}", self.log());
        }
    }

    /// Closes its input: it flushes and exits.
    pub fn stop(self) {
        let Floor { mut child, stdin, dir, .. } = self;
        drop(stdin);
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The record template of the bench ConfigMap `object` (as the API server serves it).
pub fn template(mut object: serde_json::Value) -> String {
    object["metadata"].as_object_mut().expect("an object's metadata").remove("managedFields");
    object["data"]["seq"] = json!(SEQ);
    object.to_string()
}

/// The child: `floor-producer <brokers> <topic> <ns> <template file>`.
pub fn producer(args: &[String]) {
    let [brokers, topic, ns, template] = args else { panic!("usage: {ARG} <brokers> <topic> <ns> <template file>") };
    let template = std::fs::read_to_string(Path::new(template)).unwrap();
    let cfg: KafkaConfig = serde_json::from_value(json!({"brokers": brokers})).unwrap();
    let producer: BaseProducer = client_config(&cfg, ClientRole::Producer).unwrap().create().expect("a Kafka producer");
    producer.client().fetch_metadata(Some(topic), Timeout::After(Duration::from_secs(60))).expect("the topic's metadata");
    let update = Update::new(ns);
    println!("ready");
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let parts: Vec<&str> = line.split(' ').collect();
        let [rate, secs, tag, count] = parts[..] else { panic!("a phase is `<rate> <secs> <tag> <count>`, not {line:?}") };
        let (rate, secs, count): (f64, f64, usize) = (rate.parse().unwrap(), secs.parse().unwrap(), count.parse().unwrap());
        let start_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
        let start = Instant::now();
        for n in 0..(rate * secs).round() as usize {
            std::thread::sleep((start + Duration::from_secs_f64(n as f64 / rate)).saturating_duration_since(Instant::now()));
            let name = format!("cm-{:06}", n % count);
            let key = format!("{ns}/{name}");
            let (value, headers) = update.record(&name, &key, template.replacen(SEQ, &format!("{tag}-{n}"), 1), n);
            let mut record = BaseRecord::to(topic).key(&key).payload(&value[..]).headers(headers);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => panic!("the floor producer could not send: {e}"),
                }
            }
            producer.poll(Duration::ZERO);
        }
        producer.flush(Timeout::After(Duration::from_secs(120))).expect("every record acknowledged");
        println!("done {start_ms}");
    }
    let _ = producer.flush(Timeout::After(Duration::from_secs(30)));
}

/// What deltaship's Kafka binding ships for an update of a bench ConfigMap: the values the
/// same for a whole watch made once, by deltaship's own `WatchAttributes`.
struct Update {
    ns: String,
    watch: WatchAttributes,
    destination: Arc<str>,
}

impl Update {
    fn new(ns: &str) -> Update {
        Update { ns: ns.to_string(), watch: WatchAttributes::new("bench".into(), &Kind::ConfigMap.resource()), destination: "floor".into() }
    }

    /// The record's value and headers for the n-th update, of ConfigMap `name` (`key` =
    /// namespace/name), `value` its JSON.
    fn record(&self, name: &str, key: &str, value: String, n: usize) -> (Bytes, OwnedHeaders) {
        let kind = EnvelopeKind::Object(ChangeType::Updated);
        let id = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(key.as_bytes()) ^ n as u128);
        let mut attributes = self.watch.event(id, kind.event_type(), chrono::Utc::now(), key.to_string());
        attributes.subject = Some(key.to_string());
        attributes.object = Some(ObjectRef {
            namespace: Some(self.ns.clone()),
            name: name.to_string(),
            uid: "5f0c3a9e-2b1d-4c8e-9a7f-3e6d2c1b0a98".into(),
            resource_version: (1_000_000 + n).to_string(),
        });
        let env = Envelope::new(attributes, value.into(), self.destination.clone(), kind, self.watch.resource.clone());
        deltaship::sink::kafka::encode(&env, ContentMode::Binary)
    }
}
