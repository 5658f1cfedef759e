//! Fencing a deposed leader, against the real servers (sink::fence). Two claims of one route
//! in turn, as two replicas make them: once the second replica claimed the route, the
//! first can store nothing more, and a consumer reads exactly what each stored while it held
//! the route.
//! - Kafka: both initialise a transactional producer with the route's shared id; the first
//!   one's next record is refused (`fenced`), and a read-committed reader never sees it.
//! - NATS JetStream: each publishes its fence record; the first one's next publish is refused
//!   by the stream (its expected last sequence on the fence subject is no longer the last).
//!
//! Then the whole bridge: two replicas under churn, the leader frozen (SIGSTOP) past its
//! lease while the standby takes over, then thawed (SIGCONT): the thawed replica stops, and
//! a consumer reading the log from its start sees every change once (no repeat, no step
//! back), its state rebuilt equal to the API server's with every marker verified; on
//! JetStream, no message stored after the successor's fence record came from the old leader.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use deltaship::config::{KafkaConfig, NatsConfig};
use deltaship::event::{Envelope, EnvelopeKind};
use deltaship::model::ChangeType;
use deltaship::sink::fence::{FenceRecord, Lease, transactional_id};
use deltaship::sink::{ErrorKind, KafkaSink, NatsSink, SendError};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::json;
use support::bridge::Bridge;
use support::churn::{Churn, metric};
use support::config::{TestConfig, election, kafka, nats_stream, partitions};
use support::kube::{client, delete_namespace, namespace};
use support::log::Log;
use support::state::assert_rebuild_matches;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn lease(cluster: &str, holder: &str) -> Lease {
    Lease { cluster: cluster.into(), namespace: "ops".into(), name: "deltaship".into(), holder: holder.into() }
}

fn added(destination: &str, key: &str, id: &str) -> Envelope {
    support::envelope::configmap_event("fence", destination, key, id, EnvelopeKind::Object(ChangeType::Added))
}

async fn sent<F: Future<Output = Result<T, SendError>>, T>(what: &str, send: F) -> Result<T, SendError> {
    tokio::time::timeout(Duration::from_secs(60), send).await.unwrap_or_else(|_| panic!("{what}: no outcome within 60 s"))
}

fn assert_fenced<T: std::fmt::Debug>(what: &str, outcome: Result<T, SendError>) {
    match outcome {
        Err(e @ SendError::Fatal { kind: ErrorKind::Fenced, .. }) => eprintln!("{what}: refused as expected: {e}"),
        other => panic!("{what}: expected a fenced refusal, got {other:?}"),
    }
}

/// The `ce_id` of every committed record of `topic` (one partition), read to its end.
fn committed_ids(brokers: &str, topic: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", support::unique("fence-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a Kafka consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let (mut ids, deadline) = (Vec::new(), Instant::now() + Duration::from_secs(60));
    loop {
        assert!(Instant::now() < deadline, "{topic} not read to its end within 60 s; read {ids:?}");
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => ids.push(
                m.headers().and_then(|h| h.iter().find(|h| h.key == "ce_id")?.value.map(|v| String::from_utf8_lossy(v).into_owned())).unwrap_or_default(),
            ),
            Some(Err(KafkaError::PartitionEOF(_))) => return ids,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kafka_producer_can_store_nothing_once_a_successor_claimed_its_route() {
    let env = support::env();
    let topic = support::unique("it-fence");
    let cfg: KafkaConfig = serde_json::from_value(json!({"brokers": env.kafka, "create_topics": {"partitions": 1}})).unwrap();
    deltaship::sink::kafka::create_topics(&cfg, std::slice::from_ref(&topic)).await.expect("the topic");
    let cluster = support::unique("fence");
    let id = transactional_id(&lease(&cluster, "a"), "default");

    let first = KafkaSink::new(&cfg).unwrap();
    sent("the first claim", first.fence(&id, "default")).await.expect("the first replica claims the route");
    sent("the first leader's record", first.send(&added(&topic, "ns/a", "a-1"))).await.expect("delivered while it leads");

    let second = KafkaSink::new(&cfg).unwrap();
    sent("the second claim", second.fence(&id, "default")).await.expect("the successor claims the route");
    assert_fenced("the deposed leader's record", sent("the deposed leader's record", first.send(&added(&topic, "ns/b", "a-2"))).await);
    sent("the successor's record", second.send(&added(&topic, "ns/c", "b-1"))).await.expect("delivered by the successor");
    assert_fenced("the deposed leader's next record", sent("the deposed leader's next record", first.send(&added(&topic, "ns/d", "a-3"))).await);

    let topic_read = topic.clone();
    let ids = tokio::task::spawn_blocking(move || committed_ids(&env.kafka, &topic_read)).await.unwrap();
    assert_eq!(ids, ["a-1", "b-1"], "a read-committed consumer of {topic}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jetstream_publisher_can_store_nothing_once_a_successor_published_its_fence() {
    let env = support::env();
    let stream = support::unique("FENCE").to_uppercase().replace('-', "_");
    let cluster = support::unique("fence");
    let subjects = format!("fence.{cluster}.>");
    let cfg: NatsConfig = serde_json::from_value(json!({"url": env.nats, "jetstream": {"stream": stream, "subjects": [subjects]}})).unwrap();
    let subject = |name: &str| format!("fence.{cluster}.{name}");
    let fence_subject = subject("_fence");

    let first = NatsSink::connect(&cfg).await.unwrap();
    first.prepare().await.expect("the stream");
    let at = sent("the first fence", first.fence(&fence_subject, &FenceRecord::new(&lease(&cluster, "a"), "fence-a".into()))).await.expect("the first claim");
    sent("the first leader's message", first.send(&added(&subject("a"), "ns/a", "a-1"))).await.expect("stored while it leads");

    let second = NatsSink::connect(&cfg).await.unwrap();
    let then = sent("the second fence", second.fence(&fence_subject, &FenceRecord::new(&lease(&cluster, "b"), "fence-b".into())))
        .await
        .expect("the successor's claim");
    assert!(then > at, "the successor's fence ({then:?}) follows the first ({at:?})");
    assert_fenced("the deposed leader's message", sent("the deposed leader's message", first.send(&added(&subject("b"), "ns/b", "a-2"))).await);
    sent("the successor's message", second.send(&added(&subject("c"), "ns/c", "b-1"))).await.expect("stored by the successor");
    assert_fenced("the deposed leader's next message", sent("the deposed leader's next message", first.send(&added(&subject("d"), "ns/d", "a-3"))).await);

    let js = support::nats::jetstream().await;
    let mut s = js.get_stream(&stream).await.unwrap();
    let last = s.info().await.unwrap().state.last_sequence;
    let mut ids = Vec::new();
    for seq in 1..=last {
        let m = s.get_raw_message(seq).await.unwrap();
        ids.push(m.headers.get("ce-id").map(|v| v.as_str().to_string()).unwrap_or_default());
    }
    assert_eq!(ids, ["fence-a", "a-1", "fence-b", "b-1"], "the stream {stream}");
    js.delete_stream(&stream).await.unwrap();
}

/// Two replicas with leader election on `ns`'s ConfigMaps, to the test's own topic or stream.
fn replicated(on_nats: bool, ns: &str, cluster: &str) -> (Log, String) {
    let env = support::env();
    let election = election(ns, "deltaship-fence");
    let config = TestConfig::new().cluster(cluster).configmaps(ns);
    if on_nats {
        let stream = cluster.to_uppercase().replace('-', "_");
        let mut sink = nats_stream(&env.nats, cluster, &stream);
        sink.jetstream.fence_subject = Some(format!("{cluster}._fence"));
        (Log::Nats { stream }, config.nats(sink).with(|c| c.leader_election = election).toml())
    } else {
        let prefix = support::unique("it-fence");
        let mut sink = kafka(&env.kafka, &format!("{prefix}.{{plural}}"));
        sink.create_topics = partitions(3);
        (Log::Kafka { brokers: env.kafka, topic: format!("{prefix}.configmaps") }, config.kafka(sink).with(|c| c.leader_election = election).toml())
    }
}

fn events_total(bridge: &Bridge) -> f64 {
    bridge.get("/metrics").map_or(0.0, |(_, m)| metric(&m, "deltaship_events_total"))
}

async fn frozen_past_the_lease_then_thawed(on_nats: bool) {
    let _serial = SERIAL.lock().await;
    let _busy = support::CpuBurner::start();
    let kube = client().await;
    let ns = namespace(&kube, "it-fence").await;
    let cluster = support::unique("fence");
    let (log, config) = replicated(on_nats, &ns, &cluster);
    let mut churn = Churn::create(&kube, &ns, 20, 0).await;
    churn.start(4, Duration::from_millis(200), None);
    let mut a = Bridge::start(&config);
    let mut b = Bridge::start(&config);
    a.wait_ready(Duration::from_secs(120));
    b.wait_ready(Duration::from_secs(120));
    let started = Instant::now();
    while !(a.leads() ^ b.leads()) {
        assert!(started.elapsed() < Duration::from_secs(60), "no single leader:\nA:\n{}\nB:\n{}", a.log_text(), b.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut old, new) = if a.leads() { (a, b) } else { (b, a) };
    churn.wait_writes(churn.writes() + 40).await;

    old.signal("STOP");
    let frozen = Instant::now();
    while !(new.leads() && events_total(&new) > 0.0) {
        assert!(frozen.elapsed() < Duration::from_secs(60), "the standby never took over and shipped:\n{}", new.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let takeover = frozen.elapsed();
    // The successor ships a while; the frozen replica's watch falls behind meanwhile.
    churn.wait_writes(churn.writes() + 40).await;
    let log_before_thaw = old.log_text().len();
    old.signal("CONT");
    let status = old.wait_exit(Duration::from_secs(60));
    let thawed = old.log_text()[log_before_thaw..].to_string();
    let refused = thawed.matches("fenced").count();
    churn.wait_writes(churn.writes() + 40).await;
    churn.finish().await;

    assert_rebuild_matches(&kube, log.rebuild_args(), std::slice::from_ref(&ns), Duration::from_secs(120)).await;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let existing: HashSet<String> = cms.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.uid).collect();
    let h = log.audited(&existing).await;
    let after_fence = match &log {
        Log::Nats { stream } => stored_after_the_last_fence_by_an_earlier_leader(&log.messages(stream).await),
        Log::Kafka { .. } => 0,
    };
    let sink = if on_nats { "nats" } else { "kafka" };
    eprintln!(
        "FENCE-FIGURES sink={sink} takeover_s={:.1} thawed_exit={status} thawed_refusals_logged={refused} events={} repeats={} steps_back={} stored_after_fence_by_old_leader={after_fence}",
        takeover.as_secs_f64(),
        h.events,
        h.repeats,
        h.steps_back
    );
    assert!(!status.success(), "the thawed replica stops with an error (lease lost or fenced):\n{thawed}");
    assert_eq!(
        (h.repeats + h.resyncs, h.steps_back, h.resurrections, h.spurious_deletes, after_fence),
        (0, 0, 0, 0, 0),
        "{}\nthawed:\n{thawed}",
        h.problems.join("\n")
    );
    if !on_nats {
        // The successor's transactions, by how they ended: it committed, and nothing fenced it.
        let text = new.get("/metrics").expect("/metrics answers").1;
        let ended = |outcome: &str| {
            let series = format!("outcome=\"{outcome}\"");
            metric(&text.lines().filter(|l| l.contains(&series)).collect::<Vec<_>>().join("\n"), "deltaship_sink_transactions_total")
        };
        assert!(ended("committed") > 0.0 && ended("failed") == 0.0, "the successor's deltaship_sink_transactions_total:\n{text}");
    }
    drop(new);
    delete_namespace(&kube, &ns).await;
}

/// Messages stored after the last fence record that carry an earlier fence's sequence as
/// their expectation: published by a replica that was fenced.
fn stored_after_the_last_fence_by_an_earlier_leader(msgs: &[support::nats::Msg]) -> usize {
    let is_fence = |m: &support::nats::Msg| m.headers.get("ce-type").is_some_and(|t| t == deltaship::sink::fence::FENCE_TYPE);
    let Some(last_fence) = msgs.iter().rposition(is_fence) else { return 0 };
    let current = msgs[last_fence].sequence.to_string();
    msgs[last_fence + 1..].iter().filter(|m| m.headers.get("Nats-Expected-Last-Subject-Sequence").is_some_and(|s| *s != current)).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_frozen_past_its_lease_delivers_nothing_after_its_successor_began_on_kafka() {
    frozen_past_the_lease_then_thawed(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_frozen_past_its_lease_delivers_nothing_after_its_successor_began_on_jetstream() {
    frozen_past_the_lease_then_thawed(true).await;
}
