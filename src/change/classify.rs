//! Classification: watch events against the index, into changes bracketed by markers.

use std::collections::HashSet;
use std::sync::Arc;

use super::{
    Change, ChangeType, Entry, Fingerprinter, Index, Marker, MarkerPhase, Object, ObjectChange,
    ObjectRef, Payload, SyncCounts, SyncMode, SyncReason, WatchEvent,
};
use crate::telemetry::metrics as m;

/// The classifier of one watch (a resource within one namespace scope). It owns that
/// watch's index, so no lock is needed.
#[derive(Debug)]
pub struct Classifier {
    resource: String,
    index: Index,
    fingerprinter: Fingerprinter,
    relist_mode: SyncMode,
    sync: Option<Sync>,
    synced_once: bool,
}

#[derive(Debug)]
struct Sync {
    id: Arc<str>,
    reason: SyncReason,
    mode: SyncMode,
    seen: HashSet<String>,
    counts: SyncCounts,
    max_rv: Option<(u64, String)>,
}

impl Classifier {
    /// `resource` is the metric label; `relist_mode` applies to relists after the first sync.
    pub fn new(resource: String, fingerprinter: Fingerprinter, relist_mode: SyncMode) -> Self {
        Classifier {
            resource,
            index: Index::default(),
            fingerprinter,
            relist_mode,
            sync: None,
            synced_once: false,
        }
    }

    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Classifies one watch event, appending what must be shipped to `out`.
    pub fn handle(&mut self, event: WatchEvent, out: &mut Vec<Change>) {
        match event {
            WatchEvent::Init => self.start_sync(out),
            WatchEvent::InitApply(obj) => self.listed(obj, out),
            WatchEvent::InitDone => self.finish_sync(out),
            WatchEvent::Apply(obj) => self.applied(obj, None, out),
            WatchEvent::Delete(obj) => self.deleted(obj, out),
        }
    }

    fn start_sync(&mut self, out: &mut Vec<Change>) {
        let (reason, mode) = if self.synced_once {
            (SyncReason::Relist, self.relist_mode)
        } else {
            (SyncReason::Initial, SyncMode::Full)
        };
        let sync = Sync {
            id: uuid::Uuid::new_v4().to_string().into(),
            reason,
            mode,
            seen: HashSet::new(),
            counts: SyncCounts::default(),
            max_rv: None,
        };
        out.push(Change::Marker(marker(&sync, MarkerPhase::Started)));
        if reason == SyncReason::Relist {
            metrics::counter!(m::RELISTS, "resource" => self.resource.clone()).increment(1);
        }
        self.sync = Some(sync);
    }

    fn listed(&mut self, obj: Object, out: &mut Vec<Change>) {
        let Some(sync) = self.sync.as_mut() else {
            // A listed object outside a sync cannot come from kube-runtime's watcher; treat
            // it as a live change rather than lose it.
            return self.applied(obj, None, out);
        };
        let key = obj.reference.key();
        sync.seen.insert(key.clone());
        let rv = &obj.reference.resource_version;
        if let Ok(n) = rv.parse::<u64>()
            && sync.max_rv.as_ref().is_none_or(|(max, _)| n > *max)
        {
            sync.max_rv = Some((n, rv.clone()));
        }
        match sync.mode {
            SyncMode::Full => {
                let mut obj = obj;
                let fingerprint = self.fingerprinter.fingerprint(&mut obj.value);
                let id = sync.id.clone();
                self.replace_if_recreated(&key, &obj.reference, Some(id.clone()), out);
                self.ship(key, obj, fingerprint, ChangeType::Synced, Some(id), out);
            }
            SyncMode::Diff => {
                let id = sync.id.clone();
                self.applied(obj, Some(id), out);
            }
        }
    }

    fn finish_sync(&mut self, out: &mut Vec<Change>) {
        let Some(sync) = self.sync.as_mut() else { return };
        let (id, seen) = (sync.id.clone(), std::mem::take(&mut sync.seen));
        // Objects indexed but absent from the completed list were deleted while the watch
        // was down: client-go's DeletedFinalStateUnknown.
        for (key, entry) in self.index.drain_unless(|k| seen.contains(k)) {
            let reference = reference_from_key(&key, entry);
            self.push(ChangeType::Deleted, Payload::Reference(reference), Some(id.clone()), out);
        }
        let Some(sync) = self.sync.take() else { return };
        let mut done = marker(&sync, MarkerPhase::Completed);
        done.counts = Some(sync.counts.clone());
        out.push(Change::Marker(done));
        let reason = match sync.reason {
            SyncReason::Initial => "initial",
            SyncReason::Relist => "relist",
        };
        metrics::counter!(m::SYNCS, "resource" => self.resource.clone(), "reason" => reason).increment(1);
        self.synced_once = true;
    }

    /// A live ADDED/MODIFIED, or a listed object in a diff sync (`sync` set).
    fn applied(&mut self, mut obj: Object, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        let key = obj.reference.key();
        let previous = self.index.get(&key).cloned();
        if let Some(prev) = &previous
            && prev.uid == obj.reference.uid
            && prev.resource_version == obj.reference.resource_version
        {
            metrics::counter!(m::DEDUPE_SKIPS, "resource" => self.resource.clone(), "reason" => "resource_version").increment(1);
            return;
        }
        let fingerprint = self.fingerprinter.fingerprint(&mut obj.value);
        let change = match &previous {
            None => ChangeType::Added,
            Some(prev) if prev.uid != obj.reference.uid => {
                self.replace_if_recreated(&key, &obj.reference, sync.clone(), out);
                ChangeType::Added
            }
            Some(prev) if prev.fingerprint == fingerprint => {
                // Same content once ignored fields are left out: remember the new version
                // so the next relist compares against it, ship nothing.
                self.index.insert(
                    key,
                    Entry {
                        resource_version: obj.reference.resource_version.clone(),
                        ..prev.clone()
                    },
                );
                metrics::counter!(m::DEDUPE_SKIPS, "resource" => self.resource.clone(), "reason" => "fingerprint").increment(1);
                return;
            }
            Some(_) => ChangeType::Updated,
        };
        self.ship(key, obj, fingerprint, change, sync, out);
    }

    /// When the indexed object under `key` has another uid than `current`, the old one was
    /// deleted (and the name reused) while we did not see it: ship its delete first.
    fn replace_if_recreated(&mut self, key: &str, current: &ObjectRef, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        if let Some(prev) = self.index.get(key)
            && prev.uid != current.uid
        {
            let prev = self.index.remove(key).expect("entry just read");
            let reference = reference_from_key(key, prev);
            self.push(ChangeType::Deleted, Payload::Reference(reference), sync, out);
        }
    }

    fn deleted(&mut self, obj: Object, out: &mut Vec<Change>) {
        let key = obj.reference.key();
        self.index.remove(&key);
        self.push(ChangeType::Deleted, Payload::Object(obj), None, out);
    }

    fn ship(&mut self, key: String, obj: Object, fingerprint: u128, change: ChangeType, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        self.index.insert(
            key,
            Entry {
                uid: obj.reference.uid.clone(),
                resource_version: obj.reference.resource_version.clone(),
                fingerprint,
            },
        );
        self.push(change, Payload::Object(obj), sync, out);
    }

    /// Appends an object change. `sync` is set when the change is part of the current
    /// sync: it is counted for the `completed` marker, and `synced` events carry its id
    /// (diff changes are ordinary changes and do not).
    fn push(&mut self, change: ChangeType, payload: Payload, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        if let (Some(id), Some(current)) = (&sync, self.sync.as_mut())
            && *id == current.id
        {
            current.counts.count(change);
        }
        let sync_id = sync.filter(|_| change == ChangeType::Synced);
        out.push(Change::Object(ObjectChange { change, payload, sync_id }));
    }
}

fn marker(sync: &Sync, phase: MarkerPhase) -> Marker {
    Marker {
        phase,
        sync_id: sync.id.clone(),
        reason: sync.reason,
        mode: sync.mode,
        resource_version: match phase {
            MarkerPhase::Started => String::new(),
            MarkerPhase::Completed => sync.max_rv.as_ref().map(|(_, rv)| rv.clone()).unwrap_or_default(),
        },
        counts: None,
    }
}

fn reference_from_key(key: &str, entry: Entry) -> ObjectRef {
    let (namespace, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
        None => (None, key.to_string()),
    };
    ObjectRef {
        namespace,
        name,
        uid: entry.uid,
        resource_version: entry.resource_version,
    }
}
