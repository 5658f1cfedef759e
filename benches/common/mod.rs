//! Shared by the benches: the fixtures, watch scopes built through the public config and
//! plan API, recorded watch events, and the sinks' own binary-mode encodings.
#![allow(dead_code)] // each bench uses a different part

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use deltaship::config::ContentMode;
use deltaship::config::{self, Config};
use deltaship::event::Envelope;
use deltaship::json::{ALWAYS_IGNORED, Scanner};
use deltaship::model::ResourceType;
use deltaship::model::{Object, Observed};
use deltaship::pipeline::Worker;
use deltaship::plan::Scope;
use deltaship::redact::Redactor;
use deltaship::telemetry::Health;
use deltaship::watch::{Decoder, WatchError, lines};
use futures::{Stream, StreamExt, stream};
use kube::core::WatchEvent;
use rdkafka::message::OwnedHeaders;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A 5.6 KB Pod and an 18 KB ConfigMap as the API server serves them (managedFields
/// included; compact JSON).
pub const POD: &[u8] = include_bytes!("../fixtures/pod.json");
pub const CONFIGMAP: &[u8] = include_bytes!("../fixtures/configmap.json");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pod,
    ConfigMap,
}

impl Kind {
    pub fn parse(s: &str) -> Kind {
        match s {
            "pod" => Kind::Pod,
            "configmap" => Kind::ConfigMap,
            other => panic!("unknown fixture {other}; use pod or configmap"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::ConfigMap => "configmap",
        }
    }

    /// The fixture as a JSON value.
    pub fn value(self) -> Value {
        let raw = match self {
            Kind::Pod => POD,
            Kind::ConfigMap => CONFIGMAP,
        };
        serde_json::from_slice(raw).expect("fixtures are JSON")
    }

    /// The fixture's size as the API server sends it (compact JSON).
    pub fn wire_size(self) -> usize {
        serde_json::to_vec(&self.value()).unwrap().len()
    }

    pub fn resource(self) -> ResourceType {
        let (kind, plural) = match self {
            Kind::Pod => ("Pod", "pods"),
            Kind::ConfigMap => ("ConfigMap", "configmaps"),
        };
        ResourceType { group: String::new(), version: "v1".into(), kind: kind.into(), plural: plural.into(), namespaced: true }
    }
}

/// A name unique to this process: `prefix-<hex>`.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{:x}", (nanos ^ ((std::process::id() as u128) << 40)) & 0xffff_ffff_ffff)
}

/// Loads a config through the public loader (file, validation), from TOML text.
pub fn load_config(toml: &str) -> Config {
    let path: PathBuf = std::env::temp_dir().join(format!("{}.toml", unique("deltaship-bench-config")));
    std::fs::write(&path, toml).unwrap();
    let config = config::load(&path).unwrap_or_else(|e| panic!("bench config invalid: {e}\n{toml}"));
    let _ = std::fs::remove_file(&path);
    config
}

/// The watch scope of `kind` (namespace `shop`) for `sink_toml` (a `[sink]` table), as
/// `deltaship run` plans it.
pub fn scope(cluster: &str, kind: Kind, sink_toml: &str) -> Arc<Scope> {
    let r = kind.resource();
    let toml = format!("cluster = \"{cluster}\"\n[[resources]]\nversion = \"v1\"\nkind = \"{}\"\nnamespaces = [\"shop\"]\n\n{sink_toml}\n", r.kind);
    let config = load_config(&toml);
    let scopes = deltaship::plan::scopes(&config, &[r], "https://127.0.0.1:6443").expect("plan");
    scopes.into_iter().next().expect("one scope")
}

/// A Kafka scope with the default topic template, or `topic` when given.
pub fn kafka_scope(cluster: &str, kind: Kind, brokers: &str) -> Arc<Scope> {
    scope(cluster, kind, &format!("[sink]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\n"))
}

/// A NATS scope with the default subject templates.
pub fn nats_scope(cluster: &str, kind: Kind, url: &str) -> Arc<Scope> {
    scope(cluster, kind, &format!("[sink]\ntype = \"nats\"\nurl = \"{url}\"\n"))
}

/// `value` as object number `i` at resourceVersion `rv`, revision `rev` (an annotation
/// whose change makes the update visible, as a real change would).
pub fn variant(value: &Value, i: usize, rv: u64, rev: u64) -> Value {
    let mut v = value.clone();
    let m = &mut v["metadata"];
    let base = m["name"].as_str().unwrap().to_string();
    m["name"] = Value::String(format!("{base}-{i:06}"));
    let uid = m["uid"].as_str().unwrap().to_string();
    m["uid"] = Value::String(format!("{}{i:012}", &uid[..uid.len() - 12]));
    m["resourceVersion"] = Value::String(rv.to_string());
    m["annotations"]["bench.deltaship.dev/revision"] = Value::String(rev.to_string());
    v
}

/// What the API server sends for one object: JSON bytes.
pub fn wire(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// The watch stage's decoding of one object, with the default config: the object's JSON
/// copied into its watch event's line (as the response's bytes are copied into lines), the
/// line read (`watch::lines::event`: the object is a slice of it), the object decoded to
/// deltaship's Object (scanned, managedFields cut, fingerprinted).
pub fn decode(bytes: &[u8]) -> Object {
    static DECODERS: std::sync::LazyLock<[Decoder; 2]> = std::sync::LazyLock::new(|| {
        let ignored = ALWAYS_IGNORED.map(String::from);
        [Kind::Pod, Kind::ConfigMap].map(|k| Decoder::new(&k.resource(), Scanner::new(&ignored, &[]).unwrap(), &[], Redactor::default()))
    });
    // The fixtures name their kind within their first 40 bytes.
    let pod = bytes[..40.min(bytes.len())].windows(5).any(|w| w == br#""Pod""#);
    const OPEN: &[u8] = br#"{"type":"MODIFIED","object":"#;
    let mut line = BytesMut::with_capacity(OPEN.len() + bytes.len() + 1);
    line.extend_from_slice(OPEN);
    line.extend_from_slice(bytes);
    line.extend_from_slice(b"}");
    let Ok(WatchEvent::Modified(watched)) = lines::event(line.freeze()) else { panic!("the fixture's line is a MODIFIED event") };
    DECODERS[if pod { 0 } else { 1 }].decode(&watched.0).expect("fixture has name, uid, resourceVersion")
}

/// One recorded watch event, objects as the bytes the API server sent.
#[derive(Clone)]
pub enum Recorded {
    Init,
    InitApply(Vec<u8>),
    InitDone,
    Apply(Vec<u8>),
}

/// A recorded watch of `kind` with `n` events in all: the initial sync of `objects` objects
/// (Init, one InitApply each, InitDone), then MODIFIED events round-robin over them, each a
/// visible change (new resourceVersion, new revision annotation).
pub fn recording(kind: Kind, n: usize, objects: usize) -> Vec<Recorded> {
    assert!(n >= objects + 2, "{n} events cannot hold an initial sync of {objects} objects");
    let base = kind.value();
    let mut rv = 1_000_000u64;
    let mut out = Vec::with_capacity(n);
    out.push(Recorded::Init);
    for i in 0..objects {
        rv += 1;
        out.push(Recorded::InitApply(wire(&variant(&base, i, rv, 0))));
    }
    out.push(Recorded::InitDone);
    let mut rev = 0;
    while out.len() < n {
        rev += 1;
        for i in 0..objects {
            if out.len() == n {
                break;
            }
            rv += 1;
            out.push(Recorded::Apply(wire(&variant(&base, i, rv, rev))));
        }
    }
    out
}

/// The bridge's per-event path up to the sink, as `deltaship run` takes it: the pipeline's
/// worker over the recorded watch (decoded as the watch stage does, classified against the
/// index, built into CloudEvents), its events put into `queue`.
pub fn worker(cluster: &str, scope: Arc<Scope>, queue: mpsc::Sender<Envelope>) -> Worker {
    Worker {
        cluster: cluster.into(),
        health: Health::single(1).watch(scope.describe()),
        scope,
        queues: vec![queue],
        slot: 0,
        progress: Vec::new(),
        resume: None,
    }
}

/// What the watch stage hands the worker for a recording.
pub fn observations(recorded: Arc<Vec<Recorded>>) -> impl Stream<Item = Result<Observed, WatchError>> + Send + 'static {
    stream::iter(0..recorded.len()).map(move |i| Ok(watch_event(&recorded[i])))
}

/// The envelopes the worker builds from the recording, in order: one per recorded event
/// (`recording` makes every event a visible change).
pub async fn envelopes(cluster: &str, scope: &Arc<Scope>, recorded: &Arc<Vec<Recorded>>) -> Vec<Envelope> {
    let (tx, mut rx) = mpsc::channel(recorded.len().max(1));
    worker(cluster, scope.clone(), tx).run(observations(recorded.clone()), CancellationToken::new()).await;
    let mut out = Vec::with_capacity(recorded.len());
    while let Ok(env) = rx.try_recv() {
        out.push(env);
    }
    assert_eq!(out.len(), recorded.len(), "one event per recorded watch event");
    out
}

/// A recorded event decoded as the watch stage does.
pub fn watch_event(r: &Recorded) -> Observed {
    match r {
        Recorded::Init => Observed::Init,
        Recorded::InitApply(b) => Observed::InitApply(decode(b)),
        Recorded::InitDone => Observed::InitDone,
        Recorded::Apply(b) => Observed::Apply(decode(b)),
    }
}

/// The Kafka sink's binary mode.
pub fn encode_kafka(env: &Envelope) -> (Bytes, OwnedHeaders) {
    deltaship::sink::kafka::encode(env, ContentMode::Binary)
}

/// The NATS sink's binary mode.
pub fn encode_nats(env: &Envelope) -> (Bytes, async_nats::HeaderMap) {
    deltaship::sink::nats::encode(env, ContentMode::Binary)
}

/// CPU time of this process (all threads, live and exited), in seconds.
#[allow(unsafe_code)]
pub fn process_cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Median, min and max of `xs` (not empty).
pub fn stats(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    (median, v[0], v[n - 1])
}

/// Whether the binary was started by `cargo bench` (`--bench`); `cargo test --benches`
/// runs it without, for a quick smoke run.
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v} is not valid")),
        Err(_) => default,
    }
}

/// A test-environment variable; missing is a failure naming the command to run.
pub fn test_env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: start the test servers with `tests/env/up` and `source tests/env/.state/env.sh`, or run `tests/bench`"))
}
