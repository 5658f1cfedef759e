//! Memory and time to synced of the real bridge (`deltaship run`, Kafka sink) watching
//! the ConfigMaps of one namespace of the test API server (tests/env), at 0, 10k and 100k
//! ConfigMaps of about 1 KB each.
//!
//!   tests/env/up && source tests/env/.state/env.sh
//!   cargo build --release && cargo bench --bench memory
//!
//! Per run: starts the binary, samples /proc/<pid>/status (VmRSS, VmHWM) and /readyz every
//! 100 ms, and /metrics only in the samples where /readyz answers 200 until then
//! (`Scrape::OnceReady`; a scrape ten times a second costs CPU and memory that a Prometheus
//! every 15 s does not), none in the steady phase. `ready` = the first 200 of /readyz (every
//! initial sync acked and the sink probed reachable, the first probe at start); `synced` =
//! the first sample showing a `sync.completed` acknowledged by Kafka
//! (`deltaship_events_total{type="sync.completed"}` counts acknowledged events), which with
//! one watch and a reachable sink is the sample where it is ready; `peak` = the highest RSS
//! until synced (VmHWM);
//! `steady` = the median RSS from 5 s to 10 s after ready; `heap allocated` = what the
//! heap's allocations hold at its end (`deltaship_heap_allocated_bytes`, one scrape). Time counts from the spawn.
//!
//! The namespaces `deltaship-bench-<count>` are created once and reused when they hold
//! the right ConfigMaps (plus the `kube-root-ca.crt` every namespace has). Namespaces of
//! more than 10k objects are deleted afterwards (they weigh on the shared API server)
//! unless DELTASHIP_TEST_BENCH_KEEP_NAMESPACES=1.
//!
//! Beside each run, side by side on the same ConfigMaps (`common/list.rs`): the bridge with
//! `kubernetes.streaming_lists = true`, and a bare client reading them as a paged list and
//! as a streaming list; the lines `{"bench": "sync", ...}` give each one's time and CPU, what
//! the API server with its etcd and the Kafka broker spent meanwhile (the same two cores
//! serve them all), and the bridge's time over the bare read's, per run. With
//! DELTASHIP_TEST_BENCH_PROFILE (a directory), one more paged sync at each count of 10,000 or
//! more runs under `perf record` (benches/common/profile.rs): its line `"profile": true` charges the
//! bridge's CPU until synced to its stages.
//!
//! Environment: DELTASHIP_TEST_BENCH_COUNTS (default `0,10000,100000`), DELTASHIP_TEST_BENCH_RUNS
//! (default 3), DELTASHIP_TEST_BENCH_BIN (default: the bench build's deltaship binary, i.e.
//! target/release/deltaship). Without `--bench` (`cargo test --benches`): one run at 20
//! ConfigMaps as a smoke test.

#[path = "common/mod.rs"]
mod common;
#[path = "common/list.rs"]
mod list;
#[path = "common/live.rs"]
mod live;
#[path = "common/profile.rs"]
mod profile;

use std::path::Path;
use std::time::Duration;

use live::{Bridge, Sample, Scrape};
use serde_json::json;

fn main() {
    let live::Setup { bench, counts, runs, bin, brokers, rt, client } = live::setup("0,10000,100000");
    let steady_secs: u64 = if bench { 10 } else { 2 };
    let servers = Servers { api: live::api_server_pids(), brokers: live::broker_pids() };
    for count in counts {
        let ns = live::namespace(count, bench);
        rt.block_on(live::prepare(&client, &ns, count, "memory"));
        let mut results = Vec::new();
        let mut syncs = Vec::new();
        for run in 0..runs {
            let r = run_bridge(&bin, &ns, &brokers, &servers, steady_secs, false);
            // Its time to synced only: no steady phase.
            let streaming = run_bridge(&bin, &ns, &brokers, &servers, 0, true);
            let sync = SideBySide {
                paged: r.sync.clone(),
                streaming: streaming.sync.clone(),
                bare_paged: bare(&servers, || rt.block_on(list::paged(&client, &ns))),
                bare_streaming: bare(&servers, || rt.block_on(list::streaming(&client, &ns))),
            };
            println!("{}", sync.line(count, run, !bench));
            rt.block_on(live::delete_topic(&brokers, &streaming.topic));
            rt.block_on(live::delete_topic(&brokers, &streaming.checkpoint_topic));
            syncs.push(sync);
            println!(
                "{}",
                json!({"bench": "memory", "objects": count, "run": run, "synced_secs": r.sync.secs, "ready_secs": r.ready_secs,
                       "peak_rss_mb": r.peak_mb, "steady_rss_mb": r.steady_mb, "heap_allocated_mb": r.heap_mb,
                       "sync_cpu_secs": r.sync.cpu_secs, "samples": r.samples, "smoke": !bench})
            );
            rt.block_on(live::delete_topic(&brokers, &r.topic));
            rt.block_on(live::delete_topic(&brokers, &r.checkpoint_topic));
            results.push(r);
        }
        let col = |f: fn(&Run) -> f64| common::stats(&results.iter().map(f).collect::<Vec<_>>());
        let s = |(median, min, max): (f64, f64, f64)| json!({"median": median, "min": min, "max": max});
        let ratios: Vec<f64> = results.iter().map(|r| r.peak_mb / r.steady_mb).collect();
        println!(
            "{}",
            json!({"bench": "memory", "summary": true, "objects": count, "runs": results.len(),
                   "synced_secs": s(col(|r| r.sync.secs)), "ready_secs": s(col(|r| r.ready_secs)), "peak_rss_mb": s(col(|r| r.peak_mb)),
                   "steady_rss_mb": s(col(|r| r.steady_mb)), "heap_allocated_mb": s(col(|r| r.heap_mb)), "peak_over_steady": s(common::stats(&ratios)),
                   "sync_cpu_secs": s(col(|r| r.sync.cpu_secs)), "smoke": !bench})
        );
        println!("{}", SideBySide::summary(&syncs, count, !bench));
        if let Ok(dir) = std::env::var("DELTASHIP_TEST_BENCH_PROFILE")
            && count >= PROFILED_FROM
        {
            profile_sync(&rt, &bin, &ns, &brokers, count, Path::new(&dir));
        }
        rt.block_on(live::clean_up(&client, &ns, count, bench, "memory"));
    }
}

/// The counts whose syncs the profile pass records: the large ones, where the stages can be
/// compared per object.
const PROFILED_FROM: usize = 10_000;

/// After the measured runs at a count of at least `PROFILED_FROM`, one more paged sync with the bridge under
/// `perf record` from its start (benches/common/profile.rs), stopped once synced: where its
/// CPU until synced goes, stage by stage. perf's sampling costs the bridge a little, so this
/// sync is not in the medians; its own CPU is printed beside the stages.
fn profile_sync(rt: &tokio::runtime::Runtime, bin: &str, ns: &str, brokers: &str, count: usize, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("sync-{count}.perf"));
    let id = common::unique("dsbench-prof");
    let port = live::free_port();
    let config = live::kafka_config("bench", ns, brokers, &id, port, "warn");
    let mut bridge = Bridge::spawn_under(&profile::record_command(&path), bin, &id, port, &config);
    bridge.scrape(Scrape::OnceReady);
    let samples = bridge.sample_until(Duration::from_secs(900), |s| s.ready && synced(s));
    let cpu_secs = samples.last().expect("a sample").cpu_secs;
    bridge.stop();
    let (stages, recorded) = profile::charge(&path);
    println!("{}", json!({"bench": "sync", "profile": true, "objects": count, "cpu_secs": cpu_secs, "samples": recorded, "stages": stages}));
    rt.block_on(live::delete_topic(brokers, &live::events_topic(&id)));
    rt.block_on(live::delete_topic(brokers, &live::checkpoint_topic(&id)));
}

/// The servers a sync leans on, whose CPU it costs on the same cores: the API server and its
/// etcd, and the Kafka broker the bridge produces to.
struct Servers {
    api: Vec<u32>,
    brokers: Vec<u32>,
}

impl Servers {
    fn cpu(&self) -> ServerCpu {
        let sum = |pids: &[u32]| pids.iter().map(|p| live::cpu_secs(*p)).sum::<f64>();
        ServerCpu { api: sum(&self.api), broker: sum(&self.brokers) }
    }
}

/// CPU seconds of the API server with its etcd, and of the broker.
#[derive(Clone, Copy)]
struct ServerCpu {
    api: f64,
    broker: f64,
}

impl ServerCpu {
    fn minus(self, before: ServerCpu) -> ServerCpu {
        ServerCpu { api: self.api - before.api, broker: self.broker - before.broker }
    }
}

/// A bare read of the ConfigMaps (`read`) with what the servers spent meanwhile.
fn bare(servers: &Servers, read: impl FnOnce() -> list::Read) -> UntilSynced {
    let before = servers.cpu();
    let read = read();
    UntilSynced { secs: read.secs, cpu_secs: read.cpu_secs, servers: servers.cpu().minus(before), objects: read.objects }
}

/// One read of the ConfigMaps until synced: wall and CPU seconds of the reader, and what the
/// servers spent meanwhile; objects read (the bare reads count them; the bridge's is 0).
#[derive(Clone)]
struct UntilSynced {
    secs: f64,
    cpu_secs: f64,
    servers: ServerCpu,
    objects: usize,
}

struct Run {
    sync: UntilSynced,
    ready_secs: f64,
    peak_mb: f64,
    steady_mb: f64,
    /// What the heap's allocations held at the end of the steady phase
    /// (`deltaship_heap_allocated_bytes`): the rest of the steady RSS is code, stacks and
    /// free memory the allocator keeps.
    heap_mb: f64,
    samples: usize,
    topic: String,
    checkpoint_topic: String,
}

/// Whether the sink acknowledged a `sync.completed` (deltaship_events_total counts events
/// acknowledged by the sink).
fn synced(s: &Sample) -> bool {
    s.metrics.sum("deltaship_events_total", &[("type", "sync.completed")]) >= 1.0
}

/// One run's syncs side by side: the bridge's (time to synced, CPU until synced) with a
/// paged and with a streaming list, and the bare reads of the same ConfigMaps.
struct SideBySide {
    paged: UntilSynced,
    streaming: UntilSynced,
    bare_paged: UntilSynced,
    bare_streaming: UntilSynced,
}

impl SideBySide {
    /// Name, then the figures of each of the four: seconds, CPU seconds of the reader, of the
    /// API server with etcd, of the broker.
    fn columns(&self) -> [(&'static str, [f64; 4]); 4] {
        let figures = |s: &UntilSynced| [s.secs, s.cpu_secs, s.servers.api, s.servers.broker];
        [
            ("bridge_paged", figures(&self.paged)),
            ("bridge_streaming", figures(&self.streaming)),
            ("bare_paged", figures(&self.bare_paged)),
            ("bare_streaming", figures(&self.bare_streaming)),
        ]
    }

    /// The bridge's time over the bare read's: paged, streaming.
    fn ratios(&self) -> (f64, f64) {
        (self.paged.secs / self.bare_paged.secs, self.streaming.secs / self.bare_streaming.secs)
    }

    fn line(&self, count: usize, run: usize, smoke: bool) -> serde_json::Value {
        let mut line = json!({"bench": "sync", "objects": count, "run": run, "smoke": smoke,
                              "bare_objects": [self.bare_paged.objects, self.bare_streaming.objects],
                              "paged_over_bare": self.ratios().0, "streaming_over_bare": self.ratios().1});
        for (name, figures) in self.columns() {
            for (suffix, value) in FIGURES.iter().zip(figures) {
                line[format!("{name}_{suffix}")] = json!(value);
            }
        }
        line
    }

    fn summary(syncs: &[SideBySide], count: usize, smoke: bool) -> serde_json::Value {
        let s = |xs: Vec<f64>| {
            let (median, min, max) = common::stats(&xs);
            json!({"median": median, "min": min, "max": max})
        };
        let mut line = json!({"bench": "sync", "summary": true, "objects": count, "runs": syncs.len(), "smoke": smoke,
                              "paged_over_bare": s(syncs.iter().map(|x| x.ratios().0).collect()),
                              "streaming_over_bare": s(syncs.iter().map(|x| x.ratios().1).collect())});
        for (k, (name, _)) in syncs[0].columns().iter().enumerate() {
            for (f, suffix) in FIGURES.iter().enumerate() {
                line[format!("{name}_{suffix}")] = s(syncs.iter().map(|x| x.columns()[k].1[f]).collect());
            }
        }
        line
    }
}

/// The keys' suffixes of [`SideBySide::columns`]'s figures.
const FIGURES: [&str; 4] = ["secs", "cpu_secs", "api_cpu_secs", "broker_cpu_secs"];

fn run_bridge(bin: &str, ns: &str, brokers: &str, servers: &Servers, steady_secs: u64, streaming: bool) -> Run {
    let id = common::unique("dsbench-mem");
    let port = live::free_port();
    let mut config = live::kafka_config("bench", ns, brokers, &id, port, "warn");
    if streaming {
        config.push_str("[kubernetes]\nstreaming_lists = true\n");
    }
    let before = servers.cpu();
    let mut bridge = Bridge::spawn(bin, &id, port, &config);
    bridge.scrape(Scrape::OnceReady);
    let mut samples = bridge.sample_until(Duration::from_secs(900), |s| s.ready && synced(s));
    let servers_until_synced = servers.cpu().minus(before);
    let ready = samples.last().expect("a sample").secs;
    // The steady phase needs no /metrics but its last sample: what the heap's allocations hold.
    bridge.scrape(Scrape::Never);
    samples.extend(bridge.sample_until(Duration::from_secs(900), |s| s.secs > ready + steady_secs as f64));
    bridge.scrape(Scrape::Always);
    let last = bridge.sample_until(Duration::from_secs(10), |_| true);
    let heap_mb = last[0].metrics.sum("deltaship_heap_allocated_bytes", &[]) / 1e6;
    bridge.stop();
    let at_synced = samples.iter().find(|s| synced(s)).expect("synced before ready");
    let synced = at_synced.secs;
    let peak_sampled = samples.iter().filter(|s| s.secs <= synced).map(|s| s.rss_mb).fold(0.0, f64::max);
    let steady: Vec<f64> = samples.iter().filter(|s| s.secs >= ready + steady_secs as f64 / 2.0).map(|s| s.rss_mb).collect();
    Run {
        sync: UntilSynced { secs: synced, cpu_secs: at_synced.cpu_secs, servers: servers_until_synced, objects: 0 },
        ready_secs: ready,
        peak_mb: at_synced.hwm_mb.max(peak_sampled),
        steady_mb: common::stats(&steady).0,
        heap_mb,
        samples: samples.len(),
        topic: live::events_topic(&id),
        checkpoint_topic: live::checkpoint_topic(&id),
    }
}
