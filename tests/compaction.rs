//! Compacted logs without ghosts: an object deleted while no bridge ran must not outlive the
//! sync that should remove it, once the broker has compacted the log (a Kafka topic with
//! `cleanup.policy=compact`) or kept one message per subject (a JetStream stream with
//! `max_msgs_per_subject = 1`). Markers carry one key (subject) per watch, mode and phase,
//! so the last full sync's `started` survives beside its `completed`.

mod support;

use std::time::{Duration, Instant};

use deltaship::config::{KafkaConfig, TopicCreation};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::bridge::Bridge;
use support::config::{TestConfig, kafka, nats_stream};
use support::kafka::Record;
use support::kube::{client, delete_namespace, namespace};
use support::state::assert_rebuild_matches;

/// Creates ConfigMaps a, b and c; runs a bridge with `config` until its initial sync is
/// delivered and stops it; deletes b and updates a while no bridge runs; starts a second
/// bridge (returned, still running) that ships its own initial sync. The configs of this
/// file turn resume off: each start is a full initial sync, whose markers must survive
/// compaction (a resumed start ships the delete itself, tests/resume.rs).
async fn ghost_while_down(api: &Api<ConfigMap>, config: &str) -> Bridge {
    for name in ["a", "b", "c"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut first = Bridge::start(config);
    first.wait_ready(Duration::from_secs(60));
    assert!(first.stop(Duration::from_secs(30)).success(), "the first bridge stops cleanly");
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(&json!({"data": {"v": "1"}}))).await.unwrap();
    let mut second = Bridge::start(config);
    second.wait_ready(Duration::from_secs(60));
    second
}

/// Every record of `topic` now there (up to each partition's high watermark).
fn read_all(brokers: &str, topic: &str) -> Vec<Record> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let highs: Vec<i64> =
        (0..md.topics()[0].partitions().len() as i32).map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap().1).collect();
    support::kafka::read_until(brokers, topic, Duration::from_secs(60), |rs| {
        highs.iter().enumerate().all(|(p, high)| *high == 0 || rs.iter().any(|r| r.partition == p as i32 && r.offset >= high - 1))
    })
}

/// The sync id of the first `sync.started` in `records`.
fn first_sync(records: &[Record]) -> String {
    let started = records.iter().find(|r| r.headers.get("ce_type").map(String::as_str) == Some("dev.deltaship.sync.started"));
    started.expect("a sync.started marker").header("ce_syncid").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compacted_kafka_topic_rebuilds_without_objects_deleted_while_no_bridge_ran() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-compact").await;
    let prefix = support::unique("it-compact");
    let topic = format!("{prefix}.core.configmaps");
    // Segments roll every 100 ms and the cleaner takes any dirty segment, so compaction
    // happens within the broker's cleaner backoff (15 s) of the next roll. One partition:
    // the cleaner never touches a partition's active segment, so each partition needs
    // writes after the second run's markers, and the test's updates land in one.
    let cleaner = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("min.compaction.lag.ms", "0"),
        ("delete.retention.ms", "100"),
    ];
    let sink = KafkaConfig {
        tombstones: true,
        create_topics: Some(TopicCreation {
            partitions: 1,
            replication_factor: 1,
            config: cleaner.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }),
        ..kafka(&env.kafka, &format!("{prefix}.{{group}}.{{plural}}"))
    };
    let config = TestConfig::new().cluster(&support::unique("c")).configmaps(&ns).kafka(sink).with(|c| c.resume.enabled = false).toml();
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let _second = ghost_while_down(&api, &config).await;
    let (brokers, t) = (env.kafka.clone(), topic.clone());
    let s1 = tokio::task::spawn_blocking(move || first_sync(&read_all(&brokers, &t))).await.unwrap();

    // Writes roll the segments; the first run's markers disappear once the cleaner has
    // compacted the log (its `started` is superseded by the second run's).
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut n = 0;
    loop {
        n += 1;
        api.patch("c", &PatchParams::default(), &Patch::Merge(&json!({"data": {"v": n.to_string()}}))).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (brokers, t) = (env.kafka.clone(), topic.clone());
        let records = tokio::task::spawn_blocking(move || read_all(&brokers, &t)).await.unwrap();
        let first_markers = records
            .iter()
            .filter(|r| r.headers.get("ce_syncid") == Some(&s1) && r.headers.get("ce_type").is_some_and(|t| t.starts_with("dev.deltaship.sync.")))
            .count();
        if first_markers == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the broker never compacted {topic}: {first_markers} markers of the first run still there");
    }
    let args = vec!["--kafka".into(), env.kafka.clone(), "--topic".into(), topic];
    assert_rebuild_matches(&kube, args, std::slice::from_ref(&ns), Duration::from_secs(60)).await;
    delete_namespace(&kube, &ns).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_keeping_one_message_per_subject_rebuilds_without_objects_deleted_while_no_bridge_ran() {
    let env = support::env();
    let kube = client().await;
    let ns = namespace(&kube, "it-lastper").await;
    // A stream of its own (subjects under the test's cluster name): the shared one keeps
    // every message.
    let cluster = support::unique("c");
    let stream = support::unique("LASTPER").to_uppercase().replace('-', "_");
    let mut sink = nats_stream(&env.nats, &cluster, &stream);
    sink.jetstream.max_msgs_per_subject = 1;
    let config = TestConfig::new().cluster(&cluster).configmaps(&ns).nats(sink).with(|c| c.resume.enabled = false).toml();
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let _second = ghost_while_down(&api, &config).await;
    let js = support::nats::jetstream().await;
    // With one message per subject, the stream already holds only the latest of each.
    let info = js.get_stream(&stream).await.unwrap().info().await.unwrap().clone();
    assert!(info.state.messages < info.state.last_sequence, "the stream dropped older messages per subject: {:?}", info.state);
    let args = vec!["--nats".into(), env.nats.clone(), "--stream".into(), stream.clone()];
    assert_rebuild_matches(&kube, args, std::slice::from_ref(&ns), Duration::from_secs(60)).await;
    js.delete_stream(&stream).await.unwrap();
    delete_namespace(&kube, &ns).await;
}
