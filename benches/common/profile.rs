//! Where a program's CPU goes, stage by stage: `perf record` attached to the process for a
//! phase of the live bench, or running it from its start (a sync of the memory bench), call
//! graphs unwound from DWARF, every thread; then each sample charged to a stage by
//! [`stage_of`]. The shares times the phase's CPU per update (or per object) give each
//! stage's µs, beside the floor's measured in the same way.
//!
//! `perf` comes from Debian's `linux-perf` package (tests/bench installs it when missing).
//! The rules are tested in tests/bench_profile.rs.
#![allow(dead_code)] // each bench uses a different part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Samples per second of CPU time.
const FREQUENCY: &str = "1999";

/// A `perf record` attached to a running process until stopped.
pub struct Recording {
    child: Child,
    path: PathBuf,
}

/// `perf record`'s arguments up to its target: the sampling rate, the call graphs, the output.
fn record_args(path: &Path) -> Vec<String> {
    ["perf", "record", "-q", "-F", FREQUENCY, "--call-graph", "dwarf,16384", "-o"].into_iter().map(String::from).chain([path.display().to_string()]).collect()
}

/// A command prefix that runs a program under `perf record` from its first instruction to
/// its exit, into `path`; [`charge`] reads it afterwards.
pub fn record_command(path: &Path) -> Vec<String> {
    let mut args = record_args(path);
    args.push("--".into());
    args
}

impl Recording {
    pub fn start(pid: u32, path: &Path) -> Recording {
        let args = record_args(path);
        let child = Command::new(&args[0])
            .args(&args[1..])
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf (Debian's linux-perf package) runs; tests/bench installs it");
        // perf attaches to every thread before the phase starts.
        std::thread::sleep(std::time::Duration::from_millis(500));
        Recording { child, path: path.to_path_buf() }
    }

    /// Stops the recording (SIGINT, as perf expects) and charges its samples to stages:
    /// (stage, share of the samples), and the number of samples.
    pub fn stop(mut self) -> (BTreeMap<&'static str, f64>, usize) {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        charge(&self.path)
    }
}

/// The samples of a finished recording charged to stages: (stage, share of the samples),
/// and the number of samples.
pub fn charge(path: &Path) -> (BTreeMap<&'static str, f64>, usize) {
    let script =
        Command::new("perf").args(["script", "--no-inline", "-F", "comm,ip,sym", "-i"]).arg(path).stderr(Stdio::null()).output().expect("perf script runs");
    let (shares, samples) = shares(&String::from_utf8_lossy(&script.stdout));
    // A recording perf could not make (no permission to attach, a process already gone)
    // would otherwise render as an empty table.
    assert!(script.status.success() && samples > 0, "perf recorded no samples in {} (run as root; perf_event_paranoid)", path.display());
    (shares, samples)
}

/// The stages: a sample is charged to the stage of its innermost frame
/// whose symbol starts with one of the stage's prefixes (a leading `<` of a trait
/// implementation ignored), so the allocator, the kernel and the standard library count for
/// the stage that called them. Samples of librdkafka's own threads are the client's.
const STAGES: &[(&str, &[&str])] = &[
    ("the Kafka client (called by the program)", &["rd_kafka", "rdkafka::", "deltaship::broker::kafka"]),
    ("metrics", &["deltaship::telemetry", "metrics"]),
    ("checkpoint", &["deltaship::checkpoint"]),
    ("the sink (records and headers)", &["deltaship::sink"]),
    ("the event (build, redact, address)", &["deltaship::event", "deltaship::address", "deltaship::redact", "deltaship::model", "deltaship::plan"]),
    ("index and classify", &["deltaship::change"]),
    (
        "reading the API server (TLS, HTTP, JSON)",
        &["deltaship::watch", "deltaship::json", "hyper", "rustls", "ring::", "tokio_rustls", "kube_client", "http_body", "serde_json"],
    ),
    ("dispatch and workers", &["deltaship::pipeline"]),
];
pub const CLIENT_THREADS: &str = "librdkafka's own threads";
const RUNTIME: &str = "the runtime (scheduling, timers, I/O readiness)";
const OTHER: &str = "other";

/// The stage of one sample: the thread's name and its frames' symbols, innermost first.
pub fn stage_of(thread: &str, frames: &[&str]) -> &'static str {
    if thread.starts_with("rdk:") {
        return CLIENT_THREADS;
    }
    let named = |prefixes: &[&str], symbol: &str| {
        let symbol = symbol.trim_start_matches('<');
        prefixes.iter().any(|p| symbol.starts_with(p))
    };
    for symbol in frames {
        if let Some((stage, _)) = STAGES.iter().find(|(_, prefixes)| named(prefixes, symbol)) {
            return stage;
        }
    }
    if frames.iter().any(|s| named(&["tokio::", "mio::"], s)) { RUNTIME } else { OTHER }
}

/// The share of each stage in `perf script -F comm,ip,sym` output, and the number of samples.
pub fn shares(script: &str) -> (BTreeMap<&'static str, f64>, usize) {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut samples = 0;
    for sample in script.split("\n\n").filter(|s| !s.trim().is_empty()) {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(thread) = lines.next().map(str::trim) else { continue };
        // A frame line: `<address> <symbol>`.
        let frames: Vec<&str> = lines.filter_map(|l| l.trim().split_once(' ').map(|(_, sym)| sym)).collect();
        *counts.entry(stage_of(thread, &frames)).or_default() += 1;
        samples += 1;
    }
    let shares = counts.into_iter().map(|(stage, n)| (stage, n as f64 / samples.max(1) as f64)).collect();
    (shares, samples)
}
