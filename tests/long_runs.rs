//! A consumer that runs for months: `deltaship rebuild --follow` given a million updates of
//! a few objects through the real Kafka broker (two million at the soak scale:
//! `tests/support/scale.rs`) holds flat resident memory, because what tells repeats apart is
//! bounded (src/rebuild/repeats.rs) instead of a set of every id ever seen. The libraries'
//! own tests hold their windows to a memory bound the same way (consumers/*: RepeatsTest,
//! repeats_test.go, test_repeats.py).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use serde_json::Value;

use support::churn::rss_kib;

/// Updates written: 1,000,000 at the proof scale, 2,000,000 at the soak scale. Not fewer: the
/// repeat window holds up to 200,000 ids (twice REPEAT_WINDOW, src/rebuild/repeats.rs), so
/// at 200,000 updates a set of every id ever seen would hold no more than the window and
/// pass; it takes about a million for one to outgrow the memory bound below (see there).
fn updates() -> usize {
    support::scale::by_tier(1_000_000, 2_000_000)
}

/// Rounds the updates are written in; keys they cycle through.
const ROUNDS: usize = 8;
const KEYS: usize = 4;

/// Writes updates `from..to` of the keys to `topic`, as deltaship's binary-mode records.
fn write_updates(producer: &BaseProducer, topic: &str, from: usize, to: usize) {
    for i in from..to {
        let (id, subject) = (format!("{i:032x}"), format!("ns/k{}", i % KEYS));
        let value = format!(r#"{{"metadata":{{"name":"k{}","namespace":"ns","resourceVersion":"{i}"}},"data":{{"v":"{i}"}}}}"#, i % KEYS);
        let mut headers = OwnedHeaders::new_with_capacity(7);
        for (key, value) in [
            ("ce_id", id.as_str()),
            ("ce_type", "dev.deltaship.object.updated"),
            ("ce_subject", &subject),
            ("ce_apiversion", "v1"),
            ("ce_kind", "ConfigMap"),
            ("ce_cluster", "c1"),
            ("content-type", "application/json"),
        ] {
            headers = headers.insert(Header { key, value: Some(value) });
        }
        let mut record = BaseRecord::to(topic).key(&subject).payload(&value).headers(headers);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("producing update {i}: {e}"),
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("the updates acknowledged");
}

/// The events `rebuild --follow` applied, from its state file's summary.
fn events(out: &Path) -> u64 {
    std::fs::read_to_string(out).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()).and_then(|d| d["summary"]["events"].as_u64()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn rebuild_follow_holds_flat_memory_through_a_long_stream_of_updates_of_a_few_objects() {
    let env = support::env();
    let updates = updates();
    support::scale::announce("rebuild-follow-long-run", &format!("updates={updates} rounds={ROUNDS}"));
    let topic = support::unique("it-long-run");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &env.kafka).create().unwrap();
    let created = admin.create_topics(&[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.kafka)
        .set("linger.ms", "20")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .unwrap();

    let dir = std::env::temp_dir().join(support::unique("long-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("state.json");
    let mut follower = Command::new(env!("CARGO_BIN_EXE_deltaship"))
        .args(["rebuild", "--kafka", &env.kafka, "--topic", &topic, "--cluster", "c1", "--follow", "--out"])
        .arg(&out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = follower.id();

    // Resident memory after each round is applied (the first round fills the repeat window
    // twice over: what follows should add nothing).
    let started = Instant::now();
    let mut rss_mib = Vec::new();
    for round in 0..ROUNDS {
        let (from, to) = (round * updates / ROUNDS, (round + 1) * updates / ROUNDS);
        write_updates(&producer, &topic, from, to);
        let deadline = Instant::now() + Duration::from_secs(120);
        while events(&out) < to as u64 {
            assert!(Instant::now() < deadline, "rebuild --follow applied {} of {to} updates in 120 s", events(&out));
            assert!(follower.try_wait().unwrap().is_none(), "rebuild --follow exited");
            std::thread::sleep(Duration::from_millis(200));
        }
        rss_mib.push(rss_kib(pid).expect("the follower's VmRSS") as f64 / 1024.0);
    }
    let took = started.elapsed();
    let document: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    assert!(follower.wait().unwrap().success(), "rebuild --follow did not stop with 0 on SIGTERM");
    let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
    std::fs::remove_dir_all(&dir).unwrap();

    let scale = support::scale::tier().as_str();
    println!("LONG-RUN rebuild --follow: scale={scale} {updates} updates of {KEYS} keys in {took:.1?}; VmRSS after each eighth (MiB): {rss_mib:.1?}");
    let objects = &document["resources"]["v1/ConfigMap"];
    assert_eq!(objects.as_object().map(|o| o.len()), Some(KEYS), "{objects}");
    assert_eq!(objects[format!("ns/k{}", (updates - 1) % KEYS)]["data"]["v"], (updates - 1).to_string());
    assert_eq!(document["summary"]["duplicates"], 0);
    // Growth is measured from the second round to the last, the window past its first fill
    // both times. At the soak scale (rounds of 250,000) the bounded window holds 150,000 ids
    // after every other round and 200,000, its most, after the rest, like for like, across
    // 1.5 million updates. Measured there with a core kept busy: a set of every id (32 hex
    // digits each; the window made unbounded) grew 172 MiB (119, 151, 159, 207, 221, 232,
    // 246, 323 MiB); the bounded window grew at most 2 MiB (118, 117, 120, 117, 117, 117,
    // 118, 118; 113, 113, 115, 113, ...; 118, 119, 122, 115, 117, 118, 118, 115), having
    // swung by up to 20 MiB while each generation's table was allocated anew.
    // At the proof scale (rounds of 125,000; the same ids as the first half of the soak run)
    // the window holds 125,000 to 200,000 ids after each round from the second on, and the
    // growth is measured across 750,000 updates: by the figures above a set of every id
    // goes from 119 MiB (250,000 ids) to 207 (1,000,000: its table doubled on the way), 88
    // MiB, and fails. With 800,000 updates it would go from under 119 MiB (200,000 ids) to
    // about 160 (159 at 750,000), roughly 42 MiB, under the bound, and pass: so the proof
    // scale is not smaller. The bounds are the same at both scales, since the bounded
    // window's memory does not depend on how long the stream is.
    let grown = rss_mib[ROUNDS - 1] - rss_mib[1];
    assert!(grown < 48.0, "resident memory grew {grown:.1} MiB after the second round: {rss_mib:?}");
    assert!(rss_mib.iter().all(|&m| m < 256.0), "resident memory over 256 MiB: {rss_mib:?}");
}
