//! Replay throughput against the real brokers (tests/env): a recorded watch of Pods
//! (5.6 KB each) decoded, classified and built into envelopes, then published through
//! `deltaship::pipeline::Dispatcher` with a real `deltaship::sink::Sink` until every event
//! is acknowledged; and, as the baseline in the same run, the raw client (rdkafka
//! FutureProducer / async-nats JetStream) sending the same pre-encoded bytes with the
//! same settings.
//!
//!   tests/env/up && source tests/env/.state/env.sh
//!   cargo bench --bench replay
//!
//! Environment: DELTASHIP_TEST_BENCH_EVENTS (N, default 100000), DELTASHIP_TEST_BENCH_RUNS (R,
//! default 9), DELTASHIP_TEST_BENCH_OBJECT (`pod` or `configmap`, default pod),
//! DELTASHIP_TEST_BENCH_SINKS (default `kafka,nats`), DELTASHIP_TEST_BENCH_VARIANTS (default
//! all: `pipeline,fenced,end_to_end,raw,raw_unbounded`). Without `--bench` (`cargo test
//! --benches`) it does one small run of each as a smoke test.
//!
//! Variants, per sink, run in turn within each repetition (the order rotates):
//! - `pipeline`: Dispatcher + Sink, max_in_flight 1000 and queue 2000 (the defaults).
//! - `fenced`: the same through a sink a leader claimed (sink::fence): Kafka records in
//!   transactions, each event acknowledged once its transaction committed; JetStream
//!   publishes expecting the leader's fence record.
//! - `end_to_end`: the recorded watch events decoded, classified and built by a producer
//!   task (as the watch task does) while the Dispatcher + Sink deliver them: the bridge's
//!   whole per-event path, timed and its CPU counted from the first event to the last ack.
//! - `raw`: the raw client, same bytes and client settings, at most 1000 in flight.
//! - `raw_unbounded`: the raw client limited only by its own limits (librdkafka's 64 MiB
//!   queue; async-nats's 5000 unacknowledged publishes): what the client can do alone.
//!
//! Output: one JSON line per measured run, then one summary line per sink and variant
//! (median, min, max over the R runs) and per sink the median ratio pipeline/raw. With
//! DELTASHIP_TEST_BENCH_PROFILE (a directory), Kafka's `pipeline`, `fenced` and `raw` run once
//! more each (at most 20,000 events) under `perf record` (benches/common/profile.rs),
//! preparing the envelopes (and for `raw` encoding the records) included: a line
//! `"profile": true` per variant charges the process's CPU per event to stages.

#[path = "common/mod.rs"]
mod common;
#[path = "common/profile.rs"]
mod profile;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage};
use common::{Kind, Recorded};
use deltaship::config::OversizePolicy;
use deltaship::event::{Envelope, EnvelopeKind};
use deltaship::pipeline::{Dispatcher, RetryPolicy};
use deltaship::sink::Sink;
use deltaship::telemetry::Health;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The bridge's defaults (delivery.max_in_flight, delivery.queue_capacity).
const MAX_IN_FLIGHT: usize = 1000;
const QUEUE_CAPACITY: usize = 2_000;
const PARTITIONS: i32 = 3;
/// The events of the profile pass's runs, at most.
const PROFILED_EVENTS: usize = 20_000;
/// async-nats's default limit of unacknowledged JetStream publishes.
const NATS_MAX_ACK_INFLIGHT: usize = 5000;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Variant {
    Pipeline,
    Fenced,
    EndToEnd,
    Raw,
    RawUnbounded,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Pipeline => "pipeline",
            Variant::Fenced => "fenced",
            Variant::EndToEnd => "end_to_end",
            Variant::Raw => "raw",
            Variant::RawUnbounded => "raw_unbounded",
        }
    }
}

const VARIANTS: [Variant; 5] = [Variant::Pipeline, Variant::Fenced, Variant::EndToEnd, Variant::Raw, Variant::RawUnbounded];

struct Measured {
    seconds: f64,
    cpu_seconds: f64,
}

fn main() {
    let bench = common::bench_mode();
    // A run of 100,000 events lasts about a second. At 20,000 (0.2 s) a few milliseconds
    // more or less on either side moved single runs from half to above the median
    // (BENCHMARKS.md, 2026-11-29): those measured start and end, not throughput.
    let n: usize = common::env_or("DELTASHIP_TEST_BENCH_EVENTS", if bench { 100_000 } else { 300 });
    // Beside a broker on the same machine single runs still spread: the median takes nine.
    let runs: usize = common::env_or("DELTASHIP_TEST_BENCH_RUNS", if bench { 9 } else { 1 });
    let kind = Kind::parse(&common::env_or("DELTASHIP_TEST_BENCH_OBJECT", "pod".to_string()));
    let sinks: String = common::env_or("DELTASHIP_TEST_BENCH_SINKS", "kafka,nats".to_string());
    let kafka = common::test_env("DELTASHIP_TEST_KAFKA");
    let nats = common::test_env("DELTASHIP_TEST_NATS");
    // The bridge's runtime, with its default number of threads (`runtime.worker_threads`).
    let threads = deltaship::config::RuntimeConfig::default().worker_threads;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap();
    rt.block_on(async {
        // The bridge records metrics on every event: install the same recorder.
        let health = Health::single(0);
        let http_stop = CancellationToken::new();
        let http = deltaship::config::HttpConfig::default();
        let timeout = Duration::from_secs(http.request_timeout_secs);
        let metrics = deltaship::telemetry::install_recorder().expect("metrics recorder");
        let _http = deltaship::telemetry::serve("127.0.0.1:0".parse().unwrap(), http.max_connections, timeout, metrics, health.clone(), http_stop.clone())
            .await
            .expect("serves");
        let objects = (n / 10).clamp(1, 2000);
        let recorded = Arc::new(common::recording(kind, n, objects));
        eprintln!("replay: {n} events ({objects} {}s, {} B each on the wire), {runs} runs", kind.name(), kind.wire_size());
        let run_id = common::unique("dsbench");
        for sink in sinks.split(',').map(str::trim) {
            match sink {
                "kafka" => kafka_bench(&run_id, kind, &recorded, runs, &kafka, health.clone(), bench).await,
                "nats" => nats_bench(&run_id, kind, &recorded, runs, &nats, health.clone(), bench).await,
                other => panic!("unknown sink {other}; use kafka and/or nats"),
            }
        }
        http_stop.cancel();
    });
}

/// Decodes, classifies and builds the recording's envelopes for `cluster` (a distinct
/// cluster per run gives distinct event ids, so JetStream never drops one as a
/// duplicate); returns them with the CPU time spent per event, in µs.
async fn prepare(cluster: &str, scope: &Arc<deltaship::plan::Scope>, recorded: &Arc<Vec<Recorded>>) -> (Vec<Envelope>, f64) {
    let cpu = common::process_cpu();
    let envs = common::envelopes(cluster, scope, recorded).await;
    let per_event = (common::process_cpu() - cpu) * 1e6 / envs.len() as f64;
    (envs, per_event)
}

/// Publishes `envs` through the Dispatcher and `sink`; resolves when all are acknowledged.
async fn through_pipeline(sink: Sink, envs: Vec<Envelope>, health: Arc<Health>) -> Measured {
    let retry = RetryPolicy { initial: Duration::from_millis(100), max: Duration::from_millis(30_000) };
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let dispatcher = Dispatcher::new(sink, MAX_IN_FLIGHT, OversizePolicy::Reference, retry, health.route(0));
    let cpu = common::process_cpu();
    let started = Instant::now();
    let delivery = tokio::spawn(dispatcher.run(rx));
    for env in envs {
        tx.send(env).await.expect("dispatcher running");
    }
    drop(tx);
    delivery.await.unwrap().expect("every event delivered");
    Measured { seconds: started.elapsed().as_secs_f64(), cpu_seconds: common::process_cpu() - cpu }
}

/// The watch stage and the pipeline together: the pipeline's worker decodes, classifies
/// and builds the recorded events into the queue while the Dispatcher delivers them.
async fn end_to_end(sink: Sink, cluster: String, scope: Arc<deltaship::plan::Scope>, recorded: Arc<Vec<Recorded>>, health: Arc<Health>) -> (Measured, usize) {
    let retry = RetryPolicy { initial: Duration::from_millis(100), max: Duration::from_millis(30_000) };
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let dispatcher = Dispatcher::new(sink, MAX_IN_FLIGHT, OversizePolicy::Reference, retry, health.route(0));
    let cpu = common::process_cpu();
    let started = Instant::now();
    let delivery = tokio::spawn(dispatcher.run(rx));
    let events = recorded.len();
    let worker = common::worker(&cluster, scope, tx);
    let producer = tokio::spawn(worker.run(common::observations(recorded), CancellationToken::new()));
    producer.await.unwrap();
    delivery.await.unwrap().expect("every event delivered");
    let m = Measured { seconds: started.elapsed().as_secs_f64(), cpu_seconds: common::process_cpu() - cpu };
    // `recording` makes every recorded event one shipped event.
    (m, events)
}

struct Report<'a> {
    sink: &'a str,
    kind: Kind,
    events: usize,
    runs: BTreeMap<Variant, Vec<(f64, f64, f64)>>, // (rate, cpu µs/event, prepare cpu µs/event)
    bench: bool,
}

impl Report<'_> {
    fn record(&mut self, run: usize, v: Variant, m: Measured, prepare_us: f64) {
        let rate = self.events as f64 / m.seconds;
        let cpu_us = m.cpu_seconds * 1e6 / self.events as f64;
        println!(
            "{}",
            json!({"bench": "replay", "sink": self.sink, "object": self.kind.name(), "variant": v.name(), "run": run,
                   "events": self.events, "seconds": m.seconds, "events_per_sec": rate,
                   "send_cpu_us_per_event": cpu_us, "prepare_cpu_us_per_event": prepare_us, "smoke": !self.bench})
        );
        self.runs.entry(v).or_default().push((rate, cpu_us, prepare_us));
    }

    fn summarize(&self) {
        for (v, runs) in &self.runs {
            let col = |i: usize| runs.iter().map(|r| [r.0, r.1, r.2][i]).collect::<Vec<_>>();
            let (rate, rate_min, rate_max) = common::stats(&col(0));
            let (cpu, cpu_min, cpu_max) = common::stats(&col(1));
            let (prep, prep_min, prep_max) = common::stats(&col(2));
            println!(
                "{}",
                json!({"bench": "replay", "summary": true, "sink": self.sink, "object": self.kind.name(), "variant": v.name(),
                       "events": self.events, "runs": runs.len(),
                       "events_per_sec": {"median": rate, "min": rate_min, "max": rate_max},
                       "send_cpu_us_per_event": {"median": cpu, "min": cpu_min, "max": cpu_max},
                       "prepare_cpu_us_per_event": {"median": prep, "min": prep_min, "max": prep_max},
                       "smoke": !self.bench})
            );
        }
        // Ratios per repetition (the runs of one repetition ran back to back).
        for num in [Variant::Pipeline, Variant::Fenced, Variant::EndToEnd] {
            for base in [Variant::Raw, Variant::RawUnbounded, Variant::Pipeline] {
                if num == base {
                    continue;
                }
                let (Some(p), Some(b)) = (self.runs.get(&num), self.runs.get(&base)) else { continue };
                let ratios: Vec<f64> = p.iter().zip(b).map(|(p, b)| p.0 / b.0).collect();
                let (median, min, max) = common::stats(&ratios);
                println!(
                    "{}",
                    json!({"bench": "replay", "ratio": true, "sink": self.sink, "object": self.kind.name(), "variant": num.name(), "versus": base.name(),
                           "over_raw": {"median": median, "min": min, "max": max}, "runs": ratios.len(), "smoke": !self.bench})
                );
            }
        }
    }
}

/// The order of the variants in repetition `run`: rotated, so that neither always runs
/// first (on a warmer or colder broker).
fn order(run: usize) -> Vec<Variant> {
    let mut v = VARIANTS.to_vec();
    v.rotate_left(run % VARIANTS.len());
    v.retain(|v| selected(*v));
    v
}

/// DELTASHIP_TEST_BENCH_VARIANTS (comma separated names) limits the variants; all by default.
fn selected(v: Variant) -> bool {
    std::env::var("DELTASHIP_TEST_BENCH_VARIANTS").map_or(true, |list| list.split(',').any(|n| n.trim() == v.name()))
}

// ---------------------------------------------------------------- Kafka

/// The sink's own producer settings (idempotent, acks=all, no message timeout, murmur2,
/// lz4, 64 MiB queue, linger 5 ms), for the raw client.
fn raw_producer(brokers: &str) -> FutureProducer {
    let cfg: deltaship::config::KafkaConfig = serde_json::from_value(serde_json::json!({"brokers": brokers})).expect("a Kafka config");
    deltaship::broker::kafka::client_config(&cfg, deltaship::broker::kafka::ClientRole::Producer)
        .expect("no secret files to read")
        .create()
        .expect("raw producer")
}

struct KafkaRecord {
    topic: String,
    key: String,
    payload: bytes::Bytes,
    headers: OwnedHeaders,
    marker: bool,
}

async fn raw_kafka(producer: &FutureProducer, records: Vec<KafkaRecord>, window: usize) -> Measured {
    let mut pending = FuturesUnordered::new();
    let await_one = |d: Option<Result<rdkafka::producer::future_producer::OwnedDeliveryResult, futures::channel::oneshot::Canceled>>| match d {
        Some(Ok(Ok(_))) | None => {}
        Some(Ok(Err((e, _)))) => panic!("raw delivery failed: {e}"),
        Some(Err(_)) => panic!("raw delivery canceled"),
    };
    let cpu = common::process_cpu();
    let started = Instant::now();
    for r in records {
        while pending.len() >= window {
            await_one(pending.next().await);
        }
        let partitions: Vec<Option<i32>> = if r.marker { (0..PARTITIONS).map(Some).collect() } else { vec![None] };
        for p in partitions {
            loop {
                let mut rec = FutureRecord::<str, [u8]>::to(&r.topic).key(&r.key).payload(&r.payload[..]).headers(r.headers.clone());
                if let Some(p) = p {
                    rec = rec.partition(p);
                }
                match producer.send_result(rec) {
                    Ok(d) => {
                        pending.push(d);
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        if pending.is_empty() {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        } else {
                            await_one(pending.next().await);
                        }
                    }
                    Err((e, _)) => panic!("raw produce failed: {e}"),
                }
            }
        }
    }
    while let Some(d) = pending.next().await {
        await_one(Some(d));
    }
    Measured { seconds: started.elapsed().as_secs_f64(), cpu_seconds: common::process_cpu() - cpu }
}

fn kafka_sink_toml(brokers: &str, topic: &str) -> String {
    format!(
        "[sink]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\ntopic_template = \"{topic}.{{group}}.{{plural}}\"\ncreate_topics = {{ partitions = {PARTITIONS} }}\n"
    )
}

async fn kafka_bench(run_id: &str, kind: Kind, recorded: &Arc<Vec<Recorded>>, runs: usize, brokers: &str, health: Arc<Health>, bench: bool) {
    let prefix = format!("{run_id}-kafka");
    let sink_toml = kafka_sink_toml(brokers, &prefix);
    let scope = common::scope("warmup", kind, &sink_toml);
    let topic = scope.outputs[0].address.marker_destination().to_string();
    let config = common::load_config(&format!("[[resources]]\nversion = \"v1\"\nkind = \"{}\"\n{sink_toml}", kind.resource().kind));
    let sink_config = config.effective_routes().remove(0).sink;
    let sink = Sink::from_config(&sink_config).await.expect("kafka sink");
    sink.prepare(&sink_config, std::slice::from_ref(&topic)).await.expect("create the bench topic");
    let fenced = fenced_sink(&sink_config, run_id).await;
    let producer = raw_producer(brokers);
    wait_for_partitions(&producer, &topic).await;
    eprintln!("replay: kafka topic {topic}");

    // Warm-up: connections, metadata, producer ids; not measured.
    let warm = Arc::new(recorded[..recorded.len().min(2000)].to_vec());
    for v in VARIANTS.into_iter().filter(|v| selected(*v)) {
        let cluster = format!("warm{}", v.name().replace('_', ""));
        let sink = if v == Variant::Fenced { &fenced } else { &sink };
        run_kafka_variant(v, &cluster, kind, &sink_toml, sink, &producer, &warm, health.clone()).await;
    }

    let mut report = Report { sink: "kafka", kind, events: 0, runs: BTreeMap::new(), bench };
    for run in 0..runs {
        for v in order(run) {
            let cluster = format!("r{run}{}", v.name().replace('_', ""));
            let sink = if v == Variant::Fenced { &fenced } else { &sink };
            let (m, events, prepare_us) = run_kafka_variant(v, &cluster, kind, &sink_toml, sink, &producer, recorded, health.clone()).await;
            report.events = events;
            report.record(run, v, m, prepare_us);
        }
    }
    report.summarize();
    if let Ok(dir) = std::env::var("DELTASHIP_TEST_BENCH_PROFILE") {
        std::fs::create_dir_all(&dir).unwrap();
        // perf's call graphs of a longer run take minutes to charge; the shares hold.
        let recorded = &Arc::new(recorded[..recorded.len().min(PROFILED_EVENTS)].to_vec());
        for v in [Variant::Pipeline, Variant::Fenced, Variant::Raw].into_iter().filter(|v| selected(*v)) {
            let sink = if v == Variant::Fenced { &fenced } else { &sink };
            let path = std::path::Path::new(&dir).join(format!("replay-kafka-{}.perf", v.name()));
            let (recording, cpu) = (profile::Recording::start(std::process::id(), &path), common::process_cpu());
            let (_, events, _) =
                run_kafka_variant(v, &format!("prof{}", v.name().replace('_', "")), kind, &sink_toml, sink, &producer, recorded, health.clone()).await;
            let cpu_us = (common::process_cpu() - cpu) * 1e6 / events as f64;
            let (stages, samples) = recording.stop();
            println!(
                "{}",
                json!({"bench": "replay", "profile": true, "sink": "kafka", "variant": v.name(), "events": events,
                       "cpu_us_per_event": cpu_us, "samples": samples, "stages": stages, "smoke": !bench})
            );
        }
    }
    delete_topic(brokers, &topic).await;
}

/// One measured run of `v`: (measurement, events, prepare CPU µs per event, 0 when the
/// variant prepares inside the measurement or not at all).
#[allow(clippy::too_many_arguments)]
async fn run_kafka_variant(
    v: Variant,
    cluster: &str,
    kind: Kind,
    sink_toml: &str,
    sink: &Sink,
    producer: &FutureProducer,
    recorded: &Arc<Vec<Recorded>>,
    health: Arc<Health>,
) -> (Measured, usize, f64) {
    let scope = common::scope(cluster, kind, sink_toml);
    if v == Variant::EndToEnd {
        let (m, events) = end_to_end(sink.clone(), cluster.to_string(), scope, recorded.clone(), health).await;
        return (m, events, 0.0);
    }
    let (envs, prepare_us) = prepare(cluster, &scope, recorded).await;
    let events = envs.len();
    let m = match v {
        Variant::Pipeline | Variant::Fenced => through_pipeline(sink.clone(), envs, health).await,
        Variant::EndToEnd => unreachable!(),
        Variant::Raw | Variant::RawUnbounded => {
            let records = envs
                .iter()
                .map(|e| {
                    let (payload, headers) = common::encode_kafka(e);
                    KafkaRecord {
                        topic: e.destination.to_string(),
                        key: e.key().to_string(),
                        payload,
                        headers,
                        marker: matches!(e.kind, EnvelopeKind::Marker(_)),
                    }
                })
                .collect();
            drop(envs);
            let window = if v == Variant::Raw { MAX_IN_FLIGHT } else { usize::MAX };
            raw_kafka(producer, records, window).await
        }
    };
    (m, events, if matches!(v, Variant::Pipeline | Variant::Fenced) { prepare_us } else { 0.0 })
}

/// A sink of `config` that a leader claimed (sink::fence), as a bridge with leader election
/// and `leader_election.fence` has it.
async fn fenced_sink(config: &deltaship::config::SinkConfig, run_id: &str) -> Sink {
    // The destination exists: the bench's unfenced sink prepared it.
    let sink = Sink::from_config(config).await.expect("a sink");
    let lease = deltaship::sink::fence::Lease { cluster: run_id.into(), namespace: "bench".into(), name: common::unique("lease"), holder: "bench".into() };
    sink.fence(config, &lease, "default").await.expect("the route claimed");
    sink
}

async fn wait_for_partitions(producer: &FutureProducer, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = producer.clone();
        let t = topic.to_string();
        let n = tokio::task::spawn_blocking(move || {
            p.client()
                .fetch_metadata(Some(&t), Timeout::After(Duration::from_secs(5)))
                .ok()
                .and_then(|md| md.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len()))
        })
        .await
        .unwrap();
        if n == Some(PARTITIONS as usize) {
            return;
        }
        assert!(Instant::now() < deadline, "topic {topic} has no {PARTITIONS} partitions after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn delete_topic(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    if let Err(e) = admin.delete_topics(&[topic], &opts).await {
        eprintln!("replay: could not delete topic {topic}: {e}");
    }
}

// ---------------------------------------------------------------- NATS

struct NatsMessage {
    subject: String,
    id: String,
    payload: bytes::Bytes,
    headers: async_nats::HeaderMap,
}

async fn raw_nats(js: &jetstream::Context, messages: Vec<NatsMessage>, window: usize) -> Measured {
    let mut pending = FuturesUnordered::new();
    let cpu = common::process_cpu();
    let started = Instant::now();
    for m in messages {
        while pending.len() >= window {
            let ack: Result<_, _> = pending.next().await.unwrap();
            ack.expect("raw JetStream ack");
        }
        let message = PublishMessage::build().payload(m.payload).headers(m.headers).message_id(m.id);
        let ack = js.send_publish(m.subject, message).await.expect("raw JetStream publish");
        pending.push(ack.into_future());
    }
    while let Some(ack) = pending.next().await {
        let ack = ack.expect("raw JetStream ack");
        assert!(!ack.duplicate, "ids are unique per run");
    }
    Measured { seconds: started.elapsed().as_secs_f64(), cpu_seconds: common::process_cpu() - cpu }
}

async fn nats_bench(run_id: &str, kind: Kind, recorded: &Arc<Vec<Recorded>>, runs: usize, url: &str, health: Arc<Health>, bench: bool) {
    let stream = run_id.to_uppercase().replace('-', "_");
    let sink_toml = format!(
        "[sink]\ntype = \"nats\"\nurl = \"{url}\"\nsubject_template = \"{run_id}.{{cluster}}.{{group}}.{{kind}}.{{namespace}}.{{name}}\"\n\
         marker_subject_template = \"{run_id}.{{cluster}}.{{group}}.{{kind}}._sync\"\n\
         [sink.jetstream]\nstream = \"{stream}\"\nsubjects = [\"{run_id}.>\"]\nfence_subject = \"{run_id}._fence\"\n"
    );
    let config = common::load_config(&format!("[[resources]]\nversion = \"v1\"\nkind = \"{}\"\n{sink_toml}", kind.resource().kind));
    let sink_config = config.effective_routes().remove(0).sink;
    let sink = Sink::from_config(&sink_config).await.expect("nats sink");
    sink.prepare(&sink_config, &[]).await.expect("create the bench stream");
    eprintln!("replay: JetStream stream {stream}");
    // The raw client: the sink's connection and JetStream settings (10 s ack timeout).
    let client = async_nats::ConnectOptions::new().name("deltaship-bench-raw").connect(url).await.expect("raw NATS client");
    let js = jetstream::ContextBuilder::new().timeout(Duration::from_secs(10)).build(client.clone());

    let warm = Arc::new(recorded[..recorded.len().min(2000)].to_vec());
    for v in VARIANTS.into_iter().filter(|v| selected(*v)) {
        let cluster = format!("warm{}", v.name().replace('_', ""));
        let fenced = fenced_unless(v, &sink_config, run_id).await;
        run_nats_variant(v, &cluster, kind, &sink_toml, fenced.as_ref().unwrap_or(&sink), &js, &warm, health.clone()).await;
        purge(&js, &stream).await;
    }

    let mut report = Report { sink: "nats", kind, events: 0, runs: BTreeMap::new(), bench };
    for run in 0..runs {
        for v in order(run) {
            let cluster = format!("r{run}{}", v.name().replace('_', ""));
            // A fence record of its own per run: the purge below removes the last one.
            let fenced = fenced_unless(v, &sink_config, run_id).await;
            let (m, events, prepare_us) =
                run_nats_variant(v, &cluster, kind, &sink_toml, fenced.as_ref().unwrap_or(&sink), &js, recorded, health.clone()).await;
            report.events = events;
            report.record(run, v, m, prepare_us);
            // Keep the stream small between runs (storage, not the measurement).
            purge(&js, &stream).await;
        }
    }
    report.summarize();
    if let Err(e) = js.delete_stream(&stream).await {
        eprintln!("replay: could not delete stream {stream}: {e}");
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_nats_variant(
    v: Variant,
    cluster: &str,
    kind: Kind,
    sink_toml: &str,
    sink: &Sink,
    js: &jetstream::Context,
    recorded: &Arc<Vec<Recorded>>,
    health: Arc<Health>,
) -> (Measured, usize, f64) {
    let scope = common::scope(cluster, kind, sink_toml);
    if v == Variant::EndToEnd {
        let (m, events) = end_to_end(sink.clone(), cluster.to_string(), scope, recorded.clone(), health).await;
        return (m, events, 0.0);
    }
    let (envs, prepare_us) = prepare(cluster, &scope, recorded).await;
    let events = envs.len();
    let m = match v {
        Variant::Pipeline | Variant::Fenced => through_pipeline(sink.clone(), envs, health).await,
        Variant::EndToEnd => unreachable!(),
        Variant::Raw | Variant::RawUnbounded => {
            let messages = envs
                .iter()
                .map(|e| {
                    let (payload, headers) = common::encode_nats(e);
                    NatsMessage { subject: e.destination.to_string(), id: e.attributes.id.clone(), payload, headers }
                })
                .collect();
            drop(envs);
            // async-nats holds at most 5000 unacknowledged publishes (its default
            // max_ack_inflight); a permit comes back only when an ack future is polled.
            raw_nats(js, messages, if v == Variant::Raw { MAX_IN_FLIGHT } else { NATS_MAX_ACK_INFLIGHT }).await
        }
    };
    (m, events, if matches!(v, Variant::Pipeline | Variant::Fenced) { prepare_us } else { 0.0 })
}

/// For the `fenced` variant, a newly fenced sink; None for the others.
async fn fenced_unless(v: Variant, config: &deltaship::config::SinkConfig, run_id: &str) -> Option<Sink> {
    if v == Variant::Fenced { Some(fenced_sink(config, run_id).await) } else { None }
}

async fn purge(js: &jetstream::Context, stream: &str) {
    let s = js.get_stream(stream).await.expect("bench stream");
    s.purge().await.expect("purge the bench stream");
}
