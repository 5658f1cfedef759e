//! A record whose delivery report leaves open whether the broker wrote it is not written
//! twice on a Kafka route without transactions (sink::kafka::resend), against the real
//! broker: the broker is frozen (SIGSTOP) with a record on its socket, the producer's
//! in-flight records are purged (their reports fail "possibly persisted", as when a stuck
//! producer is replaced), and the broker is thawed, which then writes the record. The
//! retry reads the log, finds the record and does not send it again; while the log cannot
//! be read (frozen, or answering "leader epoch is newer than broker epoch" just after the
//! thaw), it sends nothing.

mod support;

use std::time::{Duration, Instant};

use deltaship::config::KafkaConfig;
use deltaship::event::{Envelope, EnvelopeKind};
use deltaship::model::{ChangeType, Placement};
use deltaship::sink::{KafkaSink, SendError};
use serde_json::json;

fn added(topic: &str, key: &str, id: &str) -> Envelope {
    support::envelope::configmap_event("doubt", topic, key, id, EnvelopeKind::Object(ChangeType::Added))
}

/// The test broker's process group, stopped until dropped.
struct Frozen(i32);

impl Frozen {
    fn broker() -> Frozen {
        let pids = format!("{}/pids/kafka.pid", support::env_state());
        let pid: i32 = std::fs::read_to_string(&pids).expect("the broker's pid file").trim().parse().expect("a pid");
        signal(pid, "-STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(group: i32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, "--", &format!("-{group}")]).status().is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} of the broker's process group {group}");
}

async fn within<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f).await.unwrap_or_else(|_| panic!("{what}: no outcome within {limit:?}"))
}

/// Sends `event` until it is delivered, retrying a retryable failure as the dispatcher does
/// (a broker just thawed may answer a metadata request with a transient error).
async fn delivered(sink: &KafkaSink, event: &Envelope) -> Option<Placement> {
    loop {
        match sink.send(event).await {
            Ok(placement) => return placement,
            Err(e @ SendError::Retryable { .. }) => {
                eprintln!("the retry failed and is retried: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{}: not retryable: {e}", event.attributes.id),
        }
    }
}

/// Waits until `topic` holds `records` records; blocking.
fn wait_for_end(brokers: &str, topic: &str, records: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while support::kafka::total(brokers, topic) < records {
        assert!(Instant::now() < deadline, "{topic} holds fewer than {records} records after 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_of_a_record_the_broker_may_have_written_reads_the_log_and_does_not_write_it_twice() {
    let env = support::env();
    let topic = support::unique("it-doubt");
    let cfg: KafkaConfig = serde_json::from_value(json!({"brokers": env.kafka, "create_topics": {"partitions": 1}})).unwrap();
    deltaship::sink::kafka::create_topics(&cfg, std::slice::from_ref(&topic)).await.expect("the topic");
    let sink = KafkaSink::new(&cfg).unwrap();
    let first = within("the first record", Duration::from_secs(60), sink.send(&added(&topic, "ns/a", "first"))).await.expect("delivered");
    let first = first.expect("an object event's placement");

    let doubtful = added(&topic, "ns/b", "doubtful-1");
    let outcome = {
        let frozen = Frozen::broker();
        let (s, e) = (sink.clone(), doubtful.clone());
        let sending = tokio::spawn(async move { s.send(&e).await });
        // librdkafka writes the request to the frozen broker's socket, which the kernel takes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        sink.purge();
        let outcome = within("the purged record", Duration::from_secs(30), sending).await.expect("the send task");
        // While the broker does not answer, the retry cannot read the log: nothing is sent.
        match within("the retry while frozen", Duration::from_secs(60), sink.send(&doubtful)).await {
            Err(e @ SendError::Retryable { .. }) => {
                assert!(e.to_string().contains("cannot tell whether an earlier attempt was written"), "{e}");
                eprintln!("retry while the broker is frozen: refused as expected: {e}");
            }
            other => panic!("the retry while the broker is frozen: expected a refusal, got {other:?}"),
        }
        drop(frozen);
        outcome
    };
    match outcome {
        Err(e @ SendError::Retryable { .. }) => eprintln!("the purged record failed as expected: {e}"),
        other => panic!("the purged record: expected a retryable failure, got {other:?}"),
    }
    // The thawed broker writes the request it had taken.
    let (brokers, t) = (env.kafka.clone(), topic.clone());
    tokio::task::spawn_blocking(move || wait_for_end(&brokers, &t, 2)).await.unwrap();

    let retried = within("the retry", Duration::from_secs(60), delivered(&sink, &doubtful)).await;
    assert_eq!(retried, Some(Placement { partition: 0, offset: first.offset + 1 }), "the retry answers with the first attempt's place");
    within("a later record", Duration::from_secs(60), sink.send(&added(&topic, "ns/c", "later"))).await.expect("delivered");

    let read = tokio::task::spawn_blocking(move || support::kafka::read_to_end(&env.kafka, &topic, Duration::from_secs(60))).await.unwrap();
    let ids: Vec<&str> = read.iter().map(|r| r.header("ce_id")).collect();
    assert_eq!(ids, ["first", "doubtful-1", "later"], "each record once");
}
