//! A route's progress: each watch's changes applied in the watch's order as the route's
//! sink acknowledges them (or at once, when the route's filters leave them out), and the
//! records that changed since the last write. What it records is exactly what the route's
//! consumers hold at a position of the watch, never an event that was not acknowledged.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::xxh3_64;

use super::record::{self, Saved, Tail, WatchRecord};
use super::tail::is_newer;
use crate::change::{Change, ObjectChange};
use crate::model::{ChangeType, MarkerPhase, Placement, SyncReason, WatchSeq};

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
            Change::Marker(m) if matches!(m.reason, SyncReason::Resync | SyncReason::State) => Effect::Nothing,
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
    /// The log the watch's events go to (a Kafka topic, a JetStream stream), when the
    /// route's sink can be read back; `None` records no tail.
    pub log: Option<String>,
    /// Per partition, where the log ended when the watch started: nothing of this run is
    /// before it.
    pub reach: BTreeMap<i32, u64>,
    /// Object records to write at once: what a start learned from the log's tail.
    pub dirty: Vec<(String, Option<Saved>)>,
    /// The tail that start read, kept as the checkpoint's until its position passes every
    /// version learned there.
    pub hold: Option<Hold>,
}

/// A tail a checkpoint keeps naming: while the watch's position is not past `until`, the
/// events learned from it (versions consumers received, which the resumed watch must not
/// ship again) are known only by reading it again after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Per partition, where that tail began (a partition not named: from its start).
    pub next: BTreeMap<i32, u64>,
    /// The newest resourceVersion learned from it.
    pub until: u64,
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
    /// Registered changes not yet applied, in the watch's order, whether each is done, and
    /// where the broker stored it. Shared by the routes of the watch: the last one to
    /// apply it takes it without a copy.
    pending: VecDeque<(Arc<Effect>, bool, Option<Placement>)>,
    /// Hashes of the object keys recorded (for the watch record's count).
    keys: HashSet<u64>,
    resource_version: Option<String>,
    in_sync: bool,
    /// Object records changed since the last write (`None`: deleted).
    dirty: HashMap<String, Option<Saved>>,
    clear: Vec<String>,
    watch_dirty: bool,
    cluster_uid: Option<String>,
    log: Option<String>,
    /// Per partition of the log, the offset just past the last of the watch's events
    /// acknowledged there (or where the log ended at the start).
    reach: BTreeMap<i32, u64>,
    hold: Option<Hold>,
}

/// Records to write: key and value, `None` deletes the key. Objects come before the watch
/// record that counts them.
pub type Records = Vec<(String, Option<Vec<u8>>)>;

impl Progress {
    /// Tracks the watch `slot` from `start`; changes of untracked watches get no position.
    pub fn track(&self, slot: usize, start: Start) {
        let resumed = start.resource_version.is_some() && start.dirty.is_empty();
        let watch = Watch {
            keys: start.objects,
            prefix: start.prefix,
            digest: start.digest,
            base: 0,
            pending: VecDeque::new(),
            resource_version: start.resource_version,
            in_sync: false,
            dirty: start.dirty.into_iter().collect(),
            clear: start.clear,
            watch_dirty: !resumed,
            cluster_uid: start.cluster_uid,
            log: start.log,
            reach: start.reach,
            hold: start.hold,
        };
        self.lock().insert(slot, watch);
    }

    /// Registers the watch's next change; `done` when the route does not ship it (a filter
    /// left it out). The position to acknowledge it with, when the watch is tracked.
    pub fn register(&self, slot: usize, effect: Arc<Effect>, done: bool) -> Option<WatchSeq> {
        let mut watches = self.lock();
        let watch = watches.get_mut(&slot)?;
        let seq = watch.base + watch.pending.len() as u64;
        watch.pending.push_back((effect, done, None));
        if done {
            watch.apply_done();
        }
        Some(WatchSeq { watch: slot, seq })
    }

    /// The route's sink acknowledged the change at `position`, stored at `placed` when
    /// the sink says where (or gave up on it by policy: an oversized event skipped).
    pub fn acknowledged(&self, position: WatchSeq, placed: Option<Placement>) {
        let mut watches = self.lock();
        let Some(watch) = watches.get_mut(&position.watch) else { return };
        let Some(i) = position.seq.checked_sub(watch.base) else { return };
        if let Some(entry) = watch.pending.get_mut(i as usize) {
            entry.1 = true;
            entry.2 = placed;
            if let Some(p) = placed {
                let reach = watch.reach.entry(p.partition).or_insert(0);
                *reach = (*reach).max(p.offset + 1);
            }
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
                    tail: watch.tail(),
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
    /// Where the log may hold events of the watch that the records do not reflect: per
    /// partition, the lowest offset of an acknowledged change not yet applied, or else
    /// the reach (what is still in flight lands after it: the broker acknowledges a
    /// partition's records in order). Reading the log from there to its end after a crash
    /// gives everything the consumers received beyond the checkpoint.
    fn tail(&self) -> Option<Tail> {
        let log = self.log.clone()?;
        let mut next = self.reach.clone();
        for p in self.pending.iter().filter_map(|(_, _, placed)| *placed) {
            let bound = next.entry(p.partition).or_insert(p.offset);
            *bound = (*bound).min(p.offset);
        }
        let position = self.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok());
        if let Some(hold) = self.hold.as_ref().filter(|h| position.is_none_or(|p| p <= h.until)) {
            // A partition either side names not is read from its start.
            next = next.into_iter().filter_map(|(p, at)| Some((p, at.min(*hold.next.get(&p)?)))).collect();
        }
        Some(Tail { log, next })
    }

    /// Applies the done changes at the front, in order.
    fn apply_done(&mut self) {
        while self.pending.front().is_some_and(|(_, done, _)| *done) {
            let (effect, _, _) = self.pending.pop_front().expect("front checked");
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
                // moves on only when the sync completes. Outside one, an object event never
                // moves it back: a resync ships each indexed object at its own (older)
                // version, and a recreated object's delete carries the old one's.
                if !self.in_sync && !self.resource_version.as_deref().is_some_and(|at| is_newer(at, &resource_version)) {
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
        p.acknowledged(b, None);
        let (rv, count, _) = summary(&p.take());
        assert_eq!((rv, count), (None, 0), "b waits for a: nothing recorded yet");
        p.acknowledged(a, None);
        let (rv, count, objects) = summary(&p.take());
        assert_eq!((rv.as_deref(), count), (Some("7"), 3));
        assert_eq!(objects, ["c.r.configmaps.=.o.ns/a", "c.r.configmaps.=.o.ns/b", "c.r.configmaps.=.o.ns/c"]);
        assert!(p.take().is_empty(), "nothing changed since");
    }

    /// The tail recorded with the checkpoint starts, per partition, at the first event that
    /// may not be reflected: an acknowledged one waiting behind an earlier change, or else
    /// past the last acknowledged (what is in flight lands after it).
    #[test]
    fn the_tail_starts_where_the_log_may_hold_what_the_records_do_not() {
        let p = Progress::default();
        let reach = [(0, 10), (1, 20)].into();
        p.track(0, Start { prefix: "c.r.configmaps.=".into(), digest: "d".into(), log: Some("topic".into()), reach, ..Start::default() });
        let tail = |records: &Records| {
            records.iter().find(|(k, _)| k.ends_with(".w")).map(|(_, v)| serde_json::from_slice::<WatchRecord>(v.as_ref().unwrap()).unwrap().tail.unwrap().next)
        };
        let a = p.register(0, Arc::new(upsert("ns/a", "5")), false).unwrap();
        let b = p.register(0, Arc::new(upsert("ns/b", "6")), false).unwrap();
        let c = p.register(0, Arc::new(upsert("ns/c", "7")), false).unwrap();
        p.acknowledged(b, Some(Placement { partition: 0, offset: 14 }));
        p.acknowledged(a, Some(Placement { partition: 1, offset: 30 }));
        // a and b applied, c in flight: partition 0 from 15, partition 1 from 31.
        assert_eq!(tail(&p.take()), Some([(0, 15), (1, 31)].into()));
        let d = p.register(0, Arc::new(upsert("ns/d", "8")), false).unwrap();
        p.acknowledged(d, Some(Placement { partition: 0, offset: 16 }));
        p.acknowledged(c, None);
        assert_eq!(tail(&p.take()), Some([(0, 17), (1, 31)].into()), "every change applied");
        let e = p.register(0, Arc::new(upsert("ns/e", "9")), false).unwrap();
        let f = p.register(0, Arc::new(upsert("ns/f", "10")), false).unwrap();
        p.acknowledged(f, Some(Placement { partition: 1, offset: 40 }));
        p.register(0, Arc::new(upsert("ns/g", "11")), true);
        assert!(p.take().is_empty(), "nothing applied: the record is not written again");
        p.acknowledged(e, Some(Placement { partition: 1, offset: 35 }));
        assert_eq!(tail(&p.take()), Some([(0, 17), (1, 41)].into()));
    }

    /// A resumed watch keeps naming the tail it learned from until its position is past
    /// every version learned there: a crash before that reads it again.
    #[test]
    fn a_learned_tail_is_kept_until_the_position_passes_it() {
        let p = Progress::default();
        let hold = Hold { next: [(0, 5), (1, 7)].into(), until: 20 };
        let start = Start {
            prefix: "c.r.configmaps.=".into(),
            digest: "d".into(),
            resource_version: Some("10".into()),
            log: Some("topic".into()),
            reach: [(0, 40), (1, 50), (2, 60)].into(),
            hold: Some(hold),
            ..Start::default()
        };
        p.track(0, start);
        let tail = |records: &Records| {
            records.iter().find(|(k, _)| k.ends_with(".w")).map(|(_, v)| serde_json::from_slice::<WatchRecord>(v.as_ref().unwrap()).unwrap().tail.unwrap().next)
        };
        let a = p.register(0, Arc::new(upsert("ns/a", "15")), false).unwrap();
        p.acknowledged(a, Some(Placement { partition: 0, offset: 41 }));
        assert_eq!(tail(&p.take()), Some([(0, 5), (1, 7)].into()), "position 15: the learned tail, partition 2 from its start");
        let b = p.register(0, Arc::new(upsert("ns/b", "21")), false).unwrap();
        p.acknowledged(b, Some(Placement { partition: 1, offset: 51 }));
        assert_eq!(tail(&p.take()), Some([(0, 42), (1, 52), (2, 60)].into()), "position 21: past it");
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

    /// A resync ships every indexed object at its own version, outside any sync: the
    /// position stays where the watch stood (it went back to the last key's version, and a
    /// restart then read the log from long before and resumed from an old position).
    #[test]
    fn a_resyncs_objects_never_move_the_position_back() {
        let p = progress();
        p.register(0, Arc::new(upsert("ns/z", "50")), true);
        let resync = [Effect::Nothing, upsert("ns/a", "12"), upsert("ns/z", "50"), upsert("ns/m", "7"), Effect::Nothing];
        for e in resync {
            p.register(0, Arc::new(e), true);
        }
        assert_eq!(summary(&p.take()).0.as_deref(), Some("50"));
        p.register(0, Arc::new(upsert("ns/a", "51")), true);
        assert_eq!(summary(&p.take()).0.as_deref(), Some("51"), "a later event moves it on");
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
        p.acknowledged(a, None);
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
