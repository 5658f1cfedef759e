//! The consumer protocol of the event contract, applied to events in stream order: the
//! model for users' consumers.
//!
//! 1. `added`, `updated`, `synced`: store the object under its key (`updated` with a JSON
//!    Patch payload: apply the patch to the stored object).
//! 2. `deleted`: remove the key.
//! 3. `sync.started` of a full sync: note it; on the matching `sync.completed`, remove every
//!    key of that resource within the marker's namespace scope that received no event since.
//!
//! Kafka delivers markers to every partition and each object to one partition, so the
//! protocol runs per partition: a `completed` seen on partition p only removes keys that
//! live on p. Several clusters may share a topic or stream: a marker only removes keys of
//! its own cluster (the `cluster` extension).
//!
//! A patch that does not apply leaves the object as it was (its key still exists, so the
//! keys stay exact) and marks it stale until its next whole object or delete.
//!
//! A repeat (same id on the same partition) of an event applied is skipped; what tells
//! repeats apart takes memory bounded by the objects held, not by the stream's length
//! (`repeats.rs`).
//!
//! A `sync.completed` whose data carries `state` (count and digest, event contract §4) is
//! checked once applied: the objects held of its resource, cluster and namespace scope that
//! live on its partition must be as many, and their terms (SHA-256 of key, uid and
//! resourceVersion of the last event applied to each) must sum to its digest.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::decode::{MAX_DEPTH, depth, kind_of};
use super::repeats::Window;
use super::step::{Bad, Body, ChangeKind, Content, Figures, Reason, Received, Step};

/// One object's term: the first 16 bytes of SHA-256(key "\n" uid "\n" resourceVersion),
/// read as a big-endian number.
pub fn term(key: &str, uid: &str, resource_version: &str) -> u128 {
    let hash = Sha256::new().chain_update(key).chain_update("\n").chain_update(uid).chain_update("\n").chain_update(resource_version).finalize();
    u128::from_be_bytes(hash[..16].try_into().expect("SHA-256 has 32 bytes"))
}

/// A marker's count and digest compared with the state held at it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    #[serde(rename = "syncId")]
    pub sync_id: String,
    pub cluster: String,
    pub resource: String,
    /// None: all namespaces.
    pub namespace: Option<String>,
    pub partition: i32,
    pub expected: Figures,
    pub held: Figures,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = self.namespace.as_ref().map_or("all namespaces".to_string(), |ns| format!("namespace {ns}"));
        write!(
            f,
            "marker {} of {} in {scope} on partition {} (cluster {}): expected {}, held {}",
            self.sync_id, self.resource, self.partition, self.cluster, self.expected, self.held
        )
    }
}

impl Received {
    /// The type without `dev.deltaship.`, as counted in the summary.
    fn short_type(&self) -> &'static str {
        match &self.body {
            Body::Marker { started: true, .. } => "sync.started",
            Body::Marker { started: false, .. } => "sync.completed",
            Body::Object { change: ChangeKind::Added, .. } => "object.added",
            Body::Object { change: ChangeKind::Updated, .. } => "object.updated",
            Body::Object { change: ChangeKind::Synced, .. } => "object.synced",
            Body::Object { change: ChangeKind::Deleted, .. } => "object.deleted",
        }
    }
}

/// What the consumer holds: per resource (`apiVersion/Kind`), objects by key.
#[derive(Debug, Default)]
pub struct ConsumerState {
    pub resources: BTreeMap<String, BTreeMap<String, Value>>,
    /// Where each (resource, key) lives and what it adds to a digest.
    homes: HashMap<(String, String), Home>,
    /// Full syncs under way, by (partition, sync id): resource, namespace scope, touched keys.
    open: HashMap<(i32, String), OpenSync>,
    /// The latest ids applied, per partition (a marker is on every partition with one id).
    window: Window,
    /// The id of the last marker of each scope: where a marker's repeats come.
    markers: HashMap<MarkerScope, String>,
    /// Objects kept as they were when a patch to them did not apply: their content is older
    /// than the stream's, so later patches are not applied to it either, until the next
    /// whole object (an `added`, `synced` or unpatched `updated`) or `deleted`.
    stale: HashSet<(String, String)>,
    /// Only events of this cluster are applied (None: all clusters).
    only_cluster: Option<String>,
    pub summary: Summary,
    /// Markers whose count and digest did not match the state held, in stream order.
    pub mismatches: Vec<Check>,
}

/// The partition and cluster of the last event applied to an object, its term, and the id
/// of its last event (a repeat of which is skipped however late it comes).
#[derive(Debug)]
struct Home {
    partition: i32,
    cluster: String,
    term: u128,
    id: String,
}

/// The marker key deltaship sends a marker under (resource, namespace scope, mode, phase),
/// on one partition, of one cluster.
#[derive(Debug, PartialEq, Eq, Hash)]
struct MarkerScope {
    partition: i32,
    cluster: String,
    resource: String,
    namespace: Option<String>,
    full: bool,
    started: bool,
}

impl MarkerScope {
    /// The scope of `e`, when it is a marker.
    fn of(e: &Received) -> Option<MarkerScope> {
        match &e.body {
            Body::Marker { started, full, resource, namespace, .. } => Some(MarkerScope {
                partition: e.partition,
                cluster: e.cluster.clone(),
                resource: resource.clone(),
                namespace: namespace.clone(),
                full: *full,
                started: *started,
            }),
            Body::Object { .. } => None,
        }
    }
}

#[derive(Debug)]
struct OpenSync {
    cluster: String,
    resource: String,
    namespace: Option<String>,
    touched: HashSet<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub events: u64,
    pub duplicates: u64,
    pub by_type: BTreeMap<String, u64>,
    pub removed_by_markers: u64,
    pub other_clusters: u64,
    pub objects: u64,
    /// Records skipped, by reason.
    pub skipped: BTreeMap<Reason, u64>,
    /// Events of types that are not the contract's, ignored.
    pub foreign_types: u64,
    /// Kafka records with a null value (compaction tombstones), ignored.
    pub tombstones: u64,
    /// Objects kept at an older content because a patch to them did not apply.
    pub stale_objects: u64,
    /// Reads of the source retried after a connection problem (NATS).
    pub retried_reads: u64,
    /// `sync.completed` markers whose count and digest matched the state held.
    pub verified: u64,
    /// `sync.completed` markers whose count or digest did not (listed in `mismatches`).
    pub mismatched: u64,
}

impl ConsumerState {
    /// A consumer of the events of `cluster` only, or of every cluster.
    pub fn new(cluster: Option<String>) -> ConsumerState {
        ConsumerState { only_cluster: cluster, ..ConsumerState::default() }
    }

    /// Whether `e` is the last event of its object (or marker scope) held: a repeat never
    /// arrives after a newer event of the same key, so a repeat is that, while the object or
    /// scope is held, or else one of the window's latest ids.
    fn last_of_its_key(&self, e: &Received, scope: Option<&MarkerScope>) -> bool {
        match (&e.body, scope) {
            (_, Some(scope)) => self.markers.get(scope) == Some(&e.id),
            (Body::Object { resource, key, .. }, None) => {
                self.homes.get(&(resource.clone(), key.clone())).is_some_and(|h| h.partition == e.partition && h.cluster == e.cluster && h.id == e.id)
            }
            (Body::Marker { .. }, None) => false,
        }
    }

    /// Applies one decoded record; Err for a record the protocol cannot apply (a patch that
    /// does not apply), which leaves the state as it was.
    pub fn step(&mut self, step: Step) -> Result<(), Bad> {
        match step {
            Step::Event(e) => self.apply(e),
            Step::Tombstone => {
                self.summary.tombstones += 1;
                Ok(())
            }
            Step::Foreign => {
                self.summary.foreign_types += 1;
                Ok(())
            }
        }
    }

    pub fn apply(&mut self, e: Received) -> Result<(), Bad> {
        self.summary.events += 1;
        if self.only_cluster.as_ref().is_some_and(|c| *c != e.cluster) {
            self.summary.other_clusters += 1;
            return Ok(());
        }
        let (scope, seen) = (MarkerScope::of(&e), (e.partition, e.id.clone()));
        if self.window.contains(&seen) || self.last_of_its_key(&e, scope.as_ref()) {
            // A repeat is an exact repeat: same id, same content.
            self.summary.duplicates += 1;
            return Ok(());
        }
        self.window.add(seen);
        if let Some(scope) = scope {
            self.markers.insert(scope, e.id.clone());
        }
        *self.summary.by_type.entry(e.short_type().to_string()).or_default() += 1;
        match e.body {
            Body::Marker { started, sync_id, full, resource, namespace, state } => {
                let slot = (e.partition, sync_id);
                if started {
                    if full {
                        self.open.insert(slot, OpenSync { cluster: e.cluster, resource, namespace, touched: HashSet::new() });
                    }
                    return Ok(());
                }
                if let Some(sync) = self.open.remove(&slot) {
                    self.remove_untouched(e.partition, sync);
                }
                if let Some(expected) = state {
                    let held = self.held(e.partition, &e.cluster, &resource, namespace.as_deref());
                    if held == expected {
                        self.summary.verified += 1;
                    } else {
                        self.summary.mismatched += 1;
                        let (partition, sync_id) = slot;
                        self.mismatches.push(Check { sync_id, cluster: e.cluster, resource, namespace, partition, expected, held });
                    }
                }
            }
            Body::Object { resource, key, content, uid, resource_version, .. } => {
                for sync in self.open.values_mut() {
                    if sync.resource == resource && sync.cluster == e.cluster {
                        sync.touched.insert(key.clone());
                    }
                }
                let objects = self.resources.entry(resource.clone()).or_default();
                let slot = (resource, key);
                if let (Content::Patch(_), Some(home)) = (&content, self.homes.get_mut(&slot)) {
                    // A patch refused below is still the object's latest event.
                    home.id.clone_from(&e.id);
                }
                let object = match content {
                    Content::None => {
                        objects.remove(&slot.1);
                        self.homes.remove(&slot);
                        self.stale.remove(&slot);
                        return Ok(());
                    }
                    Content::Patch(_) if self.stale.contains(&slot) => {
                        return Err(Bad::new(Reason::PatchNotApplied, "the object is stale: an earlier patch to it did not apply"));
                    }
                    Content::Patch(patch) => {
                        let stored = objects.get(&slot.1).ok_or_else(|| Bad::new(Reason::PatchNotApplied, "a patch for an object never received"))?;
                        match patched(stored, &patch) {
                            Ok(object) => object,
                            Err(e) => {
                                self.stale.insert(slot);
                                return Err(e);
                            }
                        }
                    }
                    Content::Whole(object) => {
                        self.stale.remove(&slot);
                        object
                    }
                };
                objects.insert(slot.1.clone(), object);
                let term = term(&slot.1, &uid, &resource_version);
                self.homes.insert(slot, Home { partition: e.partition, cluster: e.cluster, term, id: e.id });
            }
        }
        Ok(())
    }

    /// The count and digest of the objects held of `resource` and `cluster` within the
    /// namespace scope (None: all namespaces) that live on `partition`.
    fn held(&self, partition: i32, cluster: &str, resource: &str, namespace: Option<&str>) -> Figures {
        let mut figures = Figures::default();
        for key in self.resources.get(resource).into_iter().flat_map(|o| o.keys()).filter(|k| in_scope(k, namespace)) {
            if let Some(home) = self.homes.get(&(resource.to_string(), key.clone())).filter(|h| h.partition == partition && h.cluster == cluster) {
                figures.count += 1;
                figures.digest = figures.digest.wrapping_add(home.term);
            }
        }
        figures
    }

    fn remove_untouched(&mut self, partition: i32, sync: OpenSync) {
        let Some(objects) = self.resources.get_mut(&sync.resource) else { return };
        let gone: Vec<String> = objects
            .keys()
            .filter(|k| in_scope(k, sync.namespace.as_deref()) && !sync.touched.contains(*k))
            .filter(|k| self.homes.get(&(sync.resource.clone(), (*k).clone())).is_some_and(|h| h.partition == partition && h.cluster == sync.cluster))
            .cloned()
            .collect();
        for k in gone {
            objects.remove(&k);
            let slot = (sync.resource.clone(), k);
            self.homes.remove(&slot);
            self.stale.remove(&slot);
            self.summary.removed_by_markers += 1;
        }
    }

    /// The rebuilt state and the summary, as one JSON document.
    pub fn document(&mut self) -> Value {
        self.resources.retain(|_, objects| !objects.is_empty());
        self.summary.objects = self.resources.values().map(|o| o.len() as u64).sum();
        self.summary.stale_objects = self.stale.len() as u64;
        serde_json::json!({"resources": self.resources, "summary": self.summary, "mismatches": self.mismatches})
    }
}

/// Whether `key` is within a marker's namespace scope (None: all namespaces; a namespace
/// covers the keys `<namespace>/<name>`, so "" covers none).
fn in_scope(key: &str, namespace: Option<&str>) -> bool {
    match namespace {
        Some(ns) => key.split_once('/').is_some_and(|(k_ns, _)| k_ns == ns),
        None => true,
    }
}

/// The most JSON values a patched object may hold: far above any object the API server
/// stores (about 1.5 MiB of JSON), low enough that `copy` operations, which double an object
/// without any input, cannot exhaust memory.
const MAX_VALUES: usize = 2_000_000;

/// `stored` with `patch` applied, all or nothing; refused when an operation would nest
/// the object deeper than MAX_DEPTH or make it hold more than MAX_VALUES values (both
/// checked before each operation, so a patch cannot build an object too deep to drop or
/// write, or too large for memory).
fn patched(stored: &Value, patch: &json_patch::Patch) -> Result<Value, Bad> {
    use json_patch::PatchOperation as Op;
    let mut object = stored.clone();
    // An upper bound of the object's values: operations that remove count as nothing.
    let mut values = count_values(&object);
    for op in &patch.0 {
        values += match op {
            Op::Add(o) => count_values(&o.value),
            Op::Replace(o) => count_values(&o.value),
            Op::Copy(o) => object.pointer(o.from.as_str()).map_or(0, count_values),
            Op::Move(_) | Op::Remove(_) | Op::Test(_) => 0,
        };
        if values > MAX_VALUES {
            return Err(Bad::new(Reason::PatchNotApplied, format!("the patch would make the object hold more than {MAX_VALUES} JSON values")));
        }
        let tokens = |p: &json_patch::jsonptr::Pointer| p.as_str().matches('/').count();
        let reach = match op {
            Op::Add(o) => tokens(&o.path) + depth(&o.value),
            Op::Replace(o) => tokens(&o.path) + depth(&o.value),
            Op::Copy(o) => tokens(&o.path) + object.pointer(o.from.as_str()).map_or(0, depth),
            Op::Move(o) => tokens(&o.path) + object.pointer(o.from.as_str()).map_or(0, depth),
            Op::Remove(_) | Op::Test(_) => 0,
        };
        if reach > MAX_DEPTH {
            return Err(Bad::new(Reason::PatchNotApplied, format!("the patch would nest the object deeper than {MAX_DEPTH} levels")));
        }
        json_patch::patch(&mut object, std::slice::from_ref(op)).map_err(|e| Bad::new(Reason::PatchNotApplied, e.to_string()))?;
    }
    // Whole objects that are not JSON objects are refused (`wrong_type`); so are patches
    // that would make one (a `replace` of the root).
    if !object.is_object() {
        return Err(Bad::new(Reason::PatchNotApplied, format!("the patch would make the object {}", kind_of(&object))));
    }
    Ok(object)
}

/// How many JSON values `v` holds, itself included.
fn count_values(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(count_values).sum::<usize>(),
        Value::Object(o) => 1 + o.values().map(count_values).sum::<usize>(),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rebuild::decode::{Binding, decode};
    use serde_json::json;

    /// A binary-mode Kafka record of `ty` (without `dev.deltaship.`), decoded.
    fn record(id: &str, ty: &str, subject: Option<&str>, content_type: &str, data: Value, partition: i32) -> Received {
        let ty = format!("dev.deltaship.{ty}");
        let mut headers: Vec<(&[u8], &[u8])> = vec![
            (b"ce_id", id.as_bytes()),
            (b"ce_type", ty.as_bytes()),
            (b"ce_cluster", b"c1"),
            (b"ce_apiversion", b"v1"),
            (b"ce_kind", b"ConfigMap"),
            (b"content-type", content_type.as_bytes()),
        ];
        if let Some(s) = subject {
            headers.push((b"ce_subject", s.as_bytes()));
        }
        match decode(Binding::Kafka, &headers, Some(&serde_json::to_vec(&data).unwrap()), partition) {
            Ok(Step::Event(e)) => e,
            other => panic!("not an event: {other:?}"),
        }
    }

    fn ev(id: &str, ty: &str, subject: Option<&str>, data: Value, partition: i32) -> Received {
        record(id, ty, subject, "application/json", data, partition)
    }

    fn patch(id: &str, subject: &str, ops: Value) -> Received {
        record(id, "object.updated", Some(subject), "application/json-patch+json", ops, 0)
    }

    fn marker(id: &str, phase: &str, sync: &str, partition: i32) -> Received {
        ev(
            id,
            phase,
            None,
            json!({"syncId": sync, "mode": "full", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}, "namespace": "ns"}),
            partition,
        )
    }

    fn keys(s: &ConsumerState) -> Vec<String> {
        s.resources.get("v1/ConfigMap").map(|o| o.keys().cloned().collect()).unwrap_or_default()
    }

    #[test]
    fn a_full_sync_drops_objects_deleted_while_nobody_watched() {
        let mut s = ConsumerState::default();
        for e in [
            ev("1", "object.added", Some("ns/a"), json!({"v": 1}), 0),
            ev("2", "object.added", Some("ns/b"), json!({"v": 1}), 1),
            ev("3", "object.added", Some("other/c"), json!({"v": 1}), 0),
            // A restarted bridge: full sync of namespace ns; only ns/a still exists.
            marker("4", "sync.started", "s2", 0),
            marker("5", "sync.started", "s2", 1),
            ev("6", "object.synced", Some("ns/a"), json!({"v": 2}), 0),
            marker("7", "sync.completed", "s2", 0),
            marker("8", "sync.completed", "s2", 1),
        ] {
            s.apply(e).unwrap();
        }
        assert_eq!(keys(&s), ["ns/a", "other/c"], "ns/b removed, other namespace untouched");
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"]["v"], 2);
        assert_eq!(s.summary.removed_by_markers, 1);
    }

    /// An object event with its uid and resourceVersion extensions.
    fn versioned(id: &str, ty: &str, key: &str, uid: &str, rv: &str, partition: i32) -> Received {
        let mut e = ev(id, ty, Some(key), json!({}), partition);
        if let Body::Object { uid: u, resource_version: v, .. } = &mut e.body {
            (*u, *v) = (uid.to_string(), rv.to_string());
        }
        e
    }

    fn completed(id: &str, sync: &str, partition: i32, state: Value) -> Received {
        let data = json!({"syncId": sync, "mode": "diff", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}, "namespace": "ns", "state": state});
        ev(id, "sync.completed", None, data, partition)
    }

    #[test]
    fn an_objects_term_is_the_first_half_of_the_sha256_of_key_uid_and_resource_version() {
        // `printf 'ns/a\nu1\n7' | sha256sum`
        assert_eq!(term("ns/a", "u1", "7"), 0x9003c859063459a282b3019b4296357b);
        assert_eq!(format!("{}", Figures { count: 1, digest: 1 }), "count 1 digest 00000000000000000000000000000001");
    }

    #[test]
    fn a_completed_markers_count_and_digest_are_checked_against_its_partitions_objects_in_scope() {
        let mut s = ConsumerState::default();
        for e in [
            versioned("1", "object.added", "ns/a", "u1", "7", 0),
            versioned("2", "object.added", "ns/b", "u2", "8", 1),
            versioned("3", "object.added", "other/c", "u3", "9", 0),
            versioned("4", "object.updated", "ns/a", "u1", "10", 0),
        ] {
            s.apply(e).unwrap();
        }
        let a = term("ns/a", "u1", "10");
        // Partition 0 holds ns/a at version 10 (other/c is out of scope); the sum wraps.
        s.apply(completed("5", "s", 0, json!({"count": 1, "digest": format!("{a:032x}")}))).unwrap();
        s.apply(completed("5", "s", 1, json!({"count": 1, "digest": format!("{:032x}", term("ns/b", "u2", "8"))}))).unwrap();
        assert_eq!((s.summary.verified, s.summary.mismatched), (2, 0));
        s.apply(completed("6", "t", 0, json!({"count": 2, "digest": format!("{:032x}", a.wrapping_add(u128::MAX))}))).unwrap();
        assert_eq!((s.summary.verified, s.summary.mismatched), (2, 1));
        let m = &s.mismatches[0];
        assert_eq!((m.sync_id.as_str(), m.partition, m.held), ("t", 0, Figures { count: 1, digest: a }));
        assert_eq!(m.expected.digest, a.wrapping_sub(1));
        // A marker without state is not checked.
        s.apply(ev("7", "sync.completed", None, json!({"syncId": "u", "resource": {"version": "v1", "kind": "ConfigMap"}}), 0)).unwrap();
        assert_eq!(s.summary.verified + s.summary.mismatched, 3);
    }

    #[test]
    fn a_full_sync_of_one_cluster_leaves_another_clusters_objects_alone() {
        let mut s = ConsumerState::default();
        let mut other = ev("1", "object.added", Some("ns/b"), json!({}), 0);
        other.cluster = "c2".into();
        s.apply(other).unwrap();
        for e in [marker("2", "sync.started", "s", 0), marker("3", "sync.completed", "s", 0)] {
            s.apply(e).unwrap();
        }
        assert_eq!(keys(&s), ["ns/b"]);
    }

    #[test]
    fn patches_apply_to_the_stored_object_and_repeats_are_skipped() {
        let mut s = ConsumerState::default();
        s.apply(ev("1", "object.added", Some("ns/a"), json!({"data": {"v": "x"}}), 0)).unwrap();
        let u = patch("2", "ns/a", json!([{"op": "replace", "path": "/data/v", "value": "y"}]));
        s.apply(u.clone()).unwrap();
        s.apply(u).unwrap();
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"]["data"]["v"], "y");
        assert_eq!(s.summary.duplicates, 1);
        s.apply(ev("3", "object.deleted", Some("ns/a"), json!({}), 0)).unwrap();
        assert!(keys(&s).is_empty());
        assert_eq!(s.document()["summary"]["objects"], 0);
    }

    #[test]
    fn a_late_repeat_of_an_objects_or_a_marker_scopes_last_event_is_skipped_beyond_the_window() {
        let mut s = ConsumerState { window: Window::new(1), ..ConsumerState::default() };
        let quiet = ev("q", "object.added", Some("ns/quiet"), json!({"v": 1}), 0);
        let started = marker("m", "sync.started", "s", 0);
        s.apply(quiet.clone()).unwrap();
        s.apply(started.clone()).unwrap();
        for i in 0..10 {
            s.apply(ev(&i.to_string(), "object.updated", Some("ns/busy"), json!({"v": i}), 0)).unwrap();
        }
        s.apply(quiet).unwrap();
        s.apply(started.clone()).unwrap();
        assert_eq!(s.summary.duplicates, 2, "both repeats skipped, 10 events after the window forgot them");
        // A Kafka marker's copy on another partition has the same id: not a repeat.
        let mut copy = started;
        copy.partition = 1;
        s.apply(copy).unwrap();
        assert_eq!(s.summary.duplicates, 2);
        // A deleted object's events are forgotten with it: only the window remembers them.
        s.apply(ev("d", "object.deleted", Some("ns/quiet"), json!({}), 0)).unwrap();
        assert_eq!(keys(&s), ["ns/busy"]);
    }

    #[test]
    fn a_patch_that_does_not_apply_keeps_the_object_stale_until_its_next_whole_content() {
        let mut s = ConsumerState::default();
        s.apply(ev("1", "object.added", Some("ns/a"), json!({"data": {"v": "x"}}), 0)).unwrap();
        let bad = s.apply(patch("2", "ns/a", json!([{"op": "replace", "path": "/nothing/here", "value": "y"}]))).unwrap_err();
        assert_eq!(bad.reason, Reason::PatchNotApplied);
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"]["data"]["v"], "x", "kept as it was");
        // A later patch would apply to content the stream has moved past: refused too.
        let later = s.apply(patch("3", "ns/a", json!([{"op": "replace", "path": "/data/v", "value": "z"}]))).unwrap_err();
        assert!(later.problem.contains("stale"), "{later}");
        assert_eq!(s.document()["summary"]["stale_objects"], 1);
        s.apply(ev("4", "object.updated", Some("ns/a"), json!({"data": {"v": "w"}}), 0)).unwrap();
        s.apply(patch("5", "ns/a", json!([{"op": "replace", "path": "/data/v", "value": "v"}]))).unwrap();
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"]["data"]["v"], "v");
        assert_eq!(s.document()["summary"]["stale_objects"], 0);
        let never = s.apply(patch("6", "ns/b", json!([]))).unwrap_err();
        assert_eq!(never.reason, Reason::PatchNotApplied);
    }

    #[test]
    fn a_patch_cannot_nest_the_object_deeper_than_the_parse_limit() {
        let mut s = ConsumerState::default();
        s.apply(ev("1", "object.added", Some("ns/a"), json!({"data": {}}), 0)).unwrap();
        let mut deep = json!(1);
        for _ in 0..100 {
            deep = json!([deep]);
        }
        // Each value fits; together, each added under the last, they would not.
        let pointer: String = "/0".repeat(100);
        let ops = json!([{"op": "add", "path": "/data/x", "value": deep}, {"op": "add", "path": format!("/data/x{pointer}"), "value": deep}]);
        let bad = s.apply(patch("2", "ns/a", ops)).unwrap_err();
        assert!(bad.problem.contains("deeper than 127"), "{bad}");
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"], json!({"data": {}}), "all or nothing");
    }

    #[test]
    fn a_patch_cannot_make_the_object_anything_but_an_object() {
        let mut s = ConsumerState::default();
        s.apply(ev("1", "object.added", Some("ns/a"), json!({"data": {}}), 0)).unwrap();
        let bad = s.apply(patch("2", "ns/a", json!([{"op": "replace", "path": "", "value": [1]}]))).unwrap_err();
        assert_eq!(bad.reason, Reason::PatchNotApplied);
        assert!(bad.problem.contains("an array"), "{bad}");
        s.apply(ev("3", "object.updated", Some("ns/a"), json!({"data": {}}), 0)).unwrap();
        s.apply(patch("4", "ns/a", json!([{"op": "replace", "path": "", "value": {"whole": true}}]))).unwrap();
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"], json!({"whole": true}));
    }

    #[test]
    fn copies_cannot_double_the_object_beyond_the_value_limit() {
        let mut s = ConsumerState::default();
        s.apply(ev("1", "object.added", Some("ns/a"), json!({"data": {"v": "x"}}), 0)).unwrap();
        // Each copy of the whole object into itself doubles it: 2^60 values without a bound.
        let ops: Vec<Value> = (0..60).map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")})).collect();
        let bad = s.apply(patch("2", "ns/a", Value::Array(ops))).unwrap_err();
        assert_eq!(bad.reason, Reason::PatchNotApplied);
        assert!(bad.problem.contains("more than 2000000 JSON values"), "{bad}");
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"], json!({"data": {"v": "x"}}), "all or nothing");
    }
}
