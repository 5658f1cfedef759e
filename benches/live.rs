//! Live updates through the real API server at fixed rates, shipped to Kafka by the real
//! bridge (`deltaship run`, Kafka sink) and, given the same load, by a client-go informer
//! program (benches/informer/): process CPU per delivered event and latency per rate. Beside
//! them, the floor (benches/common/floor.rs): librdkafka alone given the records deltaship
//! ships for the same updates at the same rate, without a watch (its latency counts from when
//! each record was due).
//!
//!   tests/env/up && source tests/env/.state/env.sh
//!   cargo build --release && cargo bench --bench live
//!
//! One namespace of ConfigMaps of about 1 KB (memory.rs's `deltaship-bench-<count>`). Per
//! run, each program in turn (never two at once) is started on a fresh topic (3 partitions,
//! `message.timestamp.type=LogAppendTime`, created here so all get the same), and once its
//! initial sync is acknowledged by Kafka (deltaship: a `sync.completed` counted by
//! `deltaship_events_total`; the informer prints `synced` after flushing its initial adds;
//! the floor has no sync: it prints `ready` once it knows the topic),
//! each rate is one phase: a paced load generator in this process sends merge patches of
//! `data.seq` (a tag of the phase and a sequence number), one every 1/rate s, round-robin over
//! the ConfigMaps, at most DELTASHIP_TEST_BENCH_LIVE_CONCURRENCY in flight, until the phase's
//! duration is over (when the API server is slower, fewer are sent, none more than 1 s late:
//! `reached_per_sec`). The floor is given the phase instead (rate, duration, tag) and sends
//! the same sequence numbers itself.
//! Then the topic is read back from where it ended before the phase until every accepted
//! update is there or none arrived for 5 s.
//!
//! Per phase: `accepted` = patches the API server answered with success; `delivered` = the
//! distinct sequence numbers of the phase found in the topic; `cpu_us_per_event` = the
//! program's CPU (utime + stime of /proc/<pid>/stat, all threads) from the first patch until
//! the read-back ended, over `delivered`; latency = the record's LogAppendTime (the broker's
//! clock, ms) minus the time this process got the API server's answer to the patch (same
//! machine, ms): p50 and p99 over the delivered updates; it can be below 0 when the watch
//! event travels faster than the patch's answer.
//!
//! `deltaship_fenced` is the bridge with leader election and its default fencing
//! (`leader_election.fence`): one replica, whose Kafka records go in transactions, each
//! event acknowledged once its transaction committed.
//!
//! The informer program: client-go's SharedInformerFactory for the namespace's ConfigMaps,
//! each add/update/delete sent as one JSON record (the object, key namespace/name) with
//! franz-go, with the bridge's producer settings (idempotent, acks=all, lz4, linger 5 ms).
//! It is built with `go build` (the Go toolchain; modules from the Go module proxy) into
//! `$DELTASHIP_ENV_CACHE/bench/informer-<hash of its sources>` (default cache
//! ~/.cache/deltaship-env), once.
//!
//! The `data.seq` fields are removed again at the end, so that memory.rs measures the same
//! objects.
//!
//! Environment: DELTASHIP_TEST_BENCH_COUNTS (default `10000`), DELTASHIP_TEST_BENCH_RATES
//! (updates per second, default `100,300,1000,3000`), DELTASHIP_TEST_BENCH_LIVE_SECS (per rate,
//! default 20), DELTASHIP_TEST_BENCH_LIVE_CONCURRENCY (patches in flight, default 64),
//! DELTASHIP_TEST_BENCH_RUNS (default 3), DELTASHIP_TEST_BENCH_BIN (default: the bench build's
//! deltaship binary), DELTASHIP_TEST_BENCH_PROGRAMS (comma separated, default all:
//! `deltaship,deltaship_fenced,informer,floor`), DELTASHIP_TEST_BENCH_PROFILE (a directory:
//! after the measured runs, deltaship, deltaship_fenced and the floor once more at each rate
//! up to 300/s under `perf record`, each sample charged to a stage by
//! benches/common/profile.rs; a `"profile": true` line per program and rate). Without `--bench` (`cargo test --benches`): 20 ConfigMaps, one run, one
//! rate of 50/s for 2 s, both programs, asserting only that the updates arrived.

#[path = "common/mod.rs"]
mod common;
#[path = "common/floor.rs"]
mod floor;
#[path = "common/live.rs"]
mod live;
#[path = "common/profile.rs"]
mod profile;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floor::Floor;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use live::Bridge;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, Timestamp};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Value, json};

const PARTITIONS: i32 = 3;
/// How long the read-back waits for a phase's next record before it counts the rest lost.
const IDLE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq)]
enum Program {
    Deltaship,
    DeltashipFenced,
    Informer,
    Floor,
}

const PROGRAMS: [Program; 4] = [Program::Deltaship, Program::DeltashipFenced, Program::Informer, Program::Floor];

impl Program {
    /// DELTASHIP_TEST_BENCH_PROGRAMS (comma separated names) limits the programs.
    fn selected(self) -> bool {
        std::env::var("DELTASHIP_TEST_BENCH_PROGRAMS").map_or(true, |list| list.split(',').any(|n| n.trim() == self.as_str()))
    }

    fn as_str(self) -> &'static str {
        match self {
            Program::Deltaship => "deltaship",
            Program::DeltashipFenced => "deltaship_fenced",
            Program::Informer => "informer",
            Program::Floor => "floor",
        }
    }
}

/// What one rate showed for one program.
struct Phase {
    program: Program,
    rate: f64,
    planned: usize,
    accepted: usize,
    reached_per_sec: f64,
    delivered: usize,
    cpu_secs: f64,
    /// CPU of the API server and its etcd while the load ran: the writes, and the watch
    /// events they send to the program (none for the floor, which writes to Kafka only).
    server_cpu_secs: f64,
    /// CPU of this process (the load generator) while the load ran.
    load_cpu_secs: f64,
    /// Latency per delivered update, ms.
    latencies: Vec<f64>,
    timestamp_type: &'static str,
}

impl Phase {
    /// What one accepted write cost the API server and etcd, and the load generator, µs.
    fn write_cost_us(&self) -> Option<(f64, f64)> {
        (self.accepted > 0).then(|| (self.server_cpu_secs * 1e6 / self.accepted as f64, self.load_cpu_secs * 1e6 / self.accepted as f64))
    }

    fn cpu_us_per_event(&self) -> Option<f64> {
        (self.delivered > 0).then(|| self.cpu_secs * 1e6 / self.delivered as f64)
    }
}

/// The load of a phase.
struct Load<'a> {
    client: &'a Client,
    ns: &'a str,
    count: usize,
    rate: f64,
    secs: f64,
    concurrency: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(floor::ARG) {
        return floor::producer(&args[2..]);
    }
    let live::Setup { bench, counts, runs, bin, brokers, rt, client } = live::setup("10000");
    let rates: Vec<f64> = common::env_or("DELTASHIP_TEST_BENCH_RATES", if bench { "100,300,1000,3000" } else { "50" }.to_string())
        .split(',')
        .map(|r| r.trim().parse().expect("DELTASHIP_TEST_BENCH_RATES: updates per second, comma separated"))
        .collect();
    let secs: f64 = common::env_or("DELTASHIP_TEST_BENCH_LIVE_SECS", if bench { 20.0 } else { 2.0 });
    let concurrency: usize = common::env_or("DELTASHIP_TEST_BENCH_LIVE_CONCURRENCY", 64);
    let informer = informer_binary();
    let kubeconfig = common::test_env("KUBECONFIG");
    for count in counts {
        let ns = live::namespace(count, bench);
        rt.block_on(live::prepare(&client, &ns, count, "live"));
        let record = rt.block_on(Api::<ConfigMap>::namespaced(client.clone(), &ns).get(&live::configmap_name(0))).expect("a bench ConfigMap");
        let record = floor::template(serde_json::to_value(record).unwrap());
        let mut results: Vec<(usize, Phase)> = Vec::new();
        let programs = Programs { bin: &bin, brokers: &brokers, ns: &ns, informer: &informer, kubeconfig: &kubeconfig, record: &record };
        for run in 0..runs {
            for program in PROGRAMS.into_iter().filter(|p| p.selected()) {
                let (mut running, started) = programs.start(&rt, program);
                let synced_at = running.wait_synced();
                eprintln!("live: {}: initial sync of {count} acknowledged after {synced_at:.1} s", program.as_str());
                for &rate in &rates {
                    let load = Load { client: &client, ns: &ns, count, rate, secs, concurrency };
                    let phase = run_phase(&rt, &load, &brokers, &started.topic, &mut running, program, &format!("{}r{rate}", started.id));
                    println!(
                        "{}",
                        json!({"bench": "live", "objects": count, "run": run, "program": program.as_str(), "rate": rate, "secs": secs,
                               "planned": phase.planned, "accepted": phase.accepted, "reached_per_sec": phase.reached_per_sec,
                               "delivered": phase.delivered, "cpu_secs": phase.cpu_secs, "cpu_us_per_event": phase.cpu_us_per_event(),
                               "server_us_per_write": phase.write_cost_us().map(|c| c.0), "load_us_per_write": phase.write_cost_us().map(|c| c.1),
                               "latency_ms": {"p50": percentile(&phase.latencies, 0.5), "p99": percentile(&phase.latencies, 0.99)},
                               "timestamp_type": phase.timestamp_type, "synced_secs": synced_at, "smoke": !bench})
                    );
                    if !bench {
                        assert!(phase.delivered > 0, "{}: none of the {} accepted updates at {rate}/s reached Kafka", program.as_str(), phase.accepted);
                    }
                    results.push((run, phase));
                }
                programs.stop(&rt, running, &started);
            }
        }
        if let Ok(dir) = std::env::var("DELTASHIP_TEST_BENCH_PROFILE") {
            let load = |rate| Load { client: &client, ns: &ns, count, rate, secs, concurrency };
            profile_phases(&rt, &programs, Path::new(&dir), count, &rates, load);
        }
        summarize(count, &rates, &results, bench);
        if bench {
            // Every ConfigMap was patched unless the phases sent fewer updates than there are.
            let touched = results.iter().map(|(_, p)| p.planned).max().unwrap_or(0).min(count);
            rt.block_on(remove_seq(&client, &ns, touched));
        }
        rt.block_on(live::clean_up(&client, &ns, count, bench, "live"));
    }
}

/// What starting a program needs.
struct Programs<'a> {
    bin: &'a str,
    brokers: &'a str,
    ns: &'a str,
    informer: &'a Path,
    kubeconfig: &'a str,
    record: &'a str,
}

/// A started program's names: its id, and the topic it writes.
struct Started {
    id: String,
    topic: String,
}

impl Programs<'_> {
    /// Starts `program` on a fresh topic.
    fn start(&self, rt: &tokio::runtime::Runtime, program: Program) -> (Running, Started) {
        let id = common::unique("dsbench-live");
        let topic = live::events_topic(&id);
        rt.block_on(create_topic(self.brokers, &topic));
        let (ns, brokers) = (self.ns, self.brokers);
        let running = match program {
            Program::Deltaship => {
                let port = live::free_port();
                Running::Bridge(Bridge::spawn(self.bin, &id, port, &live::kafka_config("bench", ns, brokers, &id, port, "warn")))
            }
            Program::DeltashipFenced => {
                let port = live::free_port();
                let mut config = live::kafka_config("bench", ns, brokers, &id, port, "warn");
                config.push_str(&format!("[leader_election]\nenabled = true\nnamespace = \"{ns}\"\nlease_name = \"{id}\"\nfence = true\n"));
                Running::Bridge(Bridge::spawn(self.bin, &id, port, &config))
            }
            Program::Informer => Running::Informer(Informer::spawn(self.informer, &id, self.kubeconfig, brokers, &topic, ns)),
            Program::Floor => Running::Floor(Floor::spawn(&id, brokers, &topic, ns, self.record)),
        };
        (running, Started { id, topic })
    }

    /// Stops a program and deletes its topics.
    fn stop(&self, rt: &tokio::runtime::Runtime, running: Running, started: &Started) {
        running.stop();
        rt.block_on(live::delete_topic(self.brokers, &started.topic));
        rt.block_on(live::delete_topic(self.brokers, &live::checkpoint_topic(&started.id)));
    }
}

/// After the measured runs, one more of deltaship, deltaship_fenced and the floor, each rate
/// under `perf record` (benches/common/profile.rs): where each program's CPU per update goes,
/// stage by stage. perf's sampling costs the program a little, so these phases are not in
/// the medians; their own CPU per update is printed beside the stages.
fn profile_phases<'a>(rt: &tokio::runtime::Runtime, programs: &Programs, dir: &Path, count: usize, rates: &[f64], load: impl Fn(f64) -> Load<'a>) {
    std::fs::create_dir_all(dir).unwrap();
    let rates: Vec<f64> = rates.iter().copied().filter(|r| *r <= 300.0).collect();
    for program in [Program::Deltaship, Program::DeltashipFenced, Program::Floor].into_iter().filter(|p| p.selected()) {
        let (mut running, started) = programs.start(rt, program);
        running.wait_synced();
        for &rate in &rates {
            let path = dir.join(format!("{}-{count}-{rate}.perf", program.as_str()));
            let recording = profile::Recording::start(running.pid(), &path);
            let phase = run_phase(rt, &load(rate), programs.brokers, &started.topic, &mut running, program, &format!("{}p{rate}", started.id));
            let (stages, samples) = recording.stop();
            println!(
                "{}",
                json!({"bench": "live", "profile": true, "objects": count, "program": program.as_str(), "rate": rate,
                       "delivered": phase.delivered, "cpu_us_per_event": phase.cpu_us_per_event(), "samples": samples, "stages": stages})
            );
        }
        programs.stop(rt, running, &started);
    }
}

/// Median (min-max) per rate and program, and deltaship's CPU per event over the informer's
/// in the same run, per rate.
fn summarize(count: usize, rates: &[f64], results: &[(usize, Phase)], bench: bool) {
    let s = |xs: Vec<f64>| -> Value {
        if xs.is_empty() {
            return Value::Null;
        }
        let (median, min, max) = common::stats(&xs);
        json!({"median": median, "min": min, "max": max})
    };
    for &rate in rates {
        for program in PROGRAMS {
            let of: Vec<&Phase> = results.iter().map(|(_, p)| p).filter(|p| p.rate == rate && p.program == program).collect();
            println!(
                "{}",
                json!({"bench": "live", "summary": true, "objects": count, "rate": rate, "program": program.as_str(), "runs": of.len(),
                       "cpu_us_per_event": s(of.iter().filter_map(|p| p.cpu_us_per_event()).collect()),
                       "latency_p50_ms": s(of.iter().filter_map(|p| percentile(&p.latencies, 0.5)).collect()),
                       "latency_p99_ms": s(of.iter().filter_map(|p| percentile(&p.latencies, 0.99)).collect()),
                       "accepted": s(of.iter().map(|p| p.accepted as f64).collect()),
                       "delivered": s(of.iter().map(|p| p.delivered as f64).collect()),
                       "delivered_over_accepted": s(of.iter().filter(|p| p.accepted > 0).map(|p| p.delivered as f64 / p.accepted as f64).collect()),
                       "reached_per_sec": s(of.iter().map(|p| p.reached_per_sec).collect()),
                       "server_us_per_write": s(of.iter().filter_map(|p| p.write_cost_us().map(|c| c.0)).collect()),
                       "load_us_per_write": s(of.iter().filter_map(|p| p.write_cost_us().map(|c| c.1)).collect()), "smoke": !bench})
            );
        }
        let of = |run: usize, program: Program| {
            results.iter().find(|(r, p)| *r == run && p.rate == rate && p.program == program).and_then(|(_, p)| p.cpu_us_per_event())
        };
        let runs = results.iter().map(|(r, _)| *r).max().map_or(0, |r| r + 1);
        let ratios = |a: Program, b: Program| -> Vec<f64> { (0..runs).filter_map(|run| Some(of(run, a)? / of(run, b)?)).collect() };
        println!(
            "{}",
            json!({"bench": "live", "ratio": true, "objects": count, "rate": rate,
                   "cpu_deltaship_over_informer": s(ratios(Program::Deltaship, Program::Informer)),
                   "cpu_fenced_over_deltaship": s(ratios(Program::DeltashipFenced, Program::Deltaship)),
                   "cpu_floor_over_informer": s(ratios(Program::Floor, Program::Informer)), "smoke": !bench})
        );
    }
}

/// One phase: the paced load, then the topic read back; the program's CPU over both.
fn run_phase(rt: &tokio::runtime::Runtime, load: &Load, brokers: &str, topic: &str, running: &mut Running, program: Program, tag: &str) -> Phase {
    let consumer = consumer_at_end(brokers, topic);
    let cpu_before = live::cpu_secs(running.pid());
    let servers = live::api_server_pids();
    let server_cpu = || servers.iter().map(|p| live::cpu_secs(*p)).sum::<f64>();
    let (server_before, load_before) = (server_cpu(), common::process_cpu());
    let (answers, elapsed) = match running {
        Running::Floor(f) => f.phase(load.rate, load.secs, tag, load.count),
        _ => rt.block_on(drive(load, tag)),
    };
    let (server_cpu_secs, load_cpu_secs) = (server_cpu() - server_before, common::process_cpu() - load_before);
    let accepted = answers.iter().flatten().count();
    let appended = read_back(&consumer, tag, accepted, Duration::from_secs_f64(load.secs * 3.0 + 60.0));
    let cpu_secs = live::cpu_secs(running.pid()) - cpu_before;
    running.check_alive();
    let mut timestamp_type = "none";
    let latencies = appended
        .iter()
        .filter_map(|(seq, ts)| {
            let (millis, kind) = match ts {
                Timestamp::LogAppendTime(t) => (*t, "LogAppendTime"),
                Timestamp::CreateTime(t) => (*t, "CreateTime"),
                Timestamp::NotAvailable => return None,
            };
            timestamp_type = kind;
            Some((millis - answers.get(*seq)?.as_ref()?) as f64)
        })
        .collect();
    Phase {
        program,
        rate: load.rate,
        planned: answers.len(),
        accepted,
        reached_per_sec: accepted as f64 / elapsed.as_secs_f64(),
        delivered: appended.len(),
        cpu_secs,
        server_cpu_secs,
        load_cpu_secs,
        latencies,
        timestamp_type,
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Sends `rate * secs` merge patches of `data.seq` = `<tag>-<n>`, the n-th at n/rate s, to
/// ConfigMap n mod count, at most `concurrency` in flight, none more than 1 s after `secs`
/// (then the rate reached is lower). Per patch sent,
/// when its answer came (ms since the epoch), `None` when it failed; and how long it took
/// until the last answer.
async fn drive(load: &Load<'_>, tag: &str) -> (Vec<Option<i64>>, Duration) {
    let api = Api::<ConfigMap>::namespaced(load.client.clone(), load.ns);
    let slots = Arc::new(tokio::sync::Semaphore::new(load.concurrency));
    let planned = (load.rate * load.secs).round() as usize;
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs_f64(load.secs);
    let mut sent = Vec::with_capacity(planned);
    for n in 0..planned {
        tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / load.rate)).await;
        let slot = slots.clone().acquire_owned().await.unwrap();
        // Behind schedule by more than its jitter: the API server answered too slowly for
        // the patches in flight to hold the rate.
        if tokio::time::Instant::now() >= end + Duration::from_secs(1) {
            eprintln!("live: only {n} of {planned} patches sent in {:.0} s + 1 s at {} in flight", load.secs, load.concurrency);
            break;
        }
        let (api, name) = (api.clone(), live::configmap_name(n % load.count));
        let patch = json!({"data": {"seq": format!("{tag}-{n}")}});
        sent.push(tokio::spawn(async move {
            let answer = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
            drop(slot);
            answer.map(|_| now_ms()).map_err(|e| eprintln!("live: patch of {name} failed: {e}")).ok()
        }));
    }
    let mut answers = Vec::with_capacity(sent.len());
    for task in sent {
        answers.push(task.await.unwrap());
    }
    (answers, start.elapsed())
}

/// The topic, `PARTITIONS` partitions, timestamped by the broker when it appends a record.
async fn create_topic(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin client");
    let new = NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1)).set("message.timestamp.type", "LogAppendTime");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for r in admin.create_topics(&[new], &opts).await.expect("create the bench topic") {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

/// A consumer of every partition of `topic` from its current end.
fn consumer_at_end(brokers: &str, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", common::unique("dsbench-live-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("a Kafka consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("the topic's watermarks");
        tpl.add_partition_offset(topic, p, Offset::Offset(high)).unwrap();
    }
    consumer.assign(&tpl).expect("assign partitions");
    consumer
}

/// Reads until `expected` distinct sequence numbers of `tag` arrived, none arrived for
/// `IDLE`, or `timeout` passed: each one's first record's timestamp.
fn read_back(consumer: &BaseConsumer, tag: &str, expected: usize, timeout: Duration) -> HashMap<usize, Timestamp> {
    let needle = format!("\"seq\":\"{tag}-");
    let deadline = Instant::now() + timeout;
    let mut last = Instant::now();
    let mut seen = HashMap::new();
    while seen.len() < expected && last.elapsed() < IDLE && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if let Some(seq) = m.payload().and_then(|v| sequence(v, needle.as_bytes())) {
                    seen.entry(seq).or_insert(m.timestamp());
                    last = Instant::now();
                }
            }
            Some(Err(e)) => panic!("reading the bench topic failed: {e}"),
            None => {}
        }
    }
    seen
}

/// The number after `needle` in `value`, up to the closing quote.
fn sequence(value: &[u8], needle: &[u8]) -> Option<usize> {
    let at = value.windows(needle.len()).position(|w| w == needle)? + needle.len();
    let digits = value[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&value[at..at + digits]).ok()?.parse().ok()
}

/// The value below which `q` of `xs` lie (nearest rank); `None` for none.
fn percentile(xs: &[f64], q: f64) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied()
}

/// Removes `data.seq` from the first `count` ConfigMaps.
async fn remove_seq(client: &Client, ns: &str, count: usize) {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let patch = json!({"data": {"seq": null}});
    live::for_each_retried((0..count).map(live::configmap_name).collect(), |name| {
        let (api, patch) = (api.clone(), patch.clone());
        async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop) }
    })
    .await;
}

/// The program under load.
enum Running {
    Bridge(Bridge),
    Informer(Informer),
    Floor(Floor),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Bridge(b) => b.pid(),
            Running::Informer(i) => i.child.id(),
            Running::Floor(f) => f.pid(),
        }
    }

    /// Waits until the initial sync is acknowledged by Kafka; seconds since the start.
    fn wait_synced(&mut self) -> f64 {
        match self {
            Running::Bridge(b) => {
                let samples = b.sample_until(Duration::from_secs(900), |s| s.metrics.sum("deltaship_events_total", &[("type", "sync.completed")]) >= 1.0);
                samples.last().unwrap().secs
            }
            Running::Informer(i) => i.wait_synced(Duration::from_secs(900)),
            Running::Floor(f) => f.wait_ready(),
        }
    }

    /// Panics with the program's log when it exited.
    fn check_alive(&mut self) {
        match self {
            // A sample fails when the bridge exited.
            Running::Bridge(b) => drop(b.sample_until(Duration::from_secs(10), |_| true)),
            Running::Informer(i) => {
                if let Some(status) = i.child.try_wait().unwrap() {
                    panic!("the informer exited ({status}):\n{}", i.log());
                }
            }
            Running::Floor(f) => f.check_alive(),
        }
    }

    fn stop(self) {
        match self {
            Running::Bridge(b) => {
                let (status, log) = b.stop();
                if !status.is_some_and(|s| s.success()) {
                    eprintln!("live: deltaship did not stop cleanly ({status:?}):\n{log}");
                }
            }
            Running::Informer(i) => i.stop(),
            Running::Floor(f) => f.stop(),
        }
    }
}

/// The informer program, its stderr in a file.
struct Informer {
    child: Child,
    synced: std::sync::mpsc::Receiver<String>,
    started: Instant,
    log: PathBuf,
}

impl Informer {
    fn spawn(bin: &Path, id: &str, kubeconfig: &str, brokers: &str, topic: &str, ns: &str) -> Informer {
        let log = std::env::temp_dir().join(format!("{id}-informer.log"));
        let started = Instant::now();
        let mut child = Command::new(bin)
            .args(["-kubeconfig", kubeconfig, "-brokers", brokers, "-topic", topic, "-namespace", ns])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, synced) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Informer { child, synced, started, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_synced(&mut self, timeout: Duration) -> f64 {
        match self.synced.recv_timeout(timeout) {
            Ok(line) if line.starts_with("synced ") => self.started.elapsed().as_secs_f64(),
            other => panic!("the informer did not sync ({other:?}):\n{}", self.log()),
        }
    }

    /// SIGTERM (it flushes), then a kill after 20 s.
    #[allow(unsafe_code)]
    fn stop(mut self) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                eprintln!("live: the informer did not stop within 20 s:\n{}", self.log());
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The informer program built from benches/informer (once per version of its sources).
fn informer_binary() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/informer");
    let mut sources = Vec::new();
    for file in ["go.mod", "go.sum", "main.go"] {
        sources.extend(std::fs::read(src.join(file)).unwrap_or_else(|e| panic!("{}/{file}: {e}", src.display())));
    }
    let cache = std::env::var("DELTASHIP_ENV_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME or DELTASHIP_ENV_CACHE is set")).join(".cache/deltaship-env"))
        .join("bench");
    let bin = cache.join(format!("informer-{:016x}", xxhash_rust::xxh3::xxh3_64(&sources)));
    if bin.exists() {
        return bin;
    }
    std::fs::create_dir_all(&cache).unwrap();
    let partial = bin.with_extension("partial");
    let started = Instant::now();
    let status = Command::new("go")
        .args(["build", "-buildvcs=false", "-o"])
        .arg(&partial)
        .arg(".")
        .current_dir(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run `go build` for {}: {e}; the live bench needs the Go toolchain", src.display()));
    assert!(status.success(), "`go build` of {} failed ({status})", src.display());
    std::fs::rename(&partial, &bin).unwrap();
    eprintln!("live: built {} in {:.0} s", bin.display(), started.elapsed().as_secs_f64());
    bin
}
