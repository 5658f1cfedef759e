//! Memory and time to synced of the real bridge (`deltaship run`, Kafka sink) watching
//! the ConfigMaps of one namespace of the test API server (tests/env), at 0, 10k and 100k
//! ConfigMaps of about 1 KB each.
//!
//!   tests/env/up && source tests/env/.state/env.sh
//!   cargo build --release && cargo bench --bench memory
//!
//! Per run: starts the binary, samples /proc/<pid>/status (VmRSS, VmHWM), /metrics and
//! /readyz every 100 ms. `synced` = the first `sync.completed` acknowledged by Kafka
//! (`deltaship_events_total{type="sync.completed"}` counts acknowledged events); `ready` =
//! the first 200 of /readyz (every initial sync acked and the sink probed reachable, the
//! first probe comes 1 s after start); `peak` = the highest RSS until synced (VmHWM);
//! `steady` = the median RSS from 5 s to 10 s after ready. Time counts from the spawn.
//!
//! The namespaces `deltaship-bench-<count>` are created once and reused when they hold
//! the right ConfigMaps (plus the `kube-root-ca.crt` every namespace has). Namespaces of
//! more than 10k objects are deleted afterwards (they weigh on the shared API server)
//! unless DELTASHIP_TEST_BENCH_KEEP_NAMESPACES=1.
//!
//! Beside each run, side by side on the same ConfigMaps (`common/list.rs`): the bridge with
//! `kubernetes.streaming_lists = true`, and a bare client reading them as a paged list and
//! as a streaming list; the lines `{"bench": "sync", ...}` give each one's time and CPU and
//! the bridge's over the bare read's, per run.
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

use std::time::Duration;

use live::{Bridge, Sample};
use serde_json::json;

fn main() {
    let live::Setup { bench, counts, runs, bin, brokers, rt, client } = live::setup("0,10000,100000");
    let steady_secs: u64 = if bench { 10 } else { 2 };
    for count in counts {
        let ns = live::namespace(count, bench);
        rt.block_on(live::prepare(&client, &ns, count, "memory"));
        let mut results = Vec::new();
        let mut syncs = Vec::new();
        for run in 0..runs {
            let r = run_bridge(&bin, &ns, &brokers, steady_secs, false);
            // Its time to synced only: no steady phase.
            let streaming = run_bridge(&bin, &ns, &brokers, 0, true);
            let paged = rt.block_on(list::paged(&client, &ns));
            let streamed = rt.block_on(list::streaming(&client, &ns));
            let sync = SideBySide {
                paged: (r.synced_secs, r.sync_cpu_secs),
                streaming: (streaming.synced_secs, streaming.sync_cpu_secs),
                bare_paged: paged,
                bare_streaming: streamed,
            };
            println!("{}", sync.line(count, run, !bench));
            rt.block_on(live::delete_topic(&brokers, &streaming.topic));
            rt.block_on(live::delete_topic(&brokers, &streaming.checkpoint_topic));
            syncs.push(sync);
            println!(
                "{}",
                json!({"bench": "memory", "objects": count, "run": run, "synced_secs": r.synced_secs, "ready_secs": r.ready_secs,
                       "peak_rss_mb": r.peak_mb, "steady_rss_mb": r.steady_mb,
                       "sync_cpu_secs": r.sync_cpu_secs, "samples": r.samples, "smoke": !bench})
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
                   "synced_secs": s(col(|r| r.synced_secs)), "ready_secs": s(col(|r| r.ready_secs)), "peak_rss_mb": s(col(|r| r.peak_mb)),
                   "steady_rss_mb": s(col(|r| r.steady_mb)), "peak_over_steady": s(common::stats(&ratios)),
                   "sync_cpu_secs": s(col(|r| r.sync_cpu_secs)), "smoke": !bench})
        );
        println!("{}", SideBySide::summary(&syncs, count, !bench));
        rt.block_on(live::clean_up(&client, &ns, count, bench, "memory"));
    }
}

struct Run {
    synced_secs: f64,
    ready_secs: f64,
    peak_mb: f64,
    steady_mb: f64,
    sync_cpu_secs: f64,
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
    paged: (f64, f64),
    streaming: (f64, f64),
    bare_paged: list::Read,
    bare_streaming: list::Read,
}

impl SideBySide {
    /// Name, then (seconds, CPU seconds) of each of the four.
    fn columns(&self) -> [(&'static str, (f64, f64)); 4] {
        [
            ("bridge_paged", self.paged),
            ("bridge_streaming", self.streaming),
            ("bare_paged", (self.bare_paged.secs, self.bare_paged.cpu_secs)),
            ("bare_streaming", (self.bare_streaming.secs, self.bare_streaming.cpu_secs)),
        ]
    }

    /// The bridge's time over the bare read's: paged, streaming.
    fn ratios(&self) -> (f64, f64) {
        (self.paged.0 / self.bare_paged.secs, self.streaming.0 / self.bare_streaming.secs)
    }

    fn line(&self, count: usize, run: usize, smoke: bool) -> serde_json::Value {
        let mut line = json!({"bench": "sync", "objects": count, "run": run, "smoke": smoke,
                              "bare_objects": [self.bare_paged.objects, self.bare_streaming.objects],
                              "paged_over_bare": self.ratios().0, "streaming_over_bare": self.ratios().1});
        for (name, (secs, cpu)) in self.columns() {
            line[format!("{name}_secs")] = json!(secs);
            line[format!("{name}_cpu_secs")] = json!(cpu);
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
            line[format!("{name}_secs")] = s(syncs.iter().map(|x| x.columns()[k].1.0).collect());
            line[format!("{name}_cpu_secs")] = s(syncs.iter().map(|x| x.columns()[k].1.1).collect());
        }
        line
    }
}

fn run_bridge(bin: &str, ns: &str, brokers: &str, steady_secs: u64, streaming: bool) -> Run {
    let id = common::unique("dsbench-mem");
    let port = live::free_port();
    let mut config = live::kafka_config("bench", ns, brokers, &id, port, "warn");
    if streaming {
        config.push_str("[kubernetes]\nstreaming_lists = true\n");
    }
    let mut bridge = Bridge::spawn(bin, &id, port, &config);
    let mut ready_at: Option<f64> = None;
    let samples = bridge.sample_until(Duration::from_secs(900), |s| {
        if ready_at.is_none() && s.ready && synced(s) {
            ready_at = Some(s.secs);
        }
        ready_at.is_some_and(|r| s.secs > r + steady_secs as f64)
    });
    bridge.stop();
    let ready = ready_at.unwrap();
    let at_synced = samples.iter().find(|s| synced(s)).expect("synced before ready");
    let synced = at_synced.secs;
    let peak_sampled = samples.iter().filter(|s| s.secs <= synced).map(|s| s.rss_mb).fold(0.0, f64::max);
    let steady: Vec<f64> = samples.iter().filter(|s| s.secs >= ready + steady_secs as f64 / 2.0).map(|s| s.rss_mb).collect();
    Run {
        synced_secs: synced,
        ready_secs: ready,
        peak_mb: at_synced.hwm_mb.max(peak_sampled),
        steady_mb: common::stats(&steady).0,
        sync_cpu_secs: at_synced.cpu_secs,
        samples: samples.len(),
        topic: live::events_topic(&id),
        checkpoint_topic: live::checkpoint_topic(&id),
    }
}
