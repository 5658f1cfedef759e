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

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;

/// One received CloudEvent, whatever the binding.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub ty: String,
    /// The `cluster` extension.
    pub cluster: String,
    /// `apiversion` and `kind` extensions: the resource.
    pub apiversion: String,
    pub kind: String,
    /// The object key (`subject`); absent on markers.
    pub subject: Option<String>,
    pub datacontenttype: Option<String>,
    pub data: Option<Value>,
    /// Kafka partition (0 for NATS).
    pub partition: i32,
}

const PATCH: &str = "application/json-patch+json";

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("event {id}: {problem}")]
    Malformed { id: String, problem: String },
}

/// What the consumer holds: per resource (`apiVersion/Kind`), objects by key.
#[derive(Debug, Default)]
pub struct State {
    pub resources: BTreeMap<String, BTreeMap<String, Value>>,
    /// Partition and cluster of each (resource, key).
    partitions: HashMap<(String, String), (i32, String)>,
    /// Full syncs under way, by (partition, sync id): resource, namespace scope, touched keys.
    open: HashMap<(i32, String), OpenSync>,
    /// Ids seen, per partition (a marker is on every partition with one id).
    seen_ids: HashSet<(i32, String)>,
    /// Only events of this cluster are applied (None: all clusters).
    only_cluster: Option<String>,
    pub summary: Summary,
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
}

fn resource_of(apiversion: &str, kind: &str) -> String {
    format!("{apiversion}/{kind}")
}

impl State {
    /// A consumer of the events of `cluster` only, or of every cluster.
    pub fn new(cluster: Option<String>) -> State {
        State {
            only_cluster: cluster,
            ..State::default()
        }
    }

    pub fn apply(&mut self, e: Received) -> Result<(), ProtocolError> {
        self.summary.events += 1;
        if self.only_cluster.as_ref().is_some_and(|c| *c != e.cluster) {
            self.summary.other_clusters += 1;
            return Ok(());
        }
        if !self.seen_ids.insert((e.partition, e.id.clone())) {
            // A repeat is an exact repeat: same id, same content.
            self.summary.duplicates += 1;
            return Ok(());
        }
        let short = e.ty.trim_start_matches("dev.deltaship.").to_string();
        *self.summary.by_type.entry(short.clone()).or_default() += 1;
        let malformed = |problem: &str| ProtocolError::Malformed {
            id: e.id.clone(),
            problem: problem.into(),
        };
        match short.as_str() {
            "sync.started" | "sync.completed" => {
                let data = e.data.as_ref().ok_or_else(|| malformed("marker without data"))?;
                let sync_id = data["syncId"].as_str().ok_or_else(|| malformed("marker without syncId"))?.to_string();
                let r = &data["resource"];
                let group = r["group"].as_str().unwrap_or_default();
                let version = r["version"].as_str().unwrap_or_default();
                let apiversion = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
                let resource = resource_of(&apiversion, r["kind"].as_str().unwrap_or_default());
                let slot = (e.partition, sync_id);
                if short == "sync.started" {
                    if data["mode"] == "full" {
                        let namespace = data["namespace"].as_str().map(str::to_string);
                        self.open.insert(
                            slot,
                            OpenSync {
                                cluster: e.cluster.clone(),
                                resource,
                                namespace,
                                touched: HashSet::new(),
                            },
                        );
                    }
                } else if let Some(sync) = self.open.remove(&slot) {
                    self.remove_untouched(e.partition, sync);
                }
            }
            _ => {
                let key = e.subject.clone().ok_or_else(|| malformed("object event without subject"))?;
                let resource = resource_of(&e.apiversion, &e.kind);
                for sync in self.open.values_mut() {
                    if sync.resource == resource && sync.cluster == e.cluster {
                        sync.touched.insert(key.clone());
                    }
                }
                let objects = self.resources.entry(resource.clone()).or_default();
                if short == "object.deleted" {
                    objects.remove(&key);
                    self.partitions.remove(&(resource, key));
                } else {
                    let data = e.data.ok_or_else(|| malformed("object event without data"))?;
                    let object = if e.datacontenttype.as_deref() == Some(PATCH) {
                        let mut current = objects.get(&key).cloned().ok_or_else(|| malformed("patch for an object never received"))?;
                        let patch: json_patch::Patch = serde_json::from_value(data).map_err(|err| malformed(&err.to_string()))?;
                        json_patch::patch(&mut current, &patch).map_err(|err| malformed(&err.to_string()))?;
                        current
                    } else {
                        data
                    };
                    objects.insert(key.clone(), object);
                    self.partitions.insert((resource, key), (e.partition, e.cluster.clone()));
                }
            }
        }
        Ok(())
    }

    fn remove_untouched(&mut self, partition: i32, sync: OpenSync) {
        let Some(objects) = self.resources.get_mut(&sync.resource) else { return };
        let in_scope = |key: &str| match &sync.namespace {
            Some(ns) => key.split_once('/').is_some_and(|(k_ns, _)| k_ns == ns),
            None => true,
        };
        let gone: Vec<String> = objects
            .keys()
            .filter(|k| in_scope(k) && !sync.touched.contains(*k))
            .filter(|k| {
                self.partitions
                    .get(&(sync.resource.clone(), (*k).clone()))
                    .is_some_and(|(p, cluster)| *p == partition && *cluster == sync.cluster)
            })
            .cloned()
            .collect();
        for k in gone {
            objects.remove(&k);
            self.partitions.remove(&(sync.resource.clone(), k));
            self.summary.removed_by_markers += 1;
        }
    }

    /// The rebuilt state and the summary, as one JSON document.
    pub fn document(&mut self) -> Value {
        self.resources.retain(|_, objects| !objects.is_empty());
        self.summary.objects = self.resources.values().map(|o| o.len() as u64).sum();
        serde_json::json!({"resources": self.resources, "summary": self.summary})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(id: &str, ty: &str, subject: Option<&str>, data: Value, partition: i32) -> Received {
        Received {
            id: id.into(),
            ty: format!("dev.deltaship.{ty}"),
            cluster: "c1".into(),
            apiversion: "v1".into(),
            kind: "ConfigMap".into(),
            subject: subject.map(Into::into),
            datacontenttype: Some("application/json".into()),
            data: Some(data),
            partition,
        }
    }

    fn marker(id: &str, phase: &str, sync: &str, partition: i32) -> Received {
        ev(id, phase, None, json!({"syncId": sync, "mode": "full", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}, "namespace": "ns"}), partition)
    }

    fn keys(s: &State) -> Vec<String> {
        s.resources.get("v1/ConfigMap").map(|o| o.keys().cloned().collect()).unwrap_or_default()
    }

    #[test]
    fn a_full_sync_drops_objects_deleted_while_nobody_watched() {
        let mut s = State::default();
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

    #[test]
    fn a_full_sync_of_one_cluster_leaves_another_clusters_objects_alone() {
        let mut s = State::default();
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
        let mut s = State::default();
        s.apply(ev("1", "object.added", Some("ns/a"), json!({"data": {"v": "x"}}), 0)).unwrap();
        let mut u = ev("2", "object.updated", Some("ns/a"), json!([{"op": "replace", "path": "/data/v", "value": "y"}]), 0);
        u.datacontenttype = Some(PATCH.into());
        s.apply(u.clone()).unwrap();
        s.apply(u).unwrap();
        assert_eq!(s.resources["v1/ConfigMap"]["ns/a"]["data"]["v"], "y");
        assert_eq!(s.summary.duplicates, 1);
        s.apply(ev("3", "object.deleted", Some("ns/a"), json!({}), 0)).unwrap();
        assert!(keys(&s).is_empty());
        assert_eq!(s.document()["summary"]["objects"], 0);
    }
}
