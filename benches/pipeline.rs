//! Micro benchmarks of the bridge's per-event path, for a 5.6 KB Pod and an 18 KB
//! ConfigMap (benches/fixtures): decode, classify against a 10k-object index, build the
//! CloudEvent, encode for Kafka (binary mode) and NATS (headers), and all of it in one.
//!
//!   cargo bench --bench pipeline
//!
//! Every measured change is a visible update (new resourceVersion, changed content), the
//! path a busy cluster exercises; the index holds 10,000 other objects.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;

use common::Kind;
use deltaship::change::{Change, Classifier, ObjectChange, Payload};
use deltaship::event::{self, Envelope, WatchAttributes};
use deltaship::model::{ChangeType, Object, Observed};
use deltaship::plan::Scope;
use divan::Bencher;
use divan::counter::BytesCount;
use serde_json::Value;

const FIXTURES: [&str; 2] = ["pod", "configmap"];
/// Objects in the index (fewer in a smoke run: `cargo test --benches` runs each bench once,
/// unoptimized).
fn indexed() -> usize {
    static N: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| if common::bench_mode() { 10_000 } else { 100 });
    *N
}
const CLUSTER: &str = "prod";

fn main() {
    divan::main();
}

/// A fixture's pieces: its value, scopes and a classifier whose index holds `indexed()`
/// objects of the same shape.
struct Setup {
    kind: Kind,
    base: Value,
    kafka: Arc<Scope>,
    nats: Arc<Scope>,
    /// The attributes the worker derives once per watch (the same for both scopes).
    watch: WatchAttributes,
    classifier: Classifier,
    /// Next resourceVersion and revision, so that every change is a visible update.
    rv: u64,
}

impl Setup {
    fn new(kind: Kind) -> Setup {
        let base = kind.value();
        let kafka = common::kafka_scope(CLUSTER, kind, "127.0.0.1:9092");
        let nats = common::nats_scope(CLUSTER, kind, "nats://127.0.0.1:4222");
        let mut classifier = Classifier::new(kafka.resource.label(), kafka.relist, kafka.keeps_content());
        let mut out = Vec::new();
        classifier.handle(Observed::Init, &mut out);
        for i in 0..indexed() {
            let obj = common::decode(&common::wire(&common::variant(&base, i, 1 + i as u64, 0)));
            classifier.handle(Observed::InitApply(obj), &mut out);
            out.clear();
        }
        classifier.handle(Observed::InitDone, &mut out);
        let watch = WatchAttributes::new(CLUSTER.into(), &kafka.resource);
        Setup { kind, base, kafka, nats, watch, classifier, rv: 1_000_000 }
    }

    /// The next update of an indexed object, as wire bytes.
    fn next_wire(&mut self) -> Vec<u8> {
        self.rv += 1;
        let i = (self.rv as usize) % indexed();
        common::wire(&common::variant(&self.base, i, self.rv, self.rv))
    }

    fn next_object(&mut self) -> Object {
        common::decode(&self.next_wire())
    }

    /// A visible update as the classifier hands it over.
    fn updated(&mut self) -> Change {
        let obj = self.next_object();
        Change::Object(ObjectChange { change: ChangeType::Updated, payload: Payload::Object(obj), sync_id: None, previous: None, fingerprint: 0 })
    }

    fn envelope(&mut self, scope: &Scope) -> Envelope {
        let change = self.updated();
        event::build(&self.watch, scope, &scope.outputs[0], change, chrono::Utc::now())
    }
}

fn bytes(kind: Kind) -> BytesCount {
    BytesCount::new(kind.wire_size())
}

/// JSON bytes to a redacted Object (the decoding kube's watcher does included).
#[divan::bench(args = FIXTURES)]
fn decode(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    bencher.counter(bytes(s.kind)).with_inputs(|| s.next_wire()).bench_local_refs(|b| common::decode(b));
}

/// Reference, not on the bridge's path: the same bytes decoded into a plain
/// `serde_json::Value` only (the floor of any decoder that keeps the whole object).
#[divan::bench(args = FIXTURES)]
fn decode_value_only(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    bencher.counter(bytes(s.kind)).with_inputs(|| s.next_wire()).bench_local_refs(|b| serde_json::from_slice::<Value>(b).unwrap());
}

/// A visible update classified against the index (lookup, fingerprint compare, index update).
#[divan::bench(args = FIXTURES)]
fn classify(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    let mut classifier = std::mem::replace(&mut s.classifier, Classifier::new(String::new(), s.kafka.relist, false));
    bencher.counter(bytes(s.kind)).with_inputs(|| s.next_object()).bench_local_values(|obj| {
        let mut out = Vec::with_capacity(1);
        classifier.handle(Observed::Apply(obj), &mut out);
        assert_eq!(out.len(), 1, "a visible update");
        out
    });
}

/// The CloudEvent of an update: id, attributes, extensions, route; the object's JSON (as
/// decoded) becomes the event's data.
#[divan::bench(args = FIXTURES)]
fn build(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    let (scope, watch) = (s.kafka.clone(), s.watch.clone());
    bencher
        .counter(bytes(s.kind))
        .with_inputs(|| s.updated())
        .bench_local_values(|change| event::build(&watch, &scope, &scope.outputs[0], change, chrono::Utc::now()));
}

/// Kafka binary mode: data as the record value, attributes as `ce_` headers.
#[divan::bench(args = FIXTURES)]
fn encode_kafka(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    let scope = s.kafka.clone();
    let env = s.envelope(&scope);
    bencher.counter(bytes(s.kind)).bench_local(|| common::encode_kafka(divan::black_box(&env)));
}

/// NATS binary mode: data as the payload, attributes as percent-encoded `ce-` headers.
#[divan::bench(args = FIXTURES)]
fn encode_nats(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    let scope = s.nats.clone();
    let env = s.envelope(&scope);
    bencher.counter(bytes(s.kind)).bench_local(|| common::encode_nats(divan::black_box(&env)));
}

/// The whole per-event path to Kafka: wire bytes to the encoded record.
#[divan::bench(args = FIXTURES)]
fn per_event_kafka(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    let (scope, watch) = (s.kafka.clone(), s.watch.clone());
    let mut classifier = std::mem::replace(&mut s.classifier, Classifier::new(String::new(), s.kafka.relist, false));
    bencher.counter(bytes(s.kind)).with_inputs(|| s.next_wire()).bench_local_values(|wire| {
        let mut out = Vec::with_capacity(1);
        classifier.handle(Observed::Apply(common::decode(&wire)), &mut out);
        let change = out.pop().expect("a visible update");
        let env = event::build(&watch, &scope, &scope.outputs[0], change, chrono::Utc::now());
        let encoded = common::encode_kafka(&env);
        (env, encoded)
    });
}

/// The whole per-event path to NATS: wire bytes to the encoded message.
#[divan::bench(args = FIXTURES)]
fn per_event_nats(bencher: Bencher, fixture: &str) {
    let mut s = Setup::new(Kind::parse(fixture));
    let (scope, watch) = (s.nats.clone(), s.watch.clone());
    let mut classifier = std::mem::replace(&mut s.classifier, Classifier::new(String::new(), s.nats.relist, false));
    bencher.counter(bytes(s.kind)).with_inputs(|| s.next_wire()).bench_local_values(|wire| {
        let mut out = Vec::with_capacity(1);
        classifier.handle(Observed::Apply(common::decode(&wire)), &mut out);
        let change = out.pop().expect("a visible update");
        let env = event::build(&watch, &scope, &scope.outputs[0], change, chrono::Utc::now());
        let encoded = common::encode_nats(&env);
        (env, encoded)
    });
}
