//! Fault tests' machinery: a churn workload on ConfigMaps where every write carries the
//! object's next `seq`, writes that ride out API server restarts (other test binaries restart
//! the shared API server), an audit of the shipped stream per object (lost, reordered,
//! duplicates), the bridge's memory sampled from /proc, and tests/env's fault controls.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::kube::until_done;

/// Runs `tests/env/<component>/ctl <action>`; panics when it keeps failing.
pub fn ctl(component: &str, action: &str) {
    try_ctl(component, action).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a ctl, retried twice: another test binary may be restarting the same server at that
/// moment, which makes ctl fail on a busy port. Never panics (usable in Drop).
pub fn try_ctl(component: &str, action: &str) -> Result<(), String> {
    let path = format!("{}/tests/env/{component}/ctl", env!("CARGO_MANIFEST_DIR"));
    let mut last = String::new();
    for _ in 0..3 {
        match Command::new(&path).arg(action).output() {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => last = format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    Err(format!("{path} {action} failed three times; last: {last}"))
}

/// A write the namespace's ConfigMap watches never see (a label on the Namespace itself):
/// it moves etcd's revision past everything those watches have seen.
pub async fn touch_namespace(client: &Client, name: &str) {
    let (api, pp) = (&Api::<Namespace>::all(client.clone()), &PatchParams::default());
    let patch = &Patch::Merge(json!({"metadata": {"labels": {"deltaship-test/touched": super::unique("t")}}}));
    until_done("label the test namespace", 0, || async move { api.patch(name, pp, patch).await.map(|_| ()) }).await;
}

/// Objects `obj-000`... of one namespace, updated in turns by a few writer tasks. Each
/// object's writes are sequential (seq 0 on create, then 1, 2, ...); objects run in parallel.
pub struct Churn {
    ns: String,
    api: Api<ConfigMap>,
    names: Vec<String>,
    /// `namespace/name` to the highest seq written; every seq up to it was written, in order.
    written: Arc<Mutex<BTreeMap<String, u64>>>,
    writes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Churn {
    /// Creates `objects` ConfigMaps with seq 0 and `pad` bytes of filler (to give events
    /// a realistic weight for memory measurements).
    pub async fn create(client: &Client, ns: &str, objects: usize, pad: usize) -> Churn {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let names: Vec<String> = (0..objects).map(|i| format!("obj-{i:03}")).collect();
        let filler = "x".repeat(pad);
        futures::stream::iter(&names)
            .for_each_concurrent(8, |name| {
                let (api, filler) = (api.clone(), filler.clone());
                async move {
                    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"seq": "0", "pad": filler}})).unwrap();
                    let (api, cm) = (&api, &cm);
                    until_done(&format!("create {name}"), 409, || async move { api.create(&PostParams::default(), cm).await.map(|_| ()) }).await;
                }
            })
            .await;
        let written = names.iter().map(|n| (format!("{ns}/{n}"), 0)).collect();
        Churn {
            ns: ns.to_string(),
            api,
            names,
            written: Arc::new(Mutex::new(written)),
            writes: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            workers: Vec::new(),
        }
    }

    /// Starts `workers` writer tasks, each owning every `workers`-th object: a round
    /// writes each of its objects' next seq, then pauses `pause`. Runs until `finish`, or
    /// for `rounds` rounds when given.
    pub fn start(&mut self, workers: usize, pause: Duration, rounds: Option<u64>) {
        self.stop.store(false, Ordering::Release);
        for w in 0..workers {
            let mine: Vec<String> = self.names.iter().skip(w).step_by(workers).cloned().collect();
            let (api, ns, pp) = (self.api.clone(), self.ns.clone(), PatchParams::default());
            let (written, writes, stop) = (self.written.clone(), self.writes.clone(), self.stop.clone());
            self.workers.push(tokio::spawn(async move {
                let mut round = 0u64;
                while !stop.load(Ordering::Acquire) && rounds.is_none_or(|r| round < r) {
                    for name in &mine {
                        let key = format!("{ns}/{name}");
                        let seq = written.lock().unwrap()[&key] + 1;
                        let patch = Patch::Merge(json!({"data": {"seq": seq.to_string()}}));
                        let (api, pp, patch) = (&api, &pp, &patch);
                        until_done(&format!("update {name}"), 0, || async move { api.patch(name, pp, patch).await.map(|_| ()) }).await;
                        written.lock().unwrap().insert(key, seq);
                        writes.fetch_add(1, Ordering::AcqRel);
                    }
                    round += 1;
                    tokio::time::sleep(pause).await;
                }
            }));
        }
    }

    /// What was written so far, per key.
    pub fn written(&self) -> BTreeMap<String, u64> {
        self.written.lock().unwrap().clone()
    }

    /// Updates written so far (creates not counted).
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::Acquire)
    }

    pub async fn wait_writes(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.writes() < n {
            assert!(Instant::now() < deadline, "only {} of {n} writes after 300 s", self.writes());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the writers after their current round; what was written, per key.
    pub async fn finish(&mut self) -> BTreeMap<String, u64> {
        self.stop.store(true, Ordering::Release);
        for w in self.workers.drain(..) {
            w.await.expect("a writer task");
        }
        self.written.lock().unwrap().clone()
    }
}

/// One record of the shipped stream, as the audit needs it.
#[derive(Debug, Clone)]
pub enum Item {
    /// `seq` is None for objects not written by the churn (kube-root-ca.crt).
    Object {
        key: String,
        seq: Option<u64>,
        id: String,
        digest: u64,
        synced: bool,
    },
    Started {
        reason: String,
        sync_id: String,
    },
    Completed,
    /// A state marker (reason `state`): no sync, nothing to excuse.
    State,
}

impl Item {
    /// From a CloudEvent's type, subject, id, sync id and data (binary mode on both sinks).
    pub fn decode(ty: &str, subject: Option<&str>, id: &str, sync_id: Option<&str>, data: &[u8]) -> Item {
        let json = || serde_json::from_slice::<Value>(data).unwrap_or(Value::Null);
        match ty.strip_prefix("dev.deltaship.").unwrap_or(ty) {
            "sync.started" | "sync.completed" if json()["reason"] == "state" => Item::State,
            "sync.started" => Item::Started { reason: json()["reason"].as_str().unwrap_or("").to_string(), sync_id: sync_id.unwrap_or("").to_string() },
            "sync.completed" => Item::Completed,
            t => {
                let mut h = DefaultHasher::new();
                data.hash(&mut h);
                Item::Object {
                    key: subject.unwrap_or("").to_string(),
                    seq: json()["data"]["seq"].as_str().and_then(|s| s.parse().ok()),
                    id: id.to_string(),
                    digest: h.finish(),
                    synced: t == "object.synced",
                }
            }
        }
    }
}

/// Tracks which keys still miss their final seq, over a growing list of items.
pub struct Arrivals {
    missing: BTreeMap<String, u64>,
}

impl Arrivals {
    pub fn new(written: &BTreeMap<String, u64>) -> Arrivals {
        Arrivals { missing: written.clone() }
    }

    pub fn see(&mut self, item: &Item) {
        if let Item::Object { key, seq: Some(s), .. } = item
            && self.missing.get(key).is_some_and(|last| s >= last)
        {
            self.missing.remove(key);
        }
    }

    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct Audit {
    /// Object events of the churn's objects read back.
    pub events: usize,
    /// Written seqs that never arrived and that no sync excuses.
    pub lost: u64,
    /// Seqs never shipped because a relist (or a restarted bridge's initial sync) shipped a
    /// newer state in their place: legitimate, the watch could not deliver them.
    pub skipped_by_sync: u64,
    /// Seqs lower than one already seen for the object within one bridge run (the synced
    /// events of a run's initial sync left out), not exact repeats.
    pub reordered: usize,
    /// The same, across bridge runs and initial syncs (informational).
    pub reordered_across_runs: usize,
    pub duplicates: usize,
    /// Duplicates whose payload differs from the first event with that id.
    pub inexact_duplicates: usize,
    /// Duplicates that arrived after a newer event of their object: the event contract says
    /// none do (deltaship keeps one event per object in flight), and consumers skip repeats
    /// in bounded memory because of it (docs/consumers/README.md).
    pub late_repeats: usize,
    pub relists: usize,
    pub initial_syncs: usize,
    /// Starts from a checkpoint (`resume` syncs).
    pub resumes: usize,
    pub problems: Vec<String>,
    /// The first lost seqs: (key, first, last), for tracing them.
    pub gaps: Vec<(String, u64, u64)>,
}

#[derive(Default)]
struct Lane {
    max: Option<u64>,
    run_max: Option<u64>,
    /// sync.started markers seen in the object's log up to its previous event.
    syncs_at_last: usize,
}

/// Audits `logs` (each an ordered log: a Kafka partition, or the NATS stream) against what
/// was `written`. A gap in an object's seqs is excused only when a sync began between the
/// two events around it (a relist ships current state, so intermediate seqs never exist
/// for the bridge); a missing final seq is never excused.
pub fn audit(logs: &[Vec<Item>], written: &BTreeMap<String, u64>) -> Audit {
    let mut a = Audit::default();
    let mut lanes: HashMap<&str, Lane> = HashMap::new();
    let mut ids: HashMap<&str, u64> = HashMap::new();
    let (mut relists, mut initials, mut resumes) = (HashSet::new(), HashSet::new(), HashSet::new());
    let note = |a: &mut Audit, p: String| {
        if a.problems.len() < 20 {
            a.problems.push(p)
        }
    };
    for log in logs {
        let (mut syncs, mut runs, mut in_initial) = (0usize, 0usize, false);
        let mut log_keys: HashSet<&str> = HashSet::new();
        for item in log {
            let (key, seq, id, digest, synced) = match item {
                Item::Started { reason, sync_id } => {
                    syncs += 1;
                    in_initial = reason == "initial";
                    if reason == "relist" {
                        relists.insert(sync_id.as_str());
                    }
                    if reason == "resume" {
                        resumes.insert(sync_id.as_str());
                    }
                    if in_initial {
                        initials.insert(sync_id.as_str());
                        runs += 1;
                        // A new bridge run in this log: ordering starts over.
                        if runs > 1 {
                            log_keys.iter().for_each(|k| lanes.get_mut(k).unwrap().run_max = None);
                        }
                    }
                    continue;
                }
                Item::Completed => {
                    in_initial = false;
                    continue;
                }
                Item::State => continue,
                Item::Object { key, seq, id, digest, synced } => (key.as_str(), seq, id.as_str(), *digest, *synced),
            };
            if let Some(first) = ids.insert(id, digest) {
                a.duplicates += 1;
                if let Some(newer) = seq.zip(lanes.get(key).and_then(|l| l.max)).and_then(|(seq, max)| (seq < max).then_some(max)) {
                    a.late_repeats += 1;
                    note(&mut a, format!("{key}: id {id} repeated after seq {newer}"));
                }
                if first != digest {
                    a.inexact_duplicates += 1;
                    note(&mut a, format!("{key}: id {id} seen twice with different payloads"));
                }
                ids.insert(id, first);
                continue;
            }
            let (Some(seq), true) = (*seq, written.contains_key(key)) else { continue };
            a.events += 1;
            log_keys.insert(key);
            let lane = lanes.entry(key).or_insert(Lane { syncs_at_last: 1, ..Lane::default() });
            if !(synced && in_initial) {
                if lane.run_max.is_some_and(|m| seq < m) {
                    a.reordered += 1;
                    note(&mut a, format!("{key}: seq {seq} after {}", lane.run_max.unwrap()));
                }
                lane.run_max = lane.run_max.max(Some(seq));
            }
            if lane.max.is_some_and(|m| seq < m) {
                a.reordered_across_runs += 1;
            }
            let next = lane.max.map_or(0, |m| m + 1);
            if seq > next {
                if syncs > lane.syncs_at_last {
                    a.skipped_by_sync += seq - next;
                } else {
                    a.lost += seq - next;
                    note(&mut a, format!("{key}: seqs {next}..{} never arrived, no sync in between", seq - 1));
                    if a.gaps.len() < 20 {
                        a.gaps.push((key.to_string(), next, seq - 1));
                    }
                }
            }
            lane.max = lane.max.max(Some(seq));
            lane.syncs_at_last = syncs;
        }
    }
    for (key, last) in written {
        let next = lanes.get(key.as_str()).and_then(|l| l.max).map_or(0, |m| m + 1);
        if next <= *last {
            a.lost += last + 1 - next;
            note(&mut a, format!("{key}: final seqs {next}..={last} never arrived"));
        }
    }
    a.relists = relists.len();
    a.initial_syncs = initials.len();
    a.resumes = resumes.len();
    a
}

impl Audit {
    /// The figures line the lead copies into the report.
    pub fn print(&self, test: &str, writes: usize, faults: &str, peak_rss_mib: f64, extra: &str) {
        eprintln!(
            "FAULT-FIGURES test={test} writes={writes} events={} faults=\"{faults}\" lost={} reordered={} duplicates={} inexact_duplicates={} skipped_by_sync={} relists={} initial_syncs={} resumes={} reordered_across_runs={} late_repeats={} peak_rss_mib={peak_rss_mib:.1}{extra}",
            self.events,
            self.lost,
            self.reordered,
            self.duplicates,
            self.inexact_duplicates,
            self.skipped_by_sync,
            self.relists,
            self.initial_syncs,
            self.resumes,
            self.reordered_across_runs,
            self.late_repeats
        );
    }

    /// Nothing lost, nothing reordered, every duplicate exact and before any newer event of
    /// its object.
    pub fn assert_clean(&self) {
        assert!(
            self.lost == 0 && self.reordered == 0 && self.inexact_duplicates == 0 && self.late_repeats == 0,
            "lost {}, reordered {}, inexact duplicates {}, late repeats {}; first problems:\n{}",
            self.lost,
            self.reordered,
            self.inexact_duplicates,
            self.late_repeats,
            self.problems.join("\n")
        );
    }
}

/// VmRSS of a process in KiB, from /proc/<pid>/status.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Samples a process's RSS every `every` in a thread until `finish`.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, usize)>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut peak, mut samples) = (0, 0);
            while !flag.load(Ordering::Acquire) {
                if let Some(kib) = rss_kib(pid) {
                    peak = peak.max(kib);
                    samples += 1;
                }
                std::thread::sleep(every);
            }
            (peak, samples)
        });
        RssSampler { stop, thread }
    }

    /// (peak RSS in MiB, number of samples).
    pub fn finish(self) -> (f64, usize) {
        self.stop.store(true, Ordering::Release);
        let (peak, samples) = self.thread.join().expect("the RSS sampler");
        (peak as f64 / 1024.0, samples)
    }
}

/// Sum of every series of a Prometheus metric in a /metrics text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, v| sum + v) // not sum(): an empty f64 sum is -0
}
