//! The checkpoint stores against the real Kafka and NATS servers: the latest value of every
//! key under a prefix, across reopening and beside other clusters' writers; 100k records
//! written and read back; a missing or misshapen Kafka topic refused with the fix.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use deltaship::checkpoint::{Records, Store};
use deltaship::config::{KafkaConfig, ResumeConfig, SinkConfig};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::config::{kafka, nats};
use support::unique;

fn records(items: &[(&str, Option<&str>)]) -> Records {
    items.iter().map(|(k, v)| (k.to_string(), v.map(|v| v.as_bytes().to_vec()))).collect()
}

fn values(items: &[(&str, &str)]) -> HashMap<String, Vec<u8>> {
    items.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect()
}

fn resume(kafka_topic: &str, nats_bucket: &str) -> ResumeConfig {
    ResumeConfig { kafka_topic: kafka_topic.into(), nats_bucket: nats_bucket.into(), ..ResumeConfig::default() }
}

async fn open(sink: &SinkConfig, resume: &ResumeConfig) -> Store {
    match Store::open(sink, resume, "all").await {
        Ok(Some(store)) => store,
        Ok(None) => panic!("a Kafka or NATS route keeps a checkpoint"),
        Err(e) => panic!("the store does not open: {e}"),
    }
}

/// Writes, overwrites and deletes keys of two routes (and of a route whose name extends
/// the first's), then loads each prefix, from this store and from a reopened one.
async fn latest_values_by_prefix_survive_reopening(sink: &SinkConfig, resume: &ResumeConfig) {
    let store = open(sink, resume).await;
    let first = [("c.a.cm.ns.o.x", Some("1")), ("c.a.cm.ns.o.y", Some("2")), ("c.a.cm.ns.o.z", Some("3")), ("c.a.cm.ns.w", Some("w1"))];
    store.write(&records(&first)).await.expect("first write");
    store.write(&records(&[("c.b.cm.ns.o.x", Some("other route")), ("c.ab.cm.ns.o.x", Some("longer name"))])).await.expect("other routes");
    let second = [("c.a.cm.ns.o.y", None), ("c.a.cm.ns.o.z", Some("4")), ("c.a.cm.ns.o.never", None), ("c.a.cm.ns.w", Some("w2"))];
    store.write(&records(&second)).await.expect("overwrites and deletes");
    let a = values(&[("c.a.cm.ns.o.x", "1"), ("c.a.cm.ns.o.z", "4"), ("c.a.cm.ns.w", "w2")]);
    assert_eq!(store.load("c.a").await.expect("load c.a"), a);
    assert_eq!(store.load("c.b").await.expect("load c.b"), values(&[("c.b.cm.ns.o.x", "other route")]));
    assert_eq!(store.load("c.none").await.expect("load an empty prefix"), HashMap::new());
    drop(store);
    let reopened = open(sink, resume).await;
    assert_eq!(reopened.load("c.a").await.expect("load c.a after reopening"), a);
    reopened.write(&records(&[("c.a.cm.ns.o.x", None)])).await.expect("a delete after reopening");
    assert_eq!(reopened.load("c.a").await.unwrap().len(), 2);
}

/// Writes 100k records of about 100 bytes in one write, then loads them whole; prints both
/// times (a figure, not a bound: BENCHMARKS.md records the read time of a release build).
async fn a_hundred_thousand_records_load_whole(sink: &SinkConfig, resume: &ResumeConfig, label: &str) {
    let store = open(sink, resume).await;
    let value = |i: usize| format!(r#"{{"uid":"{:036}","rv":"{i}","fp":"{:032x}"}}"#, i, i);
    let all: Records = (0..100_000).map(|i| (format!("c.big.configmaps.ns.o.ns/object-{i}"), Some(value(i).into_bytes()))).collect();
    let started = Instant::now();
    store.write(&all).await.expect("100k records written");
    let wrote = started.elapsed();
    store.write(&records(&[("c.other.configmaps.ns.w", Some("another route"))])).await.unwrap();
    let started = Instant::now();
    let loaded = store.load("c.big").await.expect("100k records loaded");
    let load = started.elapsed();
    println!("{label}: 100,000 records written in {wrote:?}, loaded in {load:?}");
    assert_eq!(loaded.len(), 100_000);
    assert_eq!(loaded["c.big.configmaps.ns.o.ns/object-99999"], value(99_999).into_bytes());
}

/// The store is shared by every bridge of the brokers (one topic or bucket): a prefix loads
/// whole, and only its own keys, while another cluster's bridge writes and deletes beside it,
/// after 5k keys of yet another cluster were written and deleted.
async fn a_prefix_loads_whole_beside_other_writers(sink: &SinkConfig, resume: &ResumeConfig) {
    let store = open(sink, resume).await;
    let gone: Records = (0..5_000).map(|i| (format!("old.r.configmaps.=.o.ns/o-{i}"), Some(b"{}".to_vec()))).collect();
    store.write(&gone).await.expect("keys of another cluster");
    store.write(&gone.iter().map(|(k, _)| (k.clone(), None)).collect()).await.expect("deleted again");
    let other = open(sink, resume).await;
    let noise = tokio::spawn(async move {
        // Paced, so that a Kafka read (from the topic's start) stays short on a busy machine.
        for n in 0u32.. {
            let batch: Records = (0..50).map(|i| (format!("busy.r.configmaps.=.o.ns/o-{i}"), (n % 3 != 0).then(|| n.to_string().into_bytes()))).collect();
            other.write(&batch).await.expect("the other cluster's writes");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    for round in 0..10 {
        let prefix = format!("c{round}.r");
        let mut mine: Records = (0..12).map(|i| (format!("{prefix}.configmaps.=.o.ns/cm-{i}"), Some(b"{}".to_vec()))).collect();
        mine.push((format!("{prefix}.configmaps.=.w"), Some(b"w".to_vec())));
        store.write(&mine).await.expect("this cluster's records");
        store.write(&records(&[(&format!("{prefix}.configmaps.=.o.ns/cm-0"), None)])).await.expect("a delete");
        let loaded = store.load(&prefix).await.expect("load");
        let mut keys: Vec<&String> = loaded.keys().collect();
        keys.sort();
        assert_eq!(keys.len(), 12, "round {round}: {keys:?}");
        assert!(loaded.contains_key(&format!("{prefix}.configmaps.=.w")), "round {round}: the watch record is read");
    }
    noise.abort();
}

fn kafka_sink(create: bool) -> SinkConfig {
    let mut k: KafkaConfig = kafka(&support::env().kafka, "unused.{plural}");
    if !create {
        k.create_topics = None;
    }
    SinkConfig::Kafka(Box::new(k))
}

/// The topic's partitions by metadata, without asking the broker to create it.
fn partitions(topic: &str) -> Option<usize> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", support::env().kafka).set("allow.auto.create.topics", "false").create().unwrap();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    md.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len())
}

async fn create_topic(topic: &str, partitions: i32, config: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", support::env().kafka).create().unwrap();
    let new = config.iter().fold(NewTopic::new(topic, partitions, TopicReplication::Fixed(1)), |t, (k, v)| t.set(k, v));
    let created = admin.create_topics([&new], &AdminOptions::new()).await.unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

async fn refusal(sink: &SinkConfig, resume: &ResumeConfig) -> String {
    match Store::open(sink, resume, "all").await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the store opened"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_keeps_the_latest_value_of_each_key_in_a_compacted_topic_it_creates() {
    let topic = unique("deltaship.checkpoints");
    latest_values_by_prefix_survive_reopening(&kafka_sink(true), &resume(&topic, "unused")).await;
    assert_eq!(partitions(&topic), Some(1), "created with one partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_loads_a_hundred_thousand_records_whole() {
    a_hundred_thousand_records_load_whole(&kafka_sink(true), &resume(&unique("deltaship.checkpoints"), "unused"), "Kafka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_loads_a_prefix_whole_beside_other_writers() {
    a_prefix_loads_whole_beside_other_writers(&kafka_sink(true), &resume(&unique("deltaship.checkpoints"), "unused")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_kafka_topic_without_create_topics_is_refused_with_the_fix_and_not_created() {
    let topic = unique("deltaship.checkpoints");
    let e = refusal(&kafka_sink(false), &resume(&topic, "unused")).await;
    assert!(e.starts_with(&format!("checkpoint topic {topic} cannot be used: the topic does not exist")), "{e}");
    assert!(e.contains("cleanup.policy=compact") && e.contains("resume.kafka_topic") && e.contains("resume.enabled = false"), "{e}");
    assert_eq!(partitions(&topic), None, "the broker auto-creates topics, but not this one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_topic_not_compacted_or_of_several_partitions_is_refused() {
    let plain = unique("deltaship.checkpoints");
    create_topic(&plain, 1, &[]).await;
    let e = refusal(&kafka_sink(true), &resume(&plain, "unused")).await;
    assert!(e.contains("cleanup.policy is `delete`") && e.contains("must be compacted"), "{e}");
    let wide = unique("deltaship.checkpoints");
    create_topic(&wide, 3, &[("cleanup.policy", "compact")]).await;
    let e = refusal(&kafka_sink(true), &resume(&wide, "unused")).await;
    assert!(e.contains("has 3 partitions") && e.contains("exactly one"), "{e}");
}

/// The bucket's stream, deleted once the test is done (the server is shared).
async fn drop_bucket(bucket: &str) {
    let js = support::nats::jetstream().await;
    js.delete_stream(format!("KV_{bucket}")).await.expect("delete the test bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_keeps_the_latest_value_of_each_key_in_a_bucket_it_creates() {
    let bucket = unique("checkpoints");
    let sink = SinkConfig::Nats(Box::new(nats(&support::env().nats)));
    latest_values_by_prefix_survive_reopening(&sink, &resume("unused", &bucket)).await;
    let js = support::nats::jetstream().await;
    let info = js.get_stream(format!("KV_{bucket}")).await.expect("the bucket's stream").info().await.unwrap().config.clone();
    assert_eq!(info.max_messages_per_subject, 1, "one value per key");
    drop_bucket(&bucket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_loads_a_hundred_thousand_records_whole() {
    let bucket = unique("checkpoints");
    let sink = SinkConfig::Nats(Box::new(nats(&support::env().nats)));
    a_hundred_thousand_records_load_whole(&sink, &resume("unused", &bucket), "NATS").await;
    drop_bucket(&bucket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_loads_a_prefix_whole_beside_other_writers() {
    let bucket = unique("checkpoints");
    let sink = SinkConfig::Nats(Box::new(nats(&support::env().nats)));
    a_prefix_loads_whole_beside_other_writers(&sink, &resume("unused", &bucket)).await;
    drop_bucket(&bucket).await;
}
