//! Classification: watch events against the index, into changes bracketed by markers.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

use super::index::{Entry, Index};
use super::output::{Change, Marker, ObjectChange, Payload, StateTerms, SyncCounts};
use crate::model::digest;
use crate::model::{ChangeType, MarkerPhase, Object, ObjectRef, Observed, Stall, SyncMode, SyncReason};
use crate::telemetry::meters::ClassifierMeters;

/// The classifier of one watch (a resource within one namespace scope). It owns that
/// watch's index, so no lock is needed.
#[derive(Debug)]
pub struct Classifier {
    resource: Arc<str>,
    /// The watch's counters: registered once, not looked up per event.
    meters: ClassifierMeters,
    /// Events older than what was shipped for their object (a lagging API server) are
    /// counted; logged on the first only.
    stale_logged: bool,
    /// Resyncs deferred for want of content are counted; logged on the first only.
    deferred_logged: bool,
    /// The newest resourceVersion the watch has stood at outside syncs (live events,
    /// bookmarks, a checkpoint's position): a list older than this is not trusted to show
    /// what was deleted.
    position: u64,
    index: Index,
    relist_mode: SyncMode,
    /// Keep each object's shipped content in the index (for resyncs and patch payloads).
    keep_content: bool,
    sync: Option<SyncInProgress>,
    synced_once: bool,
    /// Per uid, the newest resourceVersion consumers received after the checkpoint the
    /// index was loaded from (read from the log's tail), and the newest of them all: an
    /// event of that uid at or below it is a repeat, never shipped. Dropped once the watch
    /// stands past them all.
    delivered: HashMap<String, u64>,
    delivered_until: u64,
    /// Set while the index holds a checkpoint's state and nothing was observed yet: the
    /// checkpoint's resourceVersion. The watch either continues from it
    /// (`Observed::Resumed`) or lists, and the list is shipped as a diff against it.
    resuming: Option<String>,
    /// The API server's history was replaced under the watch: the next list is a full sync
    /// that replaces what was shipped.
    replace_next: bool,
}

#[derive(Debug)]
struct SyncInProgress {
    id: Arc<str>,
    reason: SyncReason,
    mode: SyncMode,
    seen: HashSet<String>,
    counts: SyncCounts,
    max_rv: Option<(u64, String)>,
    /// The list's own resourceVersion, once the list reported it (a list-based sync).
    listed_at: Option<String>,
}

impl Classifier {
    /// `resource` is the metric label; `relist_mode` applies to relists after the first
    /// sync; `keep_content` keeps shipped content in the index (resyncs, patch payloads).
    pub fn new(resource: impl Into<Arc<str>>, relist_mode: SyncMode, keep_content: bool) -> Self {
        let resource = resource.into();
        Classifier {
            meters: ClassifierMeters::new(Arc::clone(&resource)),
            resource,
            stale_logged: false,
            deferred_logged: false,
            position: 0,
            index: Index::default(),
            relist_mode,
            keep_content,
            sync: None,
            synced_once: false,
            delivered: HashMap::new(),
            delivered_until: 0,
            resuming: None,
            replace_next: false,
        }
    }

    /// Counts a completed sync of `reason`.
    fn count_sync(&mut self, reason: SyncReason) {
        self.meters.synced(reason);
    }

    /// Counts an update not shipped because nothing visible changed: `reason` is
    /// `resource_version` or `fingerprint`.
    fn count_skip(&mut self, reason: &'static str) {
        self.meters.skipped(reason);
    }

    /// The watch stands at `version` (when it is a number).
    fn stood_at(&mut self, version: &str) {
        if let Ok(v) = version.parse::<u64>() {
            self.position = self.position.max(v);
            if v > self.delivered_until && !self.delivered.is_empty() {
                self.delivered = HashMap::new();
            }
        }
    }

    /// Whether consumers already received `r`'s object at this version or a later one
    /// (after the checkpoint, as its log's tail shows): counted as a skip, not shipped.
    fn already_delivered(&mut self, r: &ObjectRef) -> bool {
        let received = self.delivered.get(&r.uid).copied();
        let repeat = matches!((received, r.resource_version.parse::<u64>()), (Some(received), Ok(v)) if v <= received);
        if repeat {
            self.count_skip("delivered");
        }
        repeat
    }

    /// Counts (and logs, the first time) an event not shipped because it is older than the
    /// indexed state of its object.
    fn count_stale(&mut self, key: &str, version: &str, indexed: &str) {
        self.meters.stale();
        if !std::mem::replace(&mut self.stale_logged, true) {
            tracing::warn!(resource = %self.resource, key, resource_version = version, shipped = indexed, "Not shipped: an event older than the object's state already shipped (an API server behind the others?); further ones are counted in deltaship_stale_events_total");
        }
    }

    /// Starts from a checkpoint instead of an empty index: `entries` is what was
    /// acknowledged, `resource_version` the watch position it was acknowledged at. The
    /// first sync is then a `resume` diff instead of an `initial` full sync.
    /// `delivered`: per uid, the newest resourceVersion consumers received after the
    /// checkpoint.
    pub fn resume_from(&mut self, entries: impl IntoIterator<Item = (String, Entry)>, resource_version: String, delivered: HashMap<String, String>) {
        for (key, entry) in entries {
            self.index.insert(key, entry);
        }
        self.delivered = delivered.into_iter().filter_map(|(uid, v)| Some((uid, v.parse::<u64>().ok()?))).collect();
        self.delivered_until = self.delivered.values().copied().max().unwrap_or(0);
        self.synced_once = true;
        self.stood_at(&resource_version);
        self.resuming = Some(resource_version);
    }

    /// A periodic resync: every indexed object as `synced`, from the index, between
    /// markers with reason `resync`. Skipped (false) while another sync is under way or
    /// before the initial one completed; needs `keep_content`.
    pub fn resync(&mut self, out: &mut Vec<Change>) -> bool {
        if self.sync.is_some() || !self.synced_once || !self.keep_content {
            return false;
        }
        // Its completed marker counts the whole index, and a full sync makes consumers drop
        // what it did not ship: an entry whose content the index has not seen yet (loaded
        // from a checkpoint, behind a list older than the watch's position) would be removed
        // from every consumer. Such a resync is not run; the next list supplies the content.
        let unseen = self.index.iter().filter(|(_, e)| e.content.is_none()).count();
        if unseen > 0 {
            self.meters.resync_deferred();
            if !std::mem::replace(&mut self.deferred_logged, true) {
                tracing::warn!(resource = %self.resource, objects = unseen, "Resync deferred: the index holds objects whose shipped content it has not seen since the checkpoint; it runs once a list supplied them (further ones are counted in deltaship_resyncs_deferred_total)");
            }
            return false;
        }
        let mut sync = SyncInProgress::new(SyncReason::Resync, SyncMode::Full);
        out.push(Change::Marker(marker(&sync, MarkerPhase::Started)));
        for (key, entry) in self.index.sorted() {
            let Some(content) = &entry.content else { continue };
            sync.note_version(&entry.resource_version.to_string());
            sync.counts.count(ChangeType::Synced);
            out.push(Change::Object(ObjectChange {
                change: ChangeType::Synced,
                // Content is empty only for an object too deep to ship whole.
                payload: Payload::Object(Object {
                    reference: reference_from_key(key, entry.clone()),
                    json: content.clone(),
                    fingerprint: entry.fingerprint,
                    truncated: content.is_empty(),
                }),
                sync_id: Some(sync.id.clone()),
                previous: None,
                fingerprint: entry.fingerprint,
            }));
        }
        let mut done = marker(&sync, MarkerPhase::Completed);
        done.counts = Some(sync.counts.clone());
        done.state = Some(self.state_terms());
        out.push(Change::Marker(done));
        self.count_sync(SyncReason::Resync);
        true
    }

    /// A state marker: a `state` pair with no objects between, the `completed` carrying
    /// the state consumers hold and the watch's position. Skipped (false) while a sync is
    /// under way or before the first one completed.
    pub fn state_marker(&mut self, out: &mut Vec<Change>) -> bool {
        if self.sync.is_some() || !self.synced_once || self.resuming.is_some() {
            return false;
        }
        let mut sync = SyncInProgress::new(SyncReason::State, SyncMode::Diff);
        out.push(Change::Marker(marker(&sync, MarkerPhase::Started)));
        if self.position > 0 {
            sync.max_rv = Some((self.position, self.position.to_string()));
        }
        let mut done = marker(&sync, MarkerPhase::Completed);
        done.counts = Some(SyncCounts::default());
        done.state = Some(self.state_terms());
        out.push(Change::Marker(done));
        self.count_sync(SyncReason::State);
        true
    }

    /// Every indexed object's key and digest term: the state a consumer holds at a
    /// `completed` marker (the marker applied), for its count and digest.
    fn state_terms(&self) -> StateTerms {
        Arc::new(self.index.iter().map(|(key, e)| (key.to_string(), digest::term(key, &e.uid.to_string(), &e.resource_version.to_string()))).collect())
    }

    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Classifies one watch event, appending what must be shipped to `out`.
    pub fn handle(&mut self, event: Observed, out: &mut Vec<Change>) {
        match event {
            Observed::Init => self.start_sync(out),
            Observed::InitApply(obj) => self.listed(obj, out),
            Observed::InitDone => self.finish_sync(out),
            Observed::Apply(obj) => {
                self.stood_at(&obj.reference.resource_version);
                self.applied(obj, None, out)
            }
            Observed::Delete(obj) => self.deleted(obj, out),
            Observed::Resumed => self.resumed(out),
            Observed::Stalled(stall) => self.stalled(&stall),
            // No object changed: nothing to ship (the worker moves the checkpoints). Within a
            // sync, the list's version, which its completed marker carries.
            Observed::Bookmark(version) => match self.sync.as_mut() {
                Some(sync) => sync.listed_at = Some(version),
                None => self.stood_at(&version),
            },
        }
    }

    /// The watch continues from the checkpoint: a `resume` sync with nothing in it says
    /// so; what changed since comes as live changes.
    fn resumed(&mut self, out: &mut Vec<Change>) {
        let Some(resource_version) = self.resuming.take() else { return };
        let mut sync = SyncInProgress::new(SyncReason::Resume, SyncMode::Diff);
        out.push(Change::Marker(marker(&sync, MarkerPhase::Started)));
        sync.max_rv = Some((0, resource_version));
        let mut done = marker(&sync, MarkerPhase::Completed);
        done.counts = Some(SyncCounts::default());
        done.state = Some(self.state_terms());
        out.push(Change::Marker(done));
        self.count_sync(SyncReason::Resume);
    }

    /// The watch stalled; a list follows. When the API server's history was replaced
    /// (etcd restored from a backup), the versions seen so far are another history's: the
    /// position is forgotten, so that the list is trusted to show deletes, and the list is
    /// a full sync whatever `relist` says: its `synced` events replace each object's state
    /// (its version may be older than the one shipped) and consumers drop what it lacks.
    fn stalled(&mut self, stall: &Stall) {
        if stall.reason.rewound() {
            self.position = 0;
            self.resuming = None;
            self.replace_next = true;
            // Versions consumers received belong to the history that was replaced.
            self.delivered = HashMap::new();
            self.delivered_until = 0;
        }
    }

    fn start_sync(&mut self, out: &mut Vec<Change>) {
        let (reason, mode) = if std::mem::take(&mut self.replace_next) {
            (SyncReason::Relist, SyncMode::Full)
        } else if self.resuming.take().is_some() {
            (SyncReason::Resume, SyncMode::Diff)
        } else if self.synced_once {
            (SyncReason::Relist, self.relist_mode)
        } else {
            (SyncReason::Initial, SyncMode::Full)
        };
        let sync = SyncInProgress::new(reason, mode);
        out.push(Change::Marker(marker(&sync, MarkerPhase::Started)));
        if reason == SyncReason::Relist {
            self.meters.relisted();
        }
        self.sync = Some(sync);
    }

    fn listed(&mut self, obj: Object, out: &mut Vec<Change>) {
        let Some(sync) = self.sync.as_mut() else {
            // The watch sends `Observed::Init` before a list's objects, so this does not
            // happen; should it, the object is a live change rather than lost.
            return self.applied(obj, None, out);
        };
        let key = obj.reference.key();
        sync.seen.insert(key.clone());
        sync.note_version(&obj.reference.resource_version);
        match sync.mode {
            SyncMode::Full => {
                let fingerprint = obj.fingerprint;
                let id = sync.id.clone();
                self.replace_if_recreated(&key, &obj.reference, Some(id.clone()), out);
                self.emit(key, obj, fingerprint, ChangeType::Synced, Some(id), out);
            }
            SyncMode::Diff => {
                let id = sync.id.clone();
                self.applied(obj, Some(id), out);
            }
        }
    }

    fn finish_sync(&mut self, out: &mut Vec<Change>) {
        let Some(sync) = self.sync.as_ref() else { return };
        let id = sync.id.clone();
        // A diff list older than where the watch already stood (a lagging API server) is
        // history: what it lacks may have been created since, so nothing is inferred deleted.
        let listed_at = sync.listed_at.as_deref().and_then(|v| v.parse::<u64>().ok());
        if sync.mode == SyncMode::Diff
            && let Some(at) = listed_at.filter(|at| *at < self.position)
        {
            let shipped = self.position.to_string();
            self.count_stale("(the list)", &at.to_string(), &shipped);
            return self.complete(out);
        }
        // Objects indexed but absent from the completed list were deleted while the watch
        // was down: client-go's DeletedFinalStateUnknown.
        for (key, entry) in self.index.drain_unless(|k| sync.seen.contains(k)) {
            let reference = reference_from_key(&key, entry);
            self.push(ChangeType::Deleted, Payload::Reference(reference), Some(id.clone()), out);
        }
        self.complete(out);
    }

    /// The `completed` marker of the sync under way.
    fn complete(&mut self, out: &mut Vec<Change>) {
        let Some(mut sync) = self.sync.take() else { return };
        // The list's keys go before the marker's state is made: two sets of every key at
        // once would be the sync's peak.
        sync.seen = HashSet::new();
        if let Some(at) = sync.listed_at.as_deref() {
            self.stood_at(at);
        }
        let mut done = marker(&sync, MarkerPhase::Completed);
        done.counts = Some(sync.counts.clone());
        done.state = Some(self.state_terms());
        out.push(Change::Marker(done));
        self.count_sync(sync.reason);
        self.synced_once = true;
    }

    /// A live ADDED/MODIFIED, or a listed object in a diff sync (`sync` set).
    fn applied(&mut self, obj: Object, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        let key = obj.reference.key();
        let indexed_as = |e: &Entry| e.uid.is(&obj.reference.uid) && e.resource_version.is(&obj.reference.resource_version);
        if self.already_delivered(&obj.reference) {
            // Consumers hold this version (the log's tail says so) and so does the index,
            // which learned it from the same tail without its content: this is that content,
            // and a resync or a patch later starts from it.
            if self.index.get(&key).is_some_and(indexed_as) {
                self.keep_as_shipped(&key, obj);
            }
            return;
        }
        let previous = self.index.get(&key).cloned();
        if previous.as_ref().is_some_and(indexed_as) {
            self.keep_as_shipped(&key, obj);
            self.count_skip("resource_version");
            return;
        }
        // Older than what consumers hold of the same object: history, never shipped (the
        // contract's versions never go backwards within a key).
        if let Some(prev) = &previous
            && prev.uid.is(&obj.reference.uid)
            && prev.resource_version.is_newer_than(&obj.reference.resource_version)
        {
            self.count_stale(&key, &obj.reference.resource_version, &prev.resource_version.to_string());
            return;
        }
        let fingerprint = obj.fingerprint;
        let change = match &previous {
            None => ChangeType::Added,
            Some(prev) if !prev.uid.is(&obj.reference.uid) => {
                self.replace_if_recreated(&key, &obj.reference, sync.clone(), out);
                ChangeType::Added
            }
            Some(prev) if prev.fingerprint == fingerprint => {
                // Same content once ignored fields are left out: ship nothing, and keep the
                // entry as shipped (consumers hold that version; patches and resyncs start
                // from it).
                self.count_skip("fingerprint");
                self.keep_as_shipped(&key, obj);
                return;
            }
            Some(_) => ChangeType::Updated,
        };
        self.emit(key, obj, fingerprint, change, sync, out);
    }

    /// An entry loaded from a checkpoint has no content; where the index keeps content,
    /// an unchanged object seen again supplies it (it is what consumers hold).
    fn keep_as_shipped(&mut self, key: &str, obj: Object) {
        if self.keep_content
            && let Some(entry) = self.index.get_mut(key)
            && entry.content.is_none()
        {
            entry.content = Some(obj.json);
        }
    }

    /// When the indexed object under `key` has another uid than `current`, the old one was
    /// deleted (and the name reused) while we did not see it: ship its delete first.
    fn replace_if_recreated(&mut self, key: &str, current: &ObjectRef, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        if let Some(prev) = self.index.get(key)
            && !prev.uid.is(&current.uid)
        {
            let prev = self.index.remove(key).expect("entry just read");
            let reference = reference_from_key(key, prev);
            self.push(ChangeType::Deleted, Payload::Reference(reference), sync, out);
        }
    }

    fn deleted(&mut self, obj: Object, out: &mut Vec<Change>) {
        if self.already_delivered(&obj.reference) {
            return;
        }
        self.stood_at(&obj.reference.resource_version);
        let key = obj.reference.key();
        self.index.remove(&key);
        self.push(ChangeType::Deleted, Payload::Object(obj), None, out);
    }

    fn emit(&mut self, key: String, obj: Object, fingerprint: u128, change: ChangeType, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        let content = self.keep_content.then(|| obj.json.clone());
        let previous = self
            .index
            .insert(
                key,
                Entry { uid: obj.reference.uid.as_str().into(), resource_version: obj.reference.resource_version.as_str().into(), fingerprint, content },
            )
            .and_then(|e| e.content)
            .filter(|_| change == ChangeType::Updated);
        self.push_with(change, Payload::Object(obj), sync, previous, fingerprint, out);
    }

    /// Appends an object change. `sync` is set when the change is part of the current
    /// sync: it is counted for the `completed` marker, and `synced` events carry its id
    /// (diff changes are ordinary changes and do not).
    fn push(&mut self, change: ChangeType, payload: Payload, sync: Option<Arc<str>>, out: &mut Vec<Change>) {
        self.push_with(change, payload, sync, None, 0, out);
    }

    fn push_with(&mut self, change: ChangeType, payload: Payload, sync: Option<Arc<str>>, previous: Option<Bytes>, fingerprint: u128, out: &mut Vec<Change>) {
        if let (Some(id), Some(current)) = (&sync, self.sync.as_mut())
            && *id == current.id
        {
            current.counts.count(change);
        }
        let sync_id = sync.filter(|_| change == ChangeType::Synced);
        out.push(Change::Object(ObjectChange { change, payload, sync_id, previous, fingerprint }));
    }
}

impl SyncInProgress {
    fn new(reason: SyncReason, mode: SyncMode) -> SyncInProgress {
        SyncInProgress {
            id: uuid::Uuid::new_v4().to_string().into(),
            reason,
            mode,
            seen: HashSet::new(),
            counts: SyncCounts::default(),
            max_rv: None,
            listed_at: None,
        }
    }

    /// Tracks the highest resourceVersion of the sync (for its `completed` marker).
    fn note_version(&mut self, rv: &str) {
        if let Ok(n) = rv.parse::<u64>()
            && self.max_rv.as_ref().is_none_or(|(max, _)| n > *max)
        {
            self.max_rv = Some((n, rv.to_string()));
        }
    }
}

fn marker(sync: &SyncInProgress, phase: MarkerPhase) -> Marker {
    Marker {
        phase,
        sync_id: sync.id.clone(),
        reason: sync.reason,
        mode: sync.mode,
        resource_version: match phase {
            MarkerPhase::Started => String::new(),
            MarkerPhase::Completed => sync.listed_at.clone().or_else(|| sync.max_rv.as_ref().map(|(_, rv)| rv.clone())).unwrap_or_default(),
        },
        counts: None,
        state: None,
    }
}

fn reference_from_key(key: &str, entry: Entry) -> ObjectRef {
    let (namespace, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
        None => (None, key.to_string()),
    };
    ObjectRef { namespace, name, uid: entry.uid.to_string(), resource_version: entry.resource_version.to_string() }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::model::fixtures::configmap;

    fn classifier() -> Classifier {
        Classifier::new("configmaps", SyncMode::Diff, false)
    }

    fn run(c: &mut Classifier, events: Vec<Observed>) -> Vec<Change> {
        let mut out = Vec::new();
        for e in events {
            c.handle(e, &mut out);
        }
        out
    }

    /// `type:key@rv` per object change, `started:reason` / `completed:reason:counts`.
    fn summary(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Object(o) => {
                    let r = o.payload.reference();
                    format!("{}:{}@{}", o.change.as_str(), r.key(), r.resource_version)
                }
                Change::Marker(m) => match &m.counts {
                    None => format!("started:{:?}", m.reason),
                    Some(n) => format!("completed:{:?}:{}/{}/{}/{}", m.reason, n.added, n.updated, n.deleted, n.synced),
                },
            })
            .collect()
    }

    fn cm(name: &str, rv: &str, v: &str) -> Object {
        configmap(name, &format!("uid-{name}"), rv, json!({"v": v}))
    }

    /// `obj` with a `status`, a field the watch's `ignore_fields` leave out of the
    /// fingerprint (the watch stage computes it: see `watch::decode`).
    fn with_ignored_status(obj: Object, status: serde_json::Value) -> Object {
        let mut value = obj.value().unwrap();
        value["status"] = status;
        Object { json: serde_json::to_vec(&value).unwrap().into(), ..obj }
    }

    #[test]
    fn initial_sync_ships_every_object_as_synced_between_markers() {
        let mut c = classifier();
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitApply(cm("b", "2", "x")), Observed::InitDone]);
        assert_eq!(summary(&out), ["started:Initial", "synced:ns/a@1", "synced:ns/b@2", "completed:Initial:0/0/0/2"]);
        let ids: Vec<_> = out
            .iter()
            .filter_map(|c| match c {
                Change::Object(o) => o.sync_id.clone(),
                Change::Marker(m) => Some(m.sync_id.clone()),
            })
            .collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]), "one sync id for the whole sync");
    }

    #[test]
    fn live_changes_are_added_updated_deleted_and_noops_are_skipped() {
        let mut c = classifier();
        run(&mut c, vec![Observed::Init, Observed::InitDone]);
        let status_only = with_ignored_status(cm("a", "3", "y"), json!({"phase": "new"}));
        let out = run(
            &mut c,
            vec![
                Observed::Apply(cm("a", "1", "x")),
                Observed::Apply(cm("a", "1", "x")), // same resourceVersion
                Observed::Apply(cm("a", "2", "y")),
                Observed::Apply(status_only), // only an ignored field changed
                Observed::Delete(cm("a", "4", "y")),
            ],
        );
        assert_eq!(summary(&out), ["added:ns/a@1", "updated:ns/a@2", "deleted:ns/a@4"]);
        assert!(out.iter().all(|c| matches!(c, Change::Object(o) if o.sync_id.is_none())));
    }

    /// A lagging API server's watch or diff list replays history: an event older than the
    /// object's state already shipped is not shipped (a newer object of another uid, or an
    /// opaque version, still is).
    #[test]
    fn an_event_older_than_the_shipped_state_of_its_object_is_not_shipped() {
        let mut c = classifier();
        run(&mut c, vec![Observed::Init, Observed::InitDone]);
        let recreated = configmap("a", "uid-new", "5", json!({"v": "z"}));
        let out = run(
            &mut c,
            vec![
                Observed::Apply(cm("a", "10", "x")),
                Observed::Apply(cm("a", "9", "old")),
                Observed::Init,
                Observed::InitApply(cm("a", "8", "older")),
                Observed::InitDone,
                Observed::Apply(recreated),
            ],
        );
        assert_eq!(summary(&out), ["added:ns/a@10", "started:Relist", "completed:Relist:0/0/0/0", "deleted:ns/a@10", "added:ns/a@5"]);
        let mut c = classifier();
        run(&mut c, vec![Observed::Init, Observed::InitDone]);
        let out = run(&mut c, vec![Observed::Apply(cm("b", "x9", "x")), Observed::Apply(cm("b", "x10", "y"))]);
        assert_eq!(summary(&out), ["added:ns/b@x9", "updated:ns/b@x10"], "opaque versions are not ordered");
    }

    /// A relist whose list is older than where the watch already stood (a lagging API
    /// server's) infers no delete: what it lacks may have been created since it was taken.
    #[test]
    fn a_list_older_than_the_watchs_position_infers_no_delete() {
        let mut c = classifier();
        run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitDone]);
        let out = run(
            &mut c,
            vec![
                Observed::Apply(cm("new", "20", "x")),
                Observed::Init,
                Observed::InitApply(cm("a", "1", "x")),
                Observed::Bookmark("15".into()),
                Observed::InitDone,
            ],
        );
        assert_eq!(summary(&out), ["added:ns/new@20", "started:Relist", "completed:Relist:0/0/0/0"], "ns/new is not inferred deleted");
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::Bookmark("25".into()), Observed::InitDone]);
        assert_eq!(summary(&out), ["started:Relist", "deleted:ns/new@20", "completed:Relist:0/0/1/0"], "a list at 25 shows ns/new gone");
    }

    /// etcd restored from a backup under a running watch: the API server's list is older
    /// than what was shipped. After a stall that says so, the list replaces the shipped
    /// state (versions going back included) and the next diff relist, still below the old
    /// position, infers deletes again. A plain stall changes nothing of that.
    #[test]
    fn after_a_rewound_history_the_list_replaces_the_shipped_state() {
        let stall = |reason| Observed::Stalled(Stall { reason, position: "30".into(), current: "12".into() });
        let mut c = classifier();
        run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "5", "x")), Observed::InitApply(cm("b", "6", "x")), Observed::InitDone]);
        run(&mut c, vec![Observed::Apply(cm("a", "20", "new")), Observed::Apply(cm("c", "25", "x")), Observed::Bookmark("30".into())]);
        let restored = vec![
            stall(crate::model::StallReason::Ahead),
            Observed::Init,
            Observed::InitApply(cm("a", "5", "x")),
            Observed::InitApply(cm("b", "6", "x")),
            Observed::Bookmark("12".into()),
            Observed::InitDone,
        ];
        let out = run(&mut c, restored);
        assert_eq!(summary(&out), ["started:Relist", "synced:ns/a@5", "synced:ns/b@6", "deleted:ns/c@25", "completed:Relist:0/0/1/2"]);
        assert!(matches!(&out[0], Change::Marker(m) if m.mode == SyncMode::Full));
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "5", "x")), Observed::Bookmark("14".into()), Observed::InitDone]);
        assert_eq!(summary(&out), ["started:Relist", "deleted:ns/b@6", "completed:Relist:0/0/1/0"], "a diff list at 14 after the restore shows ns/b gone");
        let out = run(
            &mut c,
            vec![
                stall(crate::model::StallReason::Silent),
                Observed::Init,
                Observed::InitApply(cm("a", "5", "x")),
                Observed::Bookmark("16".into()),
                Observed::InitDone,
            ],
        );
        assert_eq!(summary(&out), ["started:Relist", "completed:Relist:0/0/0/0"], "a silent watch relists as configured (diff)");
    }

    /// A classifier whose index holds what a checkpoint recorded of `a`, `b` and `gone`
    /// (as a first run would have shipped them), at resourceVersion 7.
    fn resumed() -> Classifier {
        let mut first = classifier();
        let shipped = run(
            &mut first,
            vec![
                Observed::Init,
                Observed::InitApply(cm("a", "1", "x")),
                Observed::InitApply(cm("b", "2", "x")),
                Observed::InitApply(cm("gone", "3", "x")),
                Observed::InitDone,
            ],
        );
        let entries = shipped.iter().filter_map(|c| match c {
            Change::Object(o) => {
                let r = o.payload.reference();
                Some((
                    r.key(),
                    Entry { uid: r.uid.as_str().into(), resource_version: r.resource_version.as_str().into(), fingerprint: o.fingerprint, content: None },
                ))
            }
            Change::Marker(_) => None,
        });
        let mut c = classifier();
        c.resume_from(entries.collect::<Vec<_>>(), "7".into(), HashMap::new());
        c
    }

    /// The state at a `completed` marker: every object consumers hold once they applied it
    /// (the sweep of a full sync included), by key, with its digest term.
    #[test]
    fn a_completed_marker_carries_the_state_consumers_hold_once_they_applied_it() {
        let state = |out: &[Change]| match out.last() {
            Some(Change::Marker(m)) => {
                let mut terms: Vec<(String, u128)> = m.state.as_ref().expect("a state on completed").to_vec();
                terms.sort();
                terms
            }
            _ => panic!("a completed marker last"),
        };
        let mut c = classifier();
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitApply(cm("b", "2", "x")), Observed::InitDone]);
        assert_eq!(state(&out), [("ns/a".to_string(), digest::term("ns/a", "uid-a", "1")), ("ns/b".to_string(), digest::term("ns/b", "uid-b", "2"))]);
        assert!(matches!(&out[0], Change::Marker(m) if m.state.is_none()), "none on started");
        let out = run(&mut c, vec![Observed::Apply(cm("a", "5", "y")), Observed::Init, Observed::InitApply(cm("a", "5", "y")), Observed::InitDone]);
        assert_eq!(state(&out), [("ns/a".to_string(), digest::term("ns/a", "uid-a", "5"))], "b swept by the relist");
    }

    /// After a crash: the checkpoint held a@1 and gone@3; consumers then received a@8 and
    /// gone's delete at 9 (the log's tail says so, and the index holds that). The watch,
    /// continued from the checkpoint's position, sees those events again: none is shipped,
    /// and what comes after them is.
    #[test]
    fn events_consumers_received_after_the_checkpoint_are_not_shipped_again() {
        let mut c = classifier();
        let entries = vec![("ns/a".to_string(), Entry { uid: "uid-a".into(), resource_version: "8".into(), fingerprint: 0, content: None })];
        let delivered = [("uid-a", "8"), ("uid-gone", "9")].map(|(u, v)| (u.to_string(), v.to_string())).into();
        c.resume_from(entries, "3".into(), delivered);
        let replayed = vec![
            Observed::Resumed,
            Observed::Apply(cm("a", "5", "x")),
            Observed::Apply(cm("gone", "6", "x")),
            Observed::Apply(cm("a", "8", "y")),
            Observed::Delete(cm("gone", "9", "y")),
        ];
        let out = run(&mut c, replayed);
        assert_eq!(summary(&out), ["started:Resume", "completed:Resume:0/0/0/0"]);
        let out = run(&mut c, vec![Observed::Apply(cm("a", "11", "z")), Observed::Apply(cm("gone2", "12", "z"))]);
        assert_eq!(summary(&out), ["updated:ns/a@11", "added:ns/gone2@12"]);
        assert!(c.delivered.is_empty(), "dropped once the watch stood past every delivered version");
    }

    /// A state marker ships no object and carries the state held and the watch's position;
    /// none before the first sync completed or while a sync is under way.
    #[test]
    fn a_state_marker_carries_the_state_held_between_syncs() {
        let mut c = classifier();
        let mut out = Vec::new();
        assert!(!c.state_marker(&mut out), "before the first sync");
        run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitDone, Observed::Apply(cm("b", "4", "x"))]);
        assert!(c.state_marker(&mut out));
        assert_eq!(summary(&out), ["started:State", "completed:State:0/0/0/0"]);
        let Change::Marker(done) = &out[1] else { panic!("a marker") };
        let mut terms = done.state.as_ref().unwrap().to_vec();
        terms.sort();
        assert_eq!(terms, [("ns/a".to_string(), digest::term("ns/a", "uid-a", "1")), ("ns/b".to_string(), digest::term("ns/b", "uid-b", "4"))]);
        assert_eq!((done.mode, done.resource_version.as_str()), (SyncMode::Diff, "4"));
        run(&mut c, vec![Observed::Init]);
        assert!(!c.state_marker(&mut Vec::new()), "during a relist");
    }

    #[test]
    fn a_continued_watch_ships_resume_markers_then_only_later_changes() {
        let mut c = resumed();
        let out = run(
            &mut c,
            vec![Observed::Resumed, Observed::Apply(cm("a", "1", "x")), Observed::Apply(cm("b", "8", "y")), Observed::Delete(cm("gone", "9", "x"))],
        );
        assert_eq!(summary(&out), ["started:Resume", "completed:Resume:0/0/0/0", "updated:ns/b@8", "deleted:ns/gone@9"]);
        let Change::Marker(done) = &out[1] else { panic!("a marker") };
        assert_eq!((done.mode, done.resource_version.as_str()), (SyncMode::Diff, "7"), "the checkpoint's position");
        assert_eq!(run(&mut c, vec![Observed::Resumed]).len(), 0, "once");
    }

    #[test]
    fn a_completed_marker_carries_the_lists_own_version_when_the_list_reported_it() {
        let completed_at = |out: &[Change]| match out.last() {
            Some(Change::Marker(m)) => m.resource_version.clone(),
            other => panic!("a marker last: {other:?}"),
        };
        let mut c = classifier();
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "3", "x")), Observed::Bookmark("50".into()), Observed::InitDone]);
        assert_eq!(completed_at(&out), "50", "the list's version, not its newest object's (3)");
        assert!(run(&mut c, vec![Observed::Bookmark("60".into())]).is_empty(), "a bookmark ships nothing");
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "3", "x")), Observed::InitDone]);
        assert_eq!(completed_at(&out), "3", "without it, the newest object's");
    }

    #[test]
    fn a_list_after_a_checkpoint_is_a_resume_diff() {
        let mut c = resumed();
        let same_content_new_version = with_ignored_status(cm("a", "11", "x"), json!({"ignored": true}));
        let out = run(
            &mut c,
            vec![
                Observed::Init,
                Observed::InitApply(same_content_new_version),
                Observed::InitApply(cm("b", "12", "y")),
                Observed::InitApply(cm("new", "13", "x")),
                Observed::InitDone,
            ],
        );
        assert_eq!(summary(&out), ["started:Resume", "updated:ns/b@12", "added:ns/new@13", "deleted:ns/gone@3", "completed:Resume:1/1/1/0"]);
        let relist = run(&mut c, vec![Observed::Init, Observed::InitDone]);
        assert_eq!(summary(&relist)[0], "started:Relist", "later lists are relists");
    }

    #[test]
    fn relist_diffs_against_the_index_and_infers_deletes() {
        let mut c = classifier();
        run(
            &mut c,
            vec![
                Observed::Init,
                Observed::InitApply(cm("keep", "1", "x")),
                Observed::InitApply(cm("change", "2", "x")),
                Observed::InitApply(cm("gone", "3", "x")),
                Observed::InitDone,
            ],
        );
        let recreated = configmap("keep2", "other-uid", "9", json!({}));
        run(&mut c, vec![Observed::Apply(configmap("keep2", "first-uid", "4", json!({})))]);
        let out = run(
            &mut c,
            vec![
                Observed::Init,
                Observed::InitApply(cm("keep", "1", "x")),
                Observed::InitApply(cm("change", "5", "y")),
                Observed::InitApply(cm("new", "6", "x")),
                Observed::InitApply(recreated),
                Observed::InitDone,
            ],
        );
        assert_eq!(
            summary(&out),
            [
                "started:Relist",
                "updated:ns/change@5",
                "added:ns/new@6",
                "deleted:ns/keep2@4",
                "added:ns/keep2@9",
                "deleted:ns/gone@3",
                "completed:Relist:2/1/2/0"
            ]
        );
    }

    #[test]
    fn an_inferred_delete_carries_the_last_known_reference() {
        let mut c = classifier();
        run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "7", "x")), Observed::InitDone]);
        let out = run(&mut c, vec![Observed::Init, Observed::InitDone]);
        let Change::Object(o) = &out[1] else { panic!("expected a delete") };
        assert!(matches!(&o.payload, Payload::Reference(r) if r.uid == "uid-a" && r.resource_version == "7" && r.namespace.as_deref() == Some("ns")));
    }

    #[test]
    fn a_resync_redelivers_the_index_as_synced_with_its_own_sync_id() {
        let mut c = Classifier::new("configmaps", SyncMode::Diff, true);
        let mut out = Vec::new();
        assert!(!c.resync(&mut out), "no resync before the initial sync completed");
        run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitDone]);
        run(&mut c, vec![Observed::Apply(cm("b", "2", "x")), Observed::Apply(cm("a", "3", "y"))]);
        assert!(c.resync(&mut out));
        assert_eq!(summary(&out), ["started:Resync", "synced:ns/a@3", "synced:ns/b@2", "completed:Resync:0/0/0/2"]);
        let Change::Object(a) = &out[1] else { panic!() };
        assert_eq!(a.payload.reference().uid, "uid-a");
        let Payload::Object(o) = &a.payload else { panic!("resync carries the object") };
        assert_eq!(o.value().unwrap()["data"]["v"], "y", "the latest shipped state");
        let Change::Marker(m) = &out[3] else { panic!() };
        assert_eq!(a.sync_id.as_ref(), Some(&m.sync_id));
        assert_eq!(m.resource_version, "3");
        let mut again = Vec::new();
        c.resync(&mut again);
        let Change::Marker(m2) = &again[0] else { panic!() };
        assert_ne!(m.sync_id, m2.sync_id, "two resyncs never share ids");
    }

    /// After a crash with resyncs on: the checkpoint held b@2, the log's tail taught that
    /// consumers then received a@8. The resume's list shows both again (nothing shipped),
    /// and supplies their content: the next resync ships every object its marker counts (it
    /// left a out, and consumers following the protocol dropped it at the marker). Before
    /// the list, no resync runs: the index has no content to ship.
    #[test]
    fn a_resync_after_a_resume_ships_every_object_its_marker_counts() {
        let mut c = Classifier::new("configmaps", SyncMode::Diff, true);
        let entry = |uid: &str, rv: &str| Entry { uid: uid.into(), resource_version: rv.into(), fingerprint: 0, content: None };
        let entries = vec![("ns/a".to_string(), entry("uid-a", "8")), ("ns/b".to_string(), entry("uid-b", "2"))];
        c.resume_from(entries, "5".into(), [("uid-a".to_string(), "8".to_string())].into());
        assert!(!c.resync(&mut Vec::new()), "deferred: nothing listed yet");
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "8", "y")), Observed::InitApply(cm("b", "2", "x")), Observed::InitDone]);
        assert_eq!(summary(&out), ["started:Resume", "completed:Resume:0/0/0/0"]);
        let mut out = Vec::new();
        assert!(c.resync(&mut out));
        assert_eq!(summary(&out), ["started:Resync", "synced:ns/a@8", "synced:ns/b@2", "completed:Resync:0/0/0/2"]);
        let Change::Object(a) = &out[1] else { panic!() };
        let Payload::Object(o) = &a.payload else { panic!("resync carries the object") };
        assert_eq!(o.value().unwrap()["data"]["v"], "y", "the content consumers hold");
    }

    #[test]
    fn no_resync_during_a_sync_or_without_kept_content() {
        let mut c = Classifier::new("configmaps", SyncMode::Diff, true);
        run(&mut c, vec![Observed::Init, Observed::InitDone, Observed::Init]);
        assert!(!c.resync(&mut Vec::new()), "a relist is under way");
        let mut lean = classifier();
        run(&mut lean, vec![Observed::Init, Observed::InitDone]);
        assert!(!lean.resync(&mut Vec::new()));
    }

    #[test]
    fn updates_carry_the_previously_shipped_content_when_kept() {
        let mut c = Classifier::new("configmaps", SyncMode::Diff, true);
        let out = run(&mut c, vec![Observed::Apply(cm("a", "1", "x")), Observed::Apply(cm("a", "2", "y"))]);
        let Change::Object(u) = &out[1] else { panic!() };
        assert_eq!(u.change, ChangeType::Updated);
        assert_eq!(serde_json::from_slice::<serde_json::Value>(u.previous.as_ref().unwrap()).unwrap()["data"]["v"], "x");
        let Change::Object(a) = &out[0] else { panic!() };
        assert!(a.previous.is_none());
    }

    #[test]
    fn a_full_relist_ships_every_object_as_synced_and_infers_deletes() {
        let mut c = Classifier::new("configmaps", SyncMode::Full, false);
        run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitApply(cm("b", "2", "x")), Observed::InitDone]);
        let out = run(&mut c, vec![Observed::Init, Observed::InitApply(cm("a", "1", "x")), Observed::InitDone]);
        assert_eq!(summary(&out), ["started:Relist", "synced:ns/a@1", "deleted:ns/b@2", "completed:Relist:0/0/1/1"]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Del(u8),
        Relist,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![(0u8..6, 0u8..3).prop_map(|(k, v)| Op::Put(k, v)), (0u8..6).prop_map(Op::Del), Just(Op::Relist),]
    }

    proptest! {
        /// Model check: a consumer following the protocol over the classifier's output
        /// holds exactly the cluster's state (every key with its uid and content) after every
        /// relist, whatever changes the watch missed in between.
        #[test]
        fn consumer_state_matches_the_cluster_after_each_relist(ops in prop::collection::vec((op(), any::<bool>()), 1..60)) {
            let mut c = classifier();
            let mut cluster: HashMap<String, (String, String, u8)> = HashMap::new(); // name -> (uid, rv, value)
            let mut consumer: HashMap<String, (String, serde_json::Value)> = HashMap::new(); // key -> (uid, content)
            let mut rv = 0u64;
            let mut uids = 0u64;
            let mut out = Vec::new();
            c.handle(Observed::Init, &mut out);
            c.handle(Observed::InitDone, &mut out);
            for (op, seen) in ops {
                match op {
                    Op::Put(k, v) => {
                        rv += 1;
                        let name = format!("o{k}");
                        let uid = cluster.get(&name).map(|e| e.0.clone()).unwrap_or_else(|| { uids += 1; format!("u{uids}") });
                        cluster.insert(name.clone(), (uid.clone(), rv.to_string(), v));
                        if seen {
                            c.handle(Observed::Apply(configmap(&name, &uid, &rv.to_string(), json!({"v": v}))), &mut out);
                        }
                    }
                    Op::Del(k) => {
                        let name = format!("o{k}");
                        if let Some((uid, _, v)) = cluster.remove(&name) {
                            rv += 1;
                            if seen {
                                c.handle(Observed::Delete(configmap(&name, &uid, &rv.to_string(), json!({"v": v}))), &mut out);
                            }
                        }
                    }
                    Op::Relist => {
                        c.handle(Observed::Init, &mut out);
                        let mut names: Vec<_> = cluster.keys().cloned().collect();
                        names.sort();
                        for name in names {
                            let (uid, r, v) = cluster[&name].clone();
                            c.handle(Observed::InitApply(configmap(&name, &uid, &r, json!({"v": v}))), &mut out);
                        }
                        c.handle(Observed::InitDone, &mut out);
                        for change in out.drain(..) {
                            if let Change::Object(o) = change {
                                let key = o.payload.reference().key();
                                match (o.change, o.payload) {
                                    (ChangeType::Deleted, _) => { consumer.remove(&key); }
                                    (_, Payload::Object(obj)) => { consumer.insert(key, (obj.reference.uid.clone(), obj.value().unwrap()["data"]["v"].clone())); }
                                    (t, Payload::Reference(_)) => prop_assert!(false, "a {} change without its object", t.as_str()),
                                }
                            }
                        }
                        // Objects a relist found unchanged are not shipped again: the
                        // consumer's copy (uid and content) must already be the cluster's.
                        let want: HashMap<String, (String, serde_json::Value)> = cluster.iter().map(|(n, (uid, _, v))| (format!("ns/{n}"), (uid.clone(), json!(v)))).collect();
                        prop_assert_eq!(&consumer, &want);
                    }
                }
            }
        }
    }
}
