//! The Kafka sink against librdkafka's mock cluster (three brokers in this process, no real
//! broker): broker errors are injected on Produce requests to see which of them deltaship's
//! producer settings (idempotence, acks=all, message.timeout.ms=0) ride out and which reach
//! the dispatcher, classified as `SendError` (src/sink/kafka/error.rs `classify`).

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use deltaship::config::KafkaConfig;
use deltaship::event::{Envelope, EnvelopeKind};
use deltaship::model::{ChangeType, MarkerPhase};
use deltaship::sink::{ErrorKind, KafkaSink, SendError};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

const TOPIC: &str = "deltaship.mock.core.configmaps";
const PARTITIONS: i32 = 3;

type Mock = MockCluster<'static, DefaultProducerContext>;

fn mock() -> Mock {
    let mock = MockCluster::new(3).expect("a mock cluster");
    mock.create_topic(TOPIC, PARTITIONS, 1).expect("create the mock topic");
    mock
}

/// The sink exactly as deltaship configures it; only the brokers differ. Deserialized so
/// that every other field takes its real default.
fn sink(mock: &Mock) -> KafkaSink {
    let cfg: KafkaConfig = serde_json::from_value(json!({"brokers": mock.bootstrap_servers()})).expect("a KafkaConfig");
    KafkaSink::new(&cfg).expect("a Kafka sink")
}

fn envelope(key: &str, id: &str, kind: EnvelopeKind) -> Envelope {
    support::envelope::configmap_event("mock", TOPIC, key, id, kind)
}

fn added(key: &str, id: &str) -> Envelope {
    envelope(key, id, EnvelopeKind::Object(ChangeType::Added))
}

/// Every record of the topic: (partition, key, ce_id header), in partition order.
fn read_all(mock: &Mock, want: usize) -> Vec<(i32, String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "kafka-mock-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer of the mock");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < want {
        assert!(Instant::now() < deadline, "only {} of {want} records arrived: {out:?}", out.len());
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            let id = m
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "ce_id").and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned()))
                .unwrap_or_default();
            out.push((m.partition(), String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(), id));
        }
    }
    out
}

/// Sends with a deadline: librdkafka never gives a record up (message.timeout.ms=0), so a
/// send that cannot succeed would otherwise hang the test instead of failing it.
async fn send(sink: &KafkaSink, env: &Envelope) -> Result<(), SendError> {
    tokio::time::timeout(Duration::from_secs(30), sink.send(env)).await.expect("send resolved within 30 s").map(|_| ())
}

/// Leadership changes and broker timeouts are the daily weather of a Kafka cluster: the
/// idempotent producer retries them itself (each costs one retry.backoff.ms, about 100 ms,
/// while the partition drains), so the dispatcher never sees them, and the retries reorder
/// nothing within a partition, even with several records of one key in flight at once
/// (more than deltaship ever has: it sends one per key at a time).
#[tokio::test]
async fn not_leader_and_request_timeouts_on_produce_are_retried_without_loss_or_reordering() {
    let mock = mock();
    let sink = sink(&mock);
    // Warm up: metadata and the producer id, so the injected errors hit Produce requests
    // carrying the records under test.
    send(&sink, &added("warm", "warm-0")).await.expect("the warm-up record is delivered");
    use RDKafkaRespErr::*;
    let (not_leader, timed_out) = (RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);

    // One record alone takes all four errors in turn: the send resolves only after four
    // retries. The lower bound proves the errors really hit (without them: a few ms);
    // with `retries = 0` and no idempotence the send fails instead (checked by hand).
    mock.request_errors(RDKafkaApiKey::Produce, &[not_leader, timed_out, not_leader, timed_out]);
    let started = Instant::now();
    send(&sink, &added("ns/alone", "alone-1")).await.expect("delivered through four retryable errors");
    let alone = started.elapsed();
    assert!(alone >= Duration::from_millis(200), "four retries take four backoffs (~100 ms each), took {alone:?}: were the errors injected?");

    mock.request_errors(RDKafkaApiKey::Produce, &[not_leader, timed_out, not_leader, timed_out, not_leader, timed_out]);
    let keys = ["ns/a", "ns/b", "ns/c", "ns/d"];
    let envs: Vec<Envelope> = (0..10).flat_map(|i| keys.iter().map(move |k| added(k, &format!("{k}#{i}")))).collect();
    // One wave of four records every 20 ms (more than linger.ms = 5), so that records keep
    // arriving while earlier ones are being retried. (In this mock even a non-idempotent
    // producer kept the order: librdkafka 2.12 holds a partition during its retry backoff
    // and merges newer records behind the retried ones. The check is on the outcome.)
    let started = Instant::now();
    let mut sends = Vec::new();
    for wave in envs.chunks(keys.len()) {
        for e in wave {
            let (sink, e) = (sink.clone(), e.clone());
            sends.push(tokio::spawn(async move { (e.key().to_string(), send(&sink, &e).await) }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in sends {
        let (key, r) = s.await.expect("the send task");
        assert!(r.is_ok(), "{key} failed through retryable broker errors: {r:?}");
    }
    let took = started.elapsed();
    let records = read_all(&mock, envs.len() + 2);
    let mut by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (_, key, id) in &records {
        by_key.entry(key.as_str()).or_default().push(id.as_str());
    }
    for k in keys {
        let want: Vec<String> = (0..10).map(|i| format!("{k}#{i}")).collect();
        assert_eq!(by_key[k], want.iter().map(String::as_str).collect::<Vec<_>>(), "{k}: each record once, in send order");
    }
    eprintln!("four injected Produce errors on one record ridden out in {alone:?}; six more under 40 records in {took:?}");
}

/// A record the broker refuses as too large reaches the dispatcher as `TooLarge`, which
/// applies `delivery.oversize` (ship a reference, skip, or stop) instead of retrying forever.
#[tokio::test]
async fn a_msg_size_too_large_refusal_surfaces_as_too_large() {
    let mock = mock();
    let sink = sink(&mock);
    send(&sink, &added("warm", "warm-0")).await.expect("the warm-up record is delivered");
    mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE]);
    let result = send(&sink, &added("ns/big", "big-1")).await;
    assert!(matches!(result, Err(SendError::TooLarge { .. })), "got {result:?}");
    // The producer stays usable for the next event (the truncated reference, say).
    send(&sink, &added("ns/big", "big-1-ref")).await.expect("the next record after a refusal is delivered");
}

/// An authorization refusal cannot be cured by retrying: the dispatcher must stop the
/// bridge with the cause (`SinkFatal`, kind "authorization"), not spin on it.
#[tokio::test]
async fn a_topic_authorization_failure_surfaces_as_fatal_authorization() {
    let mock = mock();
    let sink = sink(&mock);
    send(&sink, &added("warm", "warm-0")).await.expect("the warm-up record is delivered");
    mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED]);
    let result = send(&sink, &added("ns/a", "a-1")).await;
    match result {
        Err(SendError::Fatal { kind, source }) => assert_eq!(kind, ErrorKind::Authorization, "{source}"),
        other => panic!("expected a fatal authorization error, got {other:?}"),
    }
}

/// A sync marker must reach every partition, so that a consumer of any one partition sees
/// the sync boundaries in order with that partition's objects.
#[tokio::test]
async fn a_marker_goes_to_every_partition_of_the_topic() {
    let mock = mock();
    let sink = sink(&mock);
    let marker = envelope("/deltaship/sync/configmaps", "marker-1", EnvelopeKind::Marker(MarkerPhase::Completed));
    send(&sink, &marker).await.expect("the marker is delivered");
    let records = read_all(&mock, PARTITIONS as usize);
    let partitions: HashSet<i32> = records.iter().map(|(p, _, _)| *p).collect();
    assert_eq!(partitions, (0..PARTITIONS).collect::<HashSet<_>>(), "{records:?}");
    assert!(records.iter().all(|(_, k, id)| k == "/deltaship/sync/configmaps" && id == "marker-1"), "{records:?}");
}

/// librdkafka holds a record up to `linger.ms` for more records to batch with it. Behind a
/// barrier nothing more comes: a marker goes at once, and so do the records in flight when a
/// barrier goes up (the dispatcher calls `expedite`). linger.ms is 5 s here, so that waiting
/// it out cannot pass for going at once.
#[tokio::test]
async fn a_marker_and_expedited_records_do_not_wait_out_the_linger() {
    let mock = mock();
    let cfg: KafkaConfig = serde_json::from_value(json!({"brokers": mock.bootstrap_servers(), "librdkafka": {"linger.ms": "5000"}})).expect("a KafkaConfig");
    let sink = KafkaSink::new(&cfg).expect("a Kafka sink");
    let within = Duration::from_millis(2500);

    let started = Instant::now();
    let marker = envelope("/deltaship/sync/configmaps", "marker-1", EnvelopeKind::Marker(MarkerPhase::Started));
    send(&sink, &marker).await.expect("the marker is delivered");
    assert!(started.elapsed() < within, "the marker took {:?}", started.elapsed());

    let started = Instant::now();
    let sending = tokio::spawn({
        let sink = sink.clone();
        async move { send(&sink, &added("ns/a", "a1")).await }
    });
    // The record is in librdkafka's queue once the send has run up to its wait.
    tokio::time::sleep(Duration::from_millis(100)).await;
    sink.expedite();
    sending.await.expect("the send ran").expect("the record is delivered");
    assert!(started.elapsed() < within, "the expedited record took {:?}", started.elapsed());
}

/// librdkafka's idempotent producer takes the success of a batch as proof that an earlier
/// batch of the same partition, which failed and waits to be retried, was written after
/// all, and reports its records delivered without an offset (an "implicit ack"). A broker
/// with no state for the producer on that partition accepts the later batch without the
/// earlier one: a Kafka broker just restarted does, and so does this mock, always. Those
/// records were never written. The sink reports them `Unconfirmed` (retryable), so the
/// dispatcher sends them again instead of counting them delivered.
#[tokio::test]
async fn a_record_acknowledged_only_by_a_later_batch_is_unconfirmed_and_sent_again() {
    let mock = mock();
    let sink = sink(&mock);
    // Warm up the key's partition: its leader's connection and the producer id.
    send(&sink, &added("ns/a", "warm-0")).await.expect("the warm-up record is delivered");
    // Answers come late, so that several batches of one partition are in flight when the
    // first one fails.
    for broker in 1..=3 {
        mock.broker_round_trip_time(broker, Duration::from_millis(300)).expect("a round trip time");
    }
    // A broker loading its partitions after a restart answers this. One batch per record
    // (more than linger.ms apart), all of one key: one partition.
    mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART]);
    let mut sends = Vec::new();
    for i in 0..5 {
        let (sink, e) = (sink.clone(), added("ns/a", &format!("a#{i}")));
        sends.push(tokio::spawn(async move { (e.attributes.id.clone(), send(&sink, &e).await) }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut delivered, mut unconfirmed) = (Vec::new(), Vec::new());
    for s in sends {
        match s.await.expect("the send task") {
            (id, Ok(())) => delivered.push(id),
            (id, Err(SendError::Retryable { kind: ErrorKind::Unconfirmed, .. })) => unconfirmed.push(id),
            (id, Err(e)) => panic!("{id}: {e:?}"),
        }
    }
    assert!(
        !unconfirmed.is_empty(),
        "none reported unconfirmed: either no record was acknowledged implicitly, or one was and counts as delivered without being written; delivered: {delivered:?}"
    );
    for broker in 1..=3 {
        mock.broker_round_trip_time(broker, Duration::ZERO).expect("a round trip time");
    }
    // What the dispatcher does with them: send them again.
    for id in &unconfirmed {
        send(&sink, &added("ns/a", id)).await.expect("sent again");
    }
    let records = read_all(&mock, 1 + delivered.len() + unconfirmed.len());
    let ids: Vec<&str> = records.iter().filter(|(_, k, _)| k == "ns/a").map(|(_, _, id)| id.as_str()).collect();
    for id in delivered.iter().chain(&unconfirmed) {
        assert_eq!(ids.iter().filter(|i| *i == id).count(), 1, "{id} written once: {ids:?} (unconfirmed: {unconfirmed:?})");
    }
}
