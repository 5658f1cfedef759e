//! Kafka helpers: read every record of a topic with partition, key, headers and value;
//! write a recorded stream to a topic, or records read before to their topic again.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub value: Option<Vec<u8>>,
}

impl Record {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or_else(|| panic!("record has no {name} header: {self:?}"))
    }

    pub fn event_type(&self) -> &str {
        self.header("ce_type")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(self.value.as_deref().expect("a value")).expect("a JSON value")
    }
}

/// A record as read, owned.
fn record(m: &rdkafka::message::BorrowedMessage<'_>) -> Record {
    Record {
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
        headers: m
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())).collect())
            .unwrap_or_default(),
        value: m.payload().map(<[u8]>::to_vec),
    }
}

/// The records in `topic`: the sum of its partitions' high watermarks (0 when it does not
/// exist).
pub fn total(brokers: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers).set("group.id", super::unique("count")).create().unwrap();
    let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) else { return 0 };
    let partitions = md.topics().first().map(|t| t.partitions().len()).unwrap_or(0) as i32;
    (0..partitions).map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).map(|(_, high)| high).unwrap_or(0)).sum()
}

/// Reads `topic` from the beginning of every partition until `done` accepts what was read
/// (then returns it) or `timeout` passes (then panics showing what was read).
pub fn read_until(brokers: &str, topic: &str, timeout: Duration, done: impl Fn(&[Record]) -> bool) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", super::unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("a Kafka consumer");
    let deadline = Instant::now() + timeout;
    let partitions = loop {
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)).expect("topic metadata");
        let n = md.topics().first().map(|t| t.partitions().len()).unwrap_or(0);
        if n > 0 && md.topics()[0].error().is_none() {
            break n as i32;
        }
        assert!(Instant::now() < deadline, "topic {topic} never appeared");
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign partitions");
    let mut records = Vec::new();
    loop {
        if done(&records) {
            return records;
        }
        if Instant::now() >= deadline {
            let types: Vec<_> = records.iter().map(|r| format!("{}:{:?}", r.headers.get("ce_type").cloned().unwrap_or_default(), r.key)).collect();
            panic!("timed out reading {topic}; got {} records: {types:#?}", records.len());
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => records.push(record(&m)),
            Some(Err(e)) => panic!("reading {topic} failed: {e}"),
            None => {}
        }
    }
}

/// Every committed record of `topic`, read to the end each partition had when reading
/// started: by the consumer's position, since the markers of transactions take offsets
/// that are never delivered. Panics after `timeout`.
pub fn read_to_end(brokers: &str, topic: &str, timeout: Duration) -> Vec<Record> {
    use rdkafka::error::{KafkaError, KafkaResult};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", super::unique("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a Kafka consumer");
    // Retried until `timeout`: right after a broker restart its partitions have no leader
    // for a while (NotLeaderForPartition).
    let deadline = Instant::now() + timeout;
    let retried = |what: &str, ask: &dyn Fn() -> KafkaResult<i64>| loop {
        match ask() {
            Ok(v) => break v,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what} of {topic} still failing after {timeout:?}: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    let partitions = retried("the metadata", &|| {
        consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).map(|md| md.topics().first().map_or(0, |t| t.partitions().len()) as i64)
    }) as i32;
    let ends: Vec<i64> =
        (0..partitions).map(|p| retried("the watermarks", &|| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).map(|w| w.1))).collect();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign partitions");
    let mut records = Vec::new();
    let at_end = |consumer: &BaseConsumer| {
        let positions = consumer.position().expect("positions");
        (0..partitions).all(|p| match positions.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o >= ends[p as usize],
            _ => ends[p as usize] == 0,
        })
    };
    loop {
        assert!(Instant::now() < deadline, "{topic} not read to its end {ends:?} within {timeout:?}; read {} records", records.len());
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => records.push(record(&m)),
            Some(Err(KafkaError::PartitionEOF(_))) | None if at_end(&consumer) => return records,
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => panic!("reading {topic} failed: {e}"),
        }
    }
}

/// Writes a recorded stream (a test vector's kafka.jsonl, docs/reference/event-contract.md)
/// to a new topic of 3 partitions at `brokers`: each line's record to its partition, with its
/// key, headers and value, in the file's order. Returns the topic.
pub async fn write_recorded(brokers: &str, file: &Path) -> String {
    let topic = super::unique("recorded");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    let created = admin.create_topics(&[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).set("enable.idempotence", "true").create().unwrap();
    for line in std::fs::read_to_string(file).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let mut headers = OwnedHeaders::new();
        for h in r["headers"].as_array().unwrap() {
            headers = headers.insert(Header { key: h[0].as_str().unwrap(), value: h[1].as_str() });
        }
        let mut record = BaseRecord::<str, str>::to(&topic).partition(r["partition"].as_i64().unwrap() as i32).headers(headers);
        if let Some(key) = r["key"].as_str() {
            record = record.key(key);
        }
        if let Some(value) = r["value"].as_str() {
            record = record.payload(value);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    topic
}

/// Writes `records` (read from `topic` before) to `topic` again, each to its partition with
/// its key, headers and value: a topic's older records made its newest again.
pub fn write_again(brokers: &str, topic: &str, records: &[Record]) {
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).set("enable.idempotence", "true").create().unwrap();
    for r in records {
        let headers = r.headers.iter().fold(OwnedHeaders::new(), |h, (key, value)| h.insert(Header { key, value: Some(value.as_str()) }));
        let mut record = BaseRecord::<str, [u8]>::to(topic).partition(r.partition).headers(headers);
        if let Some(key) = &r.key {
            record = record.key(key.as_str());
        }
        if let Some(value) = &r.value {
            record = record.payload(value.as_slice());
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}
