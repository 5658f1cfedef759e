//! Never back in time, object by object: over the records of a topic, the events older than
//! one already delivered for the same uid (steps back), objects shipped again after their
//! delete (resurrections), and deletes of objects that still exist (spurious deletes).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::kafka::Record;

#[derive(Debug, Default)]
pub struct History {
    /// Object events read (markers left out).
    pub events: usize,
    pub steps_back: usize,
    /// Events of the type and version last delivered for their uid (not counted by `clean`),
    /// `synced` after `synced` left out: those are `resyncs`.
    pub repeats: usize,
    /// `synced` events at the version last delivered as `synced`: a periodic resync ships
    /// the index again, with new ids (a repeat where resyncs are off).
    pub resyncs: usize,
    pub resurrections: usize,
    pub spurious_deletes: usize,
    /// The first problems, for the failure message.
    pub problems: Vec<String>,
}

#[derive(Default)]
struct Seen<'a> {
    max: u64,
    deleted: bool,
    last_type: &'a str,
}

/// One object event as the audit needs it: from a Kafka record's or a NATS message's
/// headers.
pub struct Event<'a> {
    pub uid: &'a str,
    pub resource_version: &'a str,
    /// The CloudEvent type.
    pub ty: &'a str,
    pub subject: &'a str,
}

/// Audits `records` (as read: each partition in order; an object's events share one
/// partition) against `existing`, the uids the API server holds at the end. An older event
/// is a step back also when it repeats one delivered before: a consumer applies it again.
pub fn history(records: &[Record], existing: &HashSet<String>) -> History {
    let events = records.iter().filter_map(|r| {
        let h = |name: &str| r.headers.get(name).map(String::as_str);
        Some(Event { uid: h("ce_uid")?, resource_version: h("ce_resourceversion")?, ty: h("ce_type")?, subject: h("ce_subject").unwrap_or("") })
    });
    history_of(events, existing)
}

/// `history` of object events in log order (markers left out), from any sink; an event of the
/// type and version last delivered for its uid also counts as a repeat.
pub fn history_of<'a>(events: impl IntoIterator<Item = Event<'a>>, existing: &HashSet<String>) -> History {
    let mut h = History::default();
    let mut seen: HashMap<&str, Seen> = HashMap::new();
    let note = |h: &mut History, p: String| {
        if h.problems.len() < 20 {
            h.problems.push(p);
        }
    };
    for Event { uid, resource_version, ty, subject } in events {
        let rv: u64 = resource_version.parse().unwrap_or_else(|_| panic!("resourceVersion {resource_version:?} of {uid} is not a number"));
        let deleted = ty.ends_with(".deleted") || ty.ends_with(".delete");
        h.events += 1;
        let s = seen.entry(uid).or_default();
        if rv < s.max {
            h.steps_back += 1;
            note(&mut h, format!("{subject} ({uid}): {ty} at {rv} after {}", s.max));
        }
        // The same change again. A `deleted` at the version last shipped is not one: a delete
        // inferred by a relist carries the version consumers hold.
        if rv == s.max && s.last_type == ty && ty.ends_with(".synced") {
            h.resyncs += 1;
        } else if rv == s.max && s.last_type == ty {
            h.repeats += 1;
            note(&mut h, format!("{subject} ({uid}): {ty} at {rv} again"));
        }
        if s.deleted && !deleted {
            h.resurrections += 1;
            note(&mut h, format!("{subject} ({uid}): {ty} at {rv} after its delete"));
        }
        if deleted && existing.contains(uid) {
            h.spurious_deletes += 1;
            note(&mut h, format!("{subject} ({uid}): deleted at {rv}, yet it exists"));
        }
        s.max = s.max.max(rv);
        s.deleted |= deleted;
        s.last_type = ty;
    }
    h
}

/// Whether `records` hold, for every object of `state` (key to resourceVersion, as
/// `state::api_configmaps` gives it), an event at that version.
pub fn reached(records: &[Record], state: &BTreeMap<String, String>) -> bool {
    let shipped: HashSet<(&str, &str)> =
        records.iter().filter_map(|r| Some((r.headers.get("ce_subject")?.as_str(), r.headers.get("ce_resourceversion")?.as_str()))).collect();
    state.iter().all(|(key, rv)| shipped.contains(&(key.as_str(), rv.as_str())))
}

impl History {
    /// None of the three, or what was found.
    pub fn clean(&self) -> Result<(), String> {
        if self.steps_back == 0 && self.resurrections == 0 && self.spurious_deletes == 0 {
            return Ok(());
        }
        Err(format!(
            "{} steps back, {} resurrections, {} spurious deletes; first problems:\n{}",
            self.steps_back,
            self.resurrections,
            self.spurious_deletes,
            self.problems.join("\n")
        ))
    }
}
