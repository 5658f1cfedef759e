//! What each candidate parser of the raw-bytes path costs to read an object's
//! metadata (kind, apiVersion, name, namespace, uid, resourceVersion, generation) and its
//! fingerprint (xxh3-128 of the JSON without resourceVersion and managedFields), on the
//! Pod and ConfigMap fixtures as the API server sends them (compact JSON).
//!
//!   cargo bench --features parser-comparison --bench parsers
//!
//! (The feature brings the candidate parsers; without it the bench is not built.)
//!
//! Every candidate's fingerprint is checked against the tree path's (`json::Fingerprinter`)
//! once before it is measured, so that each measures the same work.

#[path = "common/mod.rs"]
mod common;

use std::borrow::Cow;
use std::ops::Range;

use common::Kind;
use deltaship::json::{Fingerprinter, MANAGED_FIELDS, Scanner};
use divan::Bencher;
use divan::counter::BytesCount;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

const FIXTURES: [&str; 2] = ["pod", "configmap"];
const RESOURCE_VERSION: &str = "/metadata/resourceVersion";

fn main() {
    divan::main();
}

/// What every candidate returns: the metadata the bridge reads, and the fingerprint.
#[derive(Debug, PartialEq, Eq)]
struct Read<'a> {
    kind: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    uid: Option<Cow<'a, str>>,
    resource_version: Option<Cow<'a, str>>,
    generation: Option<i64>,
    fingerprint: u128,
}

/// A fixture's wire bytes, checked: every candidate reads the same as the tree path.
fn wire(fixture: &str) -> Vec<u8> {
    let kind = Kind::parse(fixture);
    let json = common::wire(&kind.value());
    let want = value_tree(&json);
    let scanner = scanner();
    let candidates: [(&str, Read); 5] = [
        ("borrowed", borrowed(&json)),
        ("scanner", scan(&scanner, &json)),
        ("sonic", sonic(&sonic_tree(), &json)),
        ("simd_json", simd_json_tree(&json)),
        ("value_tree", value_tree(&json)),
    ];
    for (name, read) in candidates {
        // simd-json's objects keep no member order (a vector swapped on removal, a hash map
        // above 32 members): it reads the metadata, not the fingerprint.
        let read = if name == "simd_json" { Read { fingerprint: want.fingerprint, ..read } } else { read };
        assert_eq!(read, want, "{name} on {fixture}");
    }
    json
}

fn bytes(fixture: &str) -> BytesCount {
    BytesCount::new(Kind::parse(fixture).wire_size())
}

/// The tree path (the bridge's path before the scanner, and its path for objects that
/// redaction changes): a `serde_json::Value` tree, its metadata, its serialization hashed.
fn value_tree(json: &[u8]) -> Read<'static> {
    static FINGERPRINTER: std::sync::LazyLock<Fingerprinter> = std::sync::LazyLock::new(|| Fingerprinter::new(&[]));
    let value: Value = serde_json::from_slice(json).unwrap();
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).map(|s| Cow::Owned(s.to_string()));
    Read {
        kind: text("/kind"),
        name: text("/metadata/name"),
        uid: text("/metadata/uid"),
        resource_version: text("/metadata/resourceVersion"),
        generation: value["metadata"]["generation"].as_i64(),
        fingerprint: FINGERPRINTER.serialize(&value).fingerprint,
    }
}

#[divan::bench(args = FIXTURES)]
fn serde_json_value(bencher: Bencher, fixture: &str) {
    let json = wire(fixture);
    bencher.counter(bytes(fixture)).bench_local(|| value_tree(divan::black_box(&json)));
}

/// serde_json into a struct of the metadata only, strings borrowed where unescaped; the
/// ignored members as `RawValue`s, whose place in the input gives their spans.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "apiVersion")]
    _api_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    metadata: HeadMeta<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeadMeta<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "namespace")]
    _namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    resource_version: Option<&'a RawValue>,
    generation: Option<i64>,
    #[serde(borrow)]
    managed_fields: Option<&'a RawValue>,
}

fn borrowed(json: &[u8]) -> Read<'_> {
    let head: Head = serde_json::from_slice(json).unwrap();
    let m = head.metadata;
    let spans = [m.resource_version, m.managed_fields].map(|raw| raw.map(|r| within(json, r.get())));
    let resource_version = m.resource_version.map(|r| serde_json::from_str::<Cow<str>>(r.get()).unwrap());
    Read { kind: head.kind, name: m.name, uid: m.uid, resource_version, generation: m.generation, fingerprint: hash_without(json, spans) }
}

#[divan::bench(args = FIXTURES)]
fn serde_json_borrowed_raw_value(bencher: Bencher, fixture: &str) {
    let json = wire(fixture);
    bencher.counter(bytes(fixture)).bench_local(|| borrowed(divan::black_box(&json)));
}

fn scanner() -> Scanner {
    Scanner::new(&[RESOURCE_VERSION.into(), MANAGED_FIELDS.into()], &[]).unwrap()
}

fn scan<'a>(scanner: &Scanner, json: &'a [u8]) -> Read<'a> {
    let s = scanner.scan(json).unwrap();
    let fingerprint = s.fingerprint(b"");
    let m = s.meta;
    Read { kind: m.kind, name: m.name, uid: m.uid, resource_version: m.resource_version, generation: m.generation, fingerprint }
}

/// deltaship's own scanner (`json::Scanner`): one validating pass, no tree.
#[divan::bench(args = FIXTURES)]
fn scanner_metadata_and_fingerprint(bencher: Bencher, fixture: &str) {
    let json = wire(fixture);
    let scanner = scanner();
    bencher.counter(bytes(fixture)).bench_local(|| scan(&scanner, divan::black_box(&json)));
}

/// The same, and the bytes to ship without `metadata.managedFields`.
#[divan::bench(args = FIXTURES)]
fn scanner_and_managed_fields_cut(bencher: Bencher, fixture: &str) {
    let json = wire(fixture);
    let scanner = scanner();
    bencher.counter(bytes(fixture)).bench_local(|| {
        let s = scanner.scan(divan::black_box(&json)).unwrap();
        (s.fingerprint(b""), s.shipped(b"", true).len(), s.meta)
    });
}

fn sonic_tree() -> sonic_rs::PointerTree {
    let mut tree = sonic_rs::PointerTree::new();
    for path in [&["kind"][..], &["apiVersion"], &["metadata", "name"], &["metadata", "namespace"], &["metadata", "uid"]] {
        tree.add_path(path);
    }
    for path in [["metadata", "resourceVersion"], ["metadata", "generation"], ["metadata", "managedFields"]] {
        tree.add_path(path);
    }
    tree
}

fn sonic<'a>(tree: &sonic_rs::PointerTree, json: &'a [u8]) -> Read<'a> {
    use sonic_rs::JsonValueTrait;
    let found = sonic_rs::get_many(json, tree).unwrap();
    let text = |i: usize| found[i].as_ref().and_then(|v| v.as_str()).map(|s| Cow::Owned(s.to_string()));
    let spans = [5, 7].map(|i| found[i].as_ref().map(|v| within(json, v.as_raw_str())));
    Read {
        kind: text(0),
        name: text(2),
        uid: text(4),
        resource_version: text(5),
        generation: found[6].as_ref().and_then(|v| v.as_i64()),
        fingerprint: hash_without(json, spans),
    }
}

/// sonic-rs's lazy `get_many` (one pass over a pointer tree) for the metadata and the
/// spans of the ignored members. Built without `-C target-cpu=native` (as deltaship is),
/// so its portable code, not its AVX2 one.
#[divan::bench(args = FIXTURES)]
fn sonic_rs_get_many(bencher: Bencher, fixture: &str) {
    let json = wire(fixture);
    let tree = sonic_tree();
    bencher.counter(bytes(fixture)).bench_local(|| sonic(&tree, divan::black_box(&json)));
}

fn simd_json_tree(json: &[u8]) -> Read<'static> {
    use simd_json::prelude::*;
    // simd-json parses in place: the input is copied first, as the bridge would have to.
    let mut buf = json.to_vec();
    let value = simd_json::to_borrowed_value(&mut buf).unwrap();
    let text = |v: Option<&simd_json::BorrowedValue>| v.and_then(|v| v.as_str()).map(|s| Cow::Owned(s.to_string()));
    let meta = value.get("metadata");
    Read {
        kind: text(value.get("kind")),
        name: text(meta.and_then(|m| m.get("name"))),
        uid: text(meta.and_then(|m| m.get("uid"))),
        resource_version: text(meta.and_then(|m| m.get("resourceVersion"))),
        generation: meta.and_then(|m| m.get("generation")).and_then(|g| g.as_i64()),
        fingerprint: 0,
    }
}

/// simd-json's tree (`BorrowedValue`) of a copy of the bytes, its metadata read: the parse
/// alone, without the fingerprint it cannot give (its objects keep no member order).
#[divan::bench(args = FIXTURES)]
fn simd_json_borrowed_value(bencher: Bencher, fixture: &str) {
    let json = wire(fixture);
    bencher.counter(bytes(fixture)).bench_local(|| simd_json_tree(divan::black_box(&json)));
}

/// Where `part` (a slice of `json`) lies in it.
fn within(json: &[u8], part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - json.as_ptr() as usize;
    start..start + part.len()
}

/// The hash of compact `json` without the members whose values are at `values`, each
/// with the comma before it: enough for the fixtures, where neither member is an object's
/// first nor are they adjacent (the check against the tree path in `wire` holds it).
fn hash_without<const N: usize>(json: &[u8], values: [Option<Range<usize>>; N]) -> u128 {
    let mut cuts: Vec<Range<usize>> = values
        .into_iter()
        .flatten()
        .map(|v| {
            // `,"name":value`: back over the colon and the name's quotes to the comma.
            let name_start = json[..v.start - 2].iter().rposition(|&b| b == b'"').unwrap();
            name_start - 1..v.end
        })
        .collect();
    cuts.sort_by_key(|c| c.start);
    let mut hasher = xxhash_rust::xxh3::Xxh3Default::new();
    let mut at = 0;
    for cut in cuts {
        hasher.update(&json[at..cut.start]);
        at = cut.end;
    }
    hasher.update(&json[at..]);
    hasher.digest128()
}
