//! Restarts of the real bridge (`deltaship run`, Kafka sink, checkpoints in a Kafka topic)
//! watching the ConfigMaps of one namespace of the test API server (tests/env), at 10k and
//! 100k ConfigMaps of about 1 KB each: what a restart ships and how soon it is ready, side
//! by side with today's full initial sync.
//!
//!   tests/env/up && source tests/env/.state/env.sh
//!   cargo build --release && cargo bench --bench resume
//!
//! Per run, a fresh cluster name (so no checkpoint) and three starts of the binary:
//! - `full`: the initial sync from no checkpoint (what every start did before resume);
//! - `unchanged`: a graceful stop (SIGTERM: the queues drain, the checkpoint is written
//!   once more), then a start with nothing changed;
//! - `changed`: a graceful stop, 1% of the ConfigMaps updated while down (every 100th, at
//!   least one), then a start.
//!
//! Each start is sampled every 100 ms from the spawn until it has settled (ready, its
//! changes acknowledged, the checkpoint written and unchanged for 3 s): the events the sink
//! acknowledged by type (`deltaship_events_total`), time to the first /readyz 200 (the sink's
//! first probe runs 1 s after start), time to the last change acknowledged, process CPU at
//! ready and when settled, peak RSS (VmHWM when settled), checkpoint records written
//! (`deltaship_checkpoint_records_total`) and the time of the last one. After the stop the
//! route's checkpoint is read back through the bridge's own store: its keys and bytes (keys
//! and values, the latest record per key) and how long the read took. `listed`: the API
//! server no longer had the checkpoint's version (410), so the watch listed and shipped a
//! diff. MB = 10^6 bytes.
//!
//! The namespaces are memory.rs's `deltaship-bench-<count>` (created once, reused); the
//! changed ConfigMaps are restored before and after the runs so that memory.rs measures
//! the same objects. Namespaces of more than 10k objects are deleted afterwards unless
//! DELTASHIP_TEST_BENCH_KEEP_NAMESPACES=1.
//!
//! Environment: DELTASHIP_TEST_BENCH_COUNTS (default `10000,100000`), DELTASHIP_TEST_BENCH_RUNS
//! (default 3), DELTASHIP_TEST_BENCH_BIN (default: the bench build's deltaship binary).
//! Without `--bench` (`cargo test --benches`): one run at 20 ConfigMaps as a smoke test.

#[path = "common/mod.rs"]
mod common;
#[path = "common/live.rs"]
mod live;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use deltaship::checkpoint::{self, Store};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use live::{Bridge, Sample};
use serde_json::{Value, json};

/// How long the checkpoint must stay unchanged, once everything is acknowledged, for a
/// start to count as settled: three of its 1 s write intervals.
const QUIET: f64 = 3.0;

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Full,
    Unchanged,
    Changed,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Full => "full",
            Phase::Unchanged => "unchanged",
            Phase::Changed => "changed",
        }
    }
}

/// What one start showed.
struct Start {
    events: BTreeMap<String, f64>,
    object_events: f64,
    ready_secs: f64,
    last_change_secs: Option<f64>,
    cpu_ready_secs: f64,
    cpu_secs: f64,
    peak_rss_mb: f64,
    checkpoint_records: f64,
    checkpoint_last_write_secs: Option<f64>,
    syncs: BTreeMap<String, f64>,
    fallbacks: BTreeMap<String, f64>,
    relists: f64,
    /// The checkpoint's version was gone (410), so the watch listed and shipped a diff.
    listed: bool,
    graceful: bool,
}

/// The route's checkpoint as read back after a stop.
struct Read {
    keys: usize,
    bytes: usize,
    load_secs: f64,
}

fn main() {
    let live::Setup { bench, counts, runs, bin, brokers, rt, client } = live::setup("10000,100000");
    for count in counts {
        let ns = live::namespace(count, bench);
        rt.block_on(live::prepare(&client, &ns, count, "resume"));
        // Every 100th ConfigMap: 1% of them, at least one.
        let changed: Vec<String> = (0..count).step_by(100).map(live::configmap_name).collect();
        rt.block_on(set_mode(&client, &ns, &changed, "production"));
        let mut results: Vec<(Phase, Start, Read)> = Vec::new();
        for run in 0..runs {
            let id = common::unique("dsbench-resume");
            for phase in [Phase::Full, Phase::Unchanged, Phase::Changed] {
                let expected = match phase {
                    Phase::Full => count + 1, // and the namespace's kube-root-ca.crt
                    Phase::Unchanged => 0,
                    Phase::Changed => {
                        rt.block_on(set_mode(&client, &ns, &changed, &format!("changed-{run}")));
                        changed.len()
                    }
                };
                let port = live::free_port();
                let config = live::kafka_config(&id, &ns, &brokers, &id, port, "info");
                let start = run_start(&bin, &format!("{id}-{}", phase.as_str()), port, &config, expected);
                let read = rt.block_on(read_checkpoint(&config));
                println!(
                    "{}",
                    json!({"bench": "resume", "objects": count, "run": run, "start": phase.as_str(), "changed_while_down": if phase == Phase::Changed { expected } else { 0 },
                           "events": start.events, "object_events": start.object_events, "ready_secs": start.ready_secs,
                           "last_change_secs": start.last_change_secs, "cpu_ready_secs": start.cpu_ready_secs, "cpu_secs": start.cpu_secs,
                           "peak_rss_mb": start.peak_rss_mb, "checkpoint_records": start.checkpoint_records,
                           "checkpoint_last_write_secs": start.checkpoint_last_write_secs, "checkpoint_keys": read.keys,
                           "checkpoint_bytes": read.bytes, "checkpoint_load_secs": read.load_secs, "syncs": start.syncs,
                           "fallbacks": start.fallbacks, "relists": start.relists, "listed": start.listed, "graceful": start.graceful, "smoke": !bench})
                );
                results.push((phase, start, read));
            }
            rt.block_on(set_mode(&client, &ns, &changed, "production"));
            rt.block_on(live::delete_topic(&brokers, &live::events_topic(&id)));
            rt.block_on(live::delete_topic(&brokers, &live::checkpoint_topic(&id)));
        }
        for phase in [Phase::Full, Phase::Unchanged, Phase::Changed] {
            let of: Vec<&(Phase, Start, Read)> = results.iter().filter(|(p, _, _)| *p == phase).collect();
            let s = |f: &dyn Fn(&Start, &Read) -> Option<f64>| -> Value {
                let xs: Vec<f64> = of.iter().filter_map(|(_, st, r)| f(st, r)).collect();
                if xs.is_empty() {
                    return Value::Null;
                }
                let (median, min, max) = common::stats(&xs);
                json!({"median": median, "min": min, "max": max})
            };
            let mut events = BTreeMap::new();
            for ty in of.iter().flat_map(|(_, st, _)| st.events.keys()) {
                events.insert(ty.clone(), s(&|st, _| Some(st.events.get(ty).copied().unwrap_or(0.0))));
            }
            println!(
                "{}",
                json!({"bench": "resume", "summary": true, "objects": count, "start": phase.as_str(), "runs": of.len(),
                       "changed_while_down": if phase == Phase::Changed { changed.len() } else { 0 },
                       "events": events, "object_events": s(&|st, _| Some(st.object_events)),
                       "ready_secs": s(&|st, _| Some(st.ready_secs)), "last_change_secs": s(&|st, _| st.last_change_secs),
                       "cpu_ready_secs": s(&|st, _| Some(st.cpu_ready_secs)), "cpu_secs": s(&|st, _| Some(st.cpu_secs)),
                       "peak_rss_mb": s(&|st, _| Some(st.peak_rss_mb)), "checkpoint_records": s(&|st, _| Some(st.checkpoint_records)),
                       "checkpoint_last_write_secs": s(&|st, _| st.checkpoint_last_write_secs),
                       "checkpoint_keys": s(&|_, r| Some(r.keys as f64)), "checkpoint_bytes": s(&|_, r| Some(r.bytes as f64)),
                       "checkpoint_load_secs": s(&|_, r| Some(r.load_secs)),
                       "resumed": of.iter().filter(|(_, st, _)| st.syncs.contains_key("resume")).count(),
                       "listed": of.iter().filter(|(_, st, _)| st.listed).count(),
                       "relists": s(&|st, _| Some(st.relists)), "smoke": !bench})
            );
        }
        rt.block_on(live::clean_up(&client, &ns, count, bench, "resume"));
    }
}

/// Object events (every type but the markers) among the acknowledged.
fn object_events(s: &Sample) -> f64 {
    s.metrics.by("deltaship_events_total", "type").iter().filter(|(ty, _)| !ty.starts_with("sync.")).map(|(_, n)| n).sum::<f64>() + 0.0 // an empty sum is -0.0
}

fn records(s: &Sample) -> f64 {
    s.metrics.sum("deltaship_checkpoint_records_total", &[])
}

/// Starts the bridge, samples it until it settled (ready, `expected` object events
/// acknowledged, nothing pending or unwritten, the checkpoint records unchanged for
/// `QUIET`), stops it gracefully.
fn run_start(bin: &str, id: &str, port: u16, config: &str, expected: usize) -> Start {
    let mut bridge = Bridge::spawn(bin, id, port, config);
    // When the checkpoint records last changed, and when the changes were all acknowledged.
    let mut last = (f64::NAN, 0.0);
    let mut acknowledged: Option<f64> = None;
    let samples = bridge.sample_until(Duration::from_secs(900), |s| {
        let written = records(s);
        if written != last.0 {
            last = (written, s.secs);
        }
        if acknowledged.is_none() && s.ready && object_events(s) >= expected as f64 {
            acknowledged = Some(s.secs);
        }
        // The writer sets these gauges on every interval, written or not.
        let drained = ["deltaship_checkpoint_pending_events", "deltaship_checkpoint_unwritten_records"]
            .iter()
            .all(|g| s.metrics.by(g, "route").values().eq([0.0].iter()));
        acknowledged.is_some_and(|at| drained && s.secs - at.max(last.1) >= QUIET)
    });
    let (status, log) = bridge.stop();
    // The bridge's own account of its start (INFO: no per-object lines).
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        eprintln!("resume: {id}: {line}");
    }
    let end = samples.last().unwrap();
    let at_ready = samples.iter().find(|s| s.ready).unwrap();
    let shipped = object_events(end);
    let written = records(end);
    Start {
        events: end.metrics.by("deltaship_events_total", "type"),
        object_events: shipped,
        ready_secs: at_ready.secs,
        last_change_secs: (shipped > 0.0).then(|| samples.iter().find(|s| object_events(s) >= shipped).unwrap().secs),
        cpu_ready_secs: at_ready.cpu_secs,
        cpu_secs: end.cpu_secs,
        peak_rss_mb: end.hwm_mb,
        checkpoint_records: written,
        checkpoint_last_write_secs: (written > 0.0).then(|| samples.iter().find(|s| records(s) >= written).unwrap().secs),
        syncs: end.metrics.by("deltaship_syncs_total", "reason"),
        fallbacks: end.metrics.by("deltaship_resume_fallbacks_total", "reason"),
        relists: end.metrics.sum("deltaship_relists_total", &[]),
        // No metric tells it; src/watch/resume.rs logs it at INFO.
        listed: log.contains("The API server no longer has this version; listing"),
        graceful: status.is_some_and(|s| s.success()),
    }
}

/// The route's checkpoint read back through the bridge's own store, as a start reads it
/// (retried for a minute: the shared broker may be restarting under other tests).
async fn read_checkpoint(config: &str) -> Read {
    let config = common::load_config(config);
    let route = config.effective_routes().remove(0);
    let prefix = checkpoint::route_prefix(&config.cluster, &route.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let store = Store::open(&route.sink, &config.resume, &route.name).await;
        let started = Instant::now();
        let read = match store {
            Ok(Some(store)) => store.load(&prefix).await,
            Ok(None) => panic!("a Kafka route keeps a checkpoint"),
            Err(e) => Err(e),
        };
        match read {
            Ok(records) => {
                return Read { keys: records.len(), bytes: records.iter().map(|(k, v)| k.len() + v.len()).sum(), load_secs: started.elapsed().as_secs_f64() };
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("resume: reading the checkpoint: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => panic!("cannot read the checkpoint: {e}"),
        }
    }
}

/// Sets `data.mode` of the named ConfigMaps (a visible change; "production" is what they
/// were created with, and setting it again changes nothing).
async fn set_mode(client: &Client, ns: &str, names: &[String], mode: &str) {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let patch = json!({"data": {"mode": mode}});
    live::for_each_retried(names.to_vec(), |name| {
        let (api, patch) = (api.clone(), patch.clone());
        async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop) }
    })
    .await;
}
