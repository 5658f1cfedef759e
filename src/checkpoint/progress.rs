//! A route's progress: each watch's changes applied in the watch's order as the route's
//! sink acknowledges them (or at once, when the route's filters leave them out), and the
//! records that changed since the last write. What it records is exactly what the route's
//! consumers hold at a position of the watch, never an event that was not acknowledged.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::xxh3_64;

use super::record::{self, Saved, WatchRecord};
use crate::change::{Change, ObjectChange};
use crate::model::{ChangeType, MarkerPhase, Position, SyncReason};

/// What one change does to its watch's checkpoint once acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// An object's state as consumers now hold it (`None`: deleted), and the event's
    /// resourceVersion.
    Object {
        key: String,
        saved: Option<Saved>,
        resource_version: String,
    },
    SyncStarted,
    /// A sync acknowledged whole: the watch stands at its resourceVersion (empty when
    /// unknown: an empty list).
    SyncCompleted {
        resource_version: String,
    },
    /// The watch stands at this resourceVersion with nothing before it unobserved (a
    /// list's own version, a bookmark): the position moves there outside a sync.
    Bookmark {
        resource_version: String,
    },
    /// Nothing to record (a periodic resync ships the index as it is).
    Nothing,
}

impl Effect {
    /// The effect of `change` (a change of the watch the route ships or filters out).
    pub fn of(change: &Change) -> Effect {
        match change {
            Change::Object(o) => object(o),
            Change::Marker(m) if m.reason == SyncReason::Resync => Effect::Nothing,
            Change::Marker(m) => match m.phase {
                MarkerPhase::Started => Effect::SyncStarted,
                MarkerPhase::Completed => Effect::SyncCompleted { resource_version: m.resource_version.clone() },
            },
        }
    }
}

fn object(o: &ObjectChange) -> Effect {
    let r = o.payload.reference();
    let saved =
        (o.change != ChangeType::Deleted).then(|| Saved { uid: r.uid.clone(), resource_version: r.resource_version.clone(), fingerprint: o.fingerprint });
    Effect::Object { key: r.key(), saved, resource_version: r.resource_version.clone() }
}

/// How an object key is counted in a watch's record (a hash: the keys themselves are in
/// the classifier's index already).
pub fn key_hash(key: &str) -> u64 {
    xxh3_64(key.as_bytes())
}

/// Where a watch's checkpoint starts on this route.
#[derive(Debug, Clone, Default)]
pub struct Start {
    /// The watch's key prefix (`record::watch_prefix`).
    pub prefix: String,
    /// The digest of its configuration on this route.
    pub digest: String,
    /// The checkpoint resumed from (its object keys' `key_hash`es, position), if any.
    pub objects: HashSet<u64>,
    pub resource_version: Option<String>,
    /// Records of an unusable checkpoint, deleted by the first write.
    pub clear: Vec<String>,
    /// The cluster's identity, written in the watch record.
    pub cluster_uid: Option<String>,
}

/// One route's progress, shared by its watches' workers (which register changes) and its
/// dispatcher (which acknowledges them).
#[derive(Debug, Default)]
pub struct Progress {
    watches: Mutex<HashMap<usize, Watch>>,
}

#[derive(Debug)]
struct Watch {
    prefix: String,
    digest: String,
    /// The sequence number of `pending`'s first change.
    base: u64,
    /// Registered changes not yet applied, in the watch's order, and whether each is done.
    /// Shared by the routes of the watch: the last one to apply it takes it without a copy.
    pending: VecDeque<(Arc<Effect>, bool)>,
    /// Hashes of the object keys recorded (for the watch record's count).
    keys: HashSet<u64>,
    resource_version: Option<String>,
    in_sync: bool,
    /// Object records changed since the last write (`None`: deleted).
    dirty: HashMap<String, Option<Saved>>,
    clear: Vec<String>,
    watch_dirty: bool,
    cluster_uid: Option<String>,
}

/// Records to write: key and value, `None` deletes the key. Objects come before the watch
/// record that counts them.
pub type Records = Vec<(String, Option<Vec<u8>>)>;

impl Progress {
    /// Tracks the watch `slot` from `start`; changes of untracked watches get no position.
    pub fn track(&self, slot: usize, start: Start) {
        let resumed = start.resource_version.is_some();
        let watch = Watch {
            keys: start.objects,
            prefix: start.prefix,
            digest: start.digest,
            base: 0,
            pending: VecDeque::new(),
            resource_version: start.resource_version,
            in_sync: false,
            dirty: HashMap::new(),
            clear: start.clear,
            watch_dirty: !resumed,
            cluster_uid: start.cluster_uid,
        };
        self.lock().insert(slot, watch);
    }

    /// Registers the watch's next change; `done` when the route does not ship it (a filter
    /// left it out). The position to acknowledge it with, when the watch is tracked.
    pub fn register(&self, slot: usize, effect: Arc<Effect>, done: bool) -> Option<Position> {
        let mut watches = self.lock();
        let watch = watches.get_mut(&slot)?;
        let seq = watch.base + watch.pending.len() as u64;
        watch.pending.push_back((effect, done));
        if done {
            watch.apply_done();
        }
        Some(Position { watch: slot, seq })
    }

    /// The route's sink acknowledged the change at `position` (or gave up on it by
    /// policy: an oversized event skipped).
    pub fn acknowledged(&self, position: Position) {
        let mut watches = self.lock();
        let Some(watch) = watches.get_mut(&position.watch) else { return };
        let Some(i) = position.seq.checked_sub(watch.base) else { return };
        if let Some(entry) = watch.pending.get_mut(i as usize) {
            entry.1 = true;
            watch.apply_done();
        }
    }

    /// The records changed since the last call, to be written in this order.
    pub fn take(&self) -> Records {
        let mut out = Vec::new();
        for watch in self.lock().values_mut() {
            out.extend(watch.clear.drain(..).map(|k| (k, None)));
            let mut dirty: Vec<_> = watch.dirty.drain().collect();
            dirty.sort_by(|a, b| a.0.cmp(&b.0));
            for (key, saved) in dirty {
                let value = saved.map(|s| serde_json::to_vec(&s).expect("a record serializes"));
                out.push((record::object_key(&watch.prefix, &key), value));
            }
            if std::mem::take(&mut watch.watch_dirty) {
                let r = WatchRecord {
                    format: record::FORMAT,
                    digest: watch.digest.clone(),
                    resource_version: watch.resource_version.clone(),
                    objects: watch.keys.len() as u64,
                    cluster_uid: watch.cluster_uid.clone(),
                };
                out.push((record::watch_key(&watch.prefix), Some(serde_json::to_vec(&r).expect("a record serializes"))));
            }
        }
        out
    }

    /// The key prefixes of the watches tracked.
    pub fn prefixes(&self) -> Vec<String> {
        self.lock().values().map(|w| w.prefix.clone()).collect()
    }

    /// Changes registered and not yet acknowledged, and records changed and not yet taken.
    pub fn backlog(&self) -> (usize, usize) {
        self.lock()
            .values()
            .fold((0, 0), |(events, records), w| (events + w.pending.len(), records + w.clear.len() + w.dirty.len() + usize::from(w.watch_dirty)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Watch>> {
        // A panic while holding the lock leaves consistent data (every method completes
        // its change before it can panic); keep going with it.
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Watch {
    /// Applies the done changes at the front, in order.
    fn apply_done(&mut self) {
        while self.pending.front().is_some_and(|(_, done)| *done) {
            let (effect, _) = self.pending.pop_front().expect("front checked");
            self.base += 1;
            self.apply(Arc::unwrap_or_clone(effect));
        }
    }

    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Object { key, saved, resource_version } => {
                let hash = key_hash(&key);
                if saved.is_some() {
                    self.keys.insert(hash);
                } else {
                    self.keys.remove(&hash);
                }
                self.dirty.insert(key, saved);
                // Inside a sync the listed objects come in no order of versions: the watch
                // moves on only when the sync completes.
                if !self.in_sync {
                    self.resource_version = Some(resource_version);
                }
            }
            Effect::Bookmark { resource_version } => {
                if self.in_sync || self.resource_version.as_deref() == Some(resource_version.as_str()) {
                    return;
                }
                self.resource_version = Some(resource_version);
            }
            Effect::SyncStarted => self.in_sync = true,
            Effect::SyncCompleted { resource_version } => {
                self.in_sync = false;
                if !resource_version.is_empty() {
                    self.resource_version = Some(resource_version);
                }
            }
            Effect::Nothing => return,
        }
        self.watch_dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(key: &str, rv: &str) -> Effect {
        Effect::Object {
            key: key.into(),
            saved: Some(Saved { uid: format!("uid-{key}"), resource_version: rv.into(), fingerprint: 1 }),
            resource_version: rv.into(),
        }
    }

    fn progress() -> Progress {
        let p = Progress::default();
        p.track(0, Start { prefix: "c.r.configmaps.=".into(), digest: "d".into(), ..Start::default() });
        p
    }

    /// The watch record's position and count, and the object keys written, of `records`.
    fn summary(records: &Records) -> (Option<String>, u64, Vec<String>) {
        let watch = records.iter().find(|(k, _)| k.ends_with(".w")).map(|(_, v)| serde_json::from_slice::<WatchRecord>(v.as_ref().unwrap()).unwrap());
        let objects = records.iter().filter(|(k, _)| !k.ends_with(".w")).map(|(k, v)| format!("{k}{}", if v.is_some() { "" } else { " (deleted)" })).collect();
        let watch = watch.expect("a watch record");
        (watch.resource_version, watch.objects, objects)
    }

    #[test]
    fn changes_are_recorded_only_once_everything_before_them_is_acknowledged() {
        let p = progress();
        let a = p.register(0, Arc::new(upsert("ns/a", "5")), false).unwrap();
        let b = p.register(0, Arc::new(upsert("ns/b", "6")), false).unwrap();
        p.register(0, Arc::new(upsert("ns/c", "7")), true); // filtered out: done at once
        p.acknowledged(b);
        let (rv, count, _) = summary(&p.take());
        assert_eq!((rv, count), (None, 0), "b waits for a: nothing recorded yet");
        p.acknowledged(a);
        let (rv, count, objects) = summary(&p.take());
        assert_eq!((rv.as_deref(), count), (Some("7"), 3));
        assert_eq!(objects, ["c.r.configmaps.=.o.ns/a", "c.r.configmaps.=.o.ns/b", "c.r.configmaps.=.o.ns/c"]);
        assert!(p.take().is_empty(), "nothing changed since");
    }

    #[test]
    fn a_sync_moves_the_position_only_when_it_completes() {
        let p = progress();
        for e in [Effect::SyncStarted, upsert("ns/b", "9"), upsert("ns/a", "3")] {
            p.register(0, Arc::new(e), true);
        }
        let (rv, count, _) = summary(&p.take());
        assert_eq!((rv, count), (None, 2), "listed objects are recorded, the position is not");
        p.register(0, Arc::new(Effect::SyncCompleted { resource_version: "9".into() }), true);
        p.register(0, Arc::new(Effect::Object { key: "ns/a".into(), saved: None, resource_version: "12".into() }), true);
        let (rv, count, objects) = summary(&p.take());
        assert_eq!((rv.as_deref(), count), (Some("12"), 1));
        assert_eq!(objects, ["c.r.configmaps.=.o.ns/a (deleted)"]);
    }

    #[test]
    fn bookmarks_move_the_position_outside_syncs_once_everything_before_them_is_acknowledged() {
        let p = progress();
        let bookmark = |v: &str| Arc::new(Effect::Bookmark { resource_version: v.into() });
        p.register(0, Arc::new(Effect::SyncStarted), true);
        p.register(0, bookmark("40"), true);
        p.register(0, Arc::new(Effect::SyncCompleted { resource_version: "40".into() }), true);
        assert_eq!(summary(&p.take()).0.as_deref(), Some("40"));
        let a = p.register(0, Arc::new(upsert("ns/a", "41")), false).unwrap();
        p.register(0, bookmark("90"), true);
        assert!(p.take().is_empty(), "the bookmark waits behind the unacknowledged change");
        p.acknowledged(a);
        assert_eq!(summary(&p.take()).0.as_deref(), Some("90"));
        p.register(0, bookmark("90"), true);
        assert!(p.take().is_empty(), "the same version again writes nothing");
    }

    #[test]
    fn an_unusable_checkpoint_is_cleared_and_untracked_watches_get_no_position() {
        let p = Progress::default();
        p.track(3, Start { prefix: "p".into(), digest: "d".into(), clear: vec!["p.o.old".into()], ..Start::default() });
        assert!(p.register(0, Arc::new(upsert("ns/a", "1")), false).is_none());
        let records = p.take();
        assert_eq!(records[0], ("p.o.old".to_string(), None));
        assert_eq!(summary(&records).0, None, "a fresh watch record: not resumable until synced");
    }
}
