//! What a start learns from its log's tail. A checkpoint is written on an interval, so
//! after a crash the log (the Kafka topic, the JetStream stream) holds events of the watch
//! that consumers received and the checkpoint does not reflect. Applied to the checkpoint,
//! they give exactly what consumers hold, and which version of each object they last
//! received: a resumed watch that sees those versions again ships them no more.

use std::collections::HashMap;

use super::record::Saved;

/// The fingerprint of an object learned from the log: its content is not read, so a later
/// version of it counts as changed.
pub const UNKNOWN_FINGERPRINT: u128 = 0;

/// Which events of a log are the watch's: its cluster, resource (`apiVersion/Kind`) and
/// namespace (`None`: every namespace).
#[derive(Debug, Clone, Copy)]
pub struct Watched<'a> {
    pub cluster: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    /// The API server's current resourceVersion, read before the log: no event this
    /// cluster's bridge shipped is ahead of it. `None`: not known (nothing is refused).
    pub current: Option<u64>,
}

impl Watched<'_> {
    fn holds(&self, e: &Logged) -> bool {
        e.cluster == self.cluster && e.resource == self.resource && self.namespace.is_none_or(|ns| e.key.split_once('/').is_some_and(|(n, _)| n == ns))
    }
}

/// An object event as the log holds it: its extensions, without its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub cluster: String,
    /// `apiVersion/Kind`.
    pub resource: String,
    pub key: String,
    pub uid: String,
    pub resource_version: String,
    pub deleted: bool,
}

/// What the tail taught.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// Object records the tail changed (`None`: deleted), by key.
    pub records: HashMap<String, Option<Saved>>,
    /// Per uid, the newest resourceVersion consumers received of it.
    pub delivered: HashMap<String, String>,
    /// The watch's object events read.
    pub events: u64,
    /// Events ahead of the API server's current version, ignored (never written by this
    /// cluster's bridge: copied or forged into the log), and the first of them.
    pub ahead: u64,
    pub first_ahead: Option<Logged>,
}

/// Applies `events` (in log order within each partition; an object's events are all in one)
/// to `objects`, the checkpoint's objects by key: each object's last event in the log wins.
pub fn learn(objects: &mut HashMap<String, Saved>, watched: Watched<'_>, events: impl IntoIterator<Item = Logged>) -> Learned {
    let mut learned = Learned::default();
    // Each object's last event: its uid and version, `None` when deleted.
    let mut last: HashMap<String, Option<(String, String)>> = HashMap::new();
    for e in events {
        if !watched.holds(&e) || e.uid.is_empty() || e.resource_version.is_empty() {
            continue;
        }
        if watched.current.is_some_and(|current| e.resource_version.parse::<u64>().is_ok_and(|v| v > current)) {
            // Taken as delivered, it would hold the object at a version the API server has
            // not reached: every real change of it until then skipped as a repeat.
            learned.ahead += 1;
            learned.first_ahead.get_or_insert(e);
            continue;
        }
        learned.events += 1;
        let newest = learned.delivered.entry(e.uid.clone()).or_insert_with(|| e.resource_version.clone());
        if is_newer(&e.resource_version, newest) {
            newest.clone_from(&e.resource_version);
        }
        last.insert(e.key, (!e.deleted).then_some((e.uid, e.resource_version)));
    }
    for (key, state) in last {
        match state {
            None => {
                if objects.remove(&key).is_some() {
                    learned.records.insert(key, None);
                }
            }
            // The version the checkpoint holds: unchanged, its fingerprint kept.
            Some((uid, rv)) if objects.get(&key).is_some_and(|s| s.uid == uid && s.resource_version == rv) => {}
            Some((uid, resource_version)) => {
                let saved = Saved { uid, resource_version, fingerprint: UNKNOWN_FINGERPRINT };
                objects.insert(key.clone(), saved.clone());
                learned.records.insert(key, Some(saved));
            }
        }
    }
    learned
}

/// Whether `a` is a later resourceVersion than `b` (both numbers, as the API server issues
/// them; anything else is never later).
pub(super) fn is_newer(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a > b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(PartialEq)]
    enum Change {
        Added,
        Updated,
        Deleted,
    }

    fn event(cluster: &str, change: Change, key: &str, uid: &str, rv: &str) -> Logged {
        Logged {
            cluster: cluster.into(),
            resource: "v1/ConfigMap".into(),
            key: key.into(),
            uid: uid.into(),
            resource_version: rv.into(),
            deleted: change == Change::Deleted,
        }
    }

    fn saved(uid: &str, rv: &str, fingerprint: u128) -> Saved {
        Saved { uid: uid.into(), resource_version: rv.into(), fingerprint }
    }

    const WATCHED: Watched<'static> = Watched { cluster: "c", resource: "v1/ConfigMap", namespace: Some("ns"), current: None };

    /// The checkpoint held a@5 and b@6; after it the log got a@7, b deleted, c created and
    /// recreated: the checkpoint becomes what consumers hold, and every version they
    /// received is known.
    #[test]
    fn the_tail_turns_the_checkpoint_into_what_consumers_hold() {
        let mut objects: HashMap<String, Saved> = [("ns/a".to_string(), saved("ua", "5", 9)), ("ns/b".to_string(), saved("ub", "6", 9))].into();
        let tail = vec![
            event("c", Change::Updated, "ns/a", "ua", "7"),
            event("c", Change::Deleted, "ns/b", "ub", "8"),
            event("c", Change::Added, "ns/c", "uc1", "9"),
            event("c", Change::Deleted, "ns/c", "uc1", "10"),
            event("c", Change::Added, "ns/c", "uc2", "11"),
        ];
        let learned = learn(&mut objects, WATCHED, tail);
        assert_eq!(objects, [("ns/a".to_string(), saved("ua", "7", 0)), ("ns/c".to_string(), saved("uc2", "11", 0))].into());
        assert_eq!(learned.records.len(), 3);
        assert_eq!(learned.records["ns/b"], None);
        let delivered: HashMap<String, String> = [("ua", "7"), ("ub", "8"), ("uc1", "10"), ("uc2", "11")].map(|(u, v)| (u.to_string(), v.to_string())).into();
        assert_eq!((learned.delivered, learned.events), (delivered, 5));
    }

    /// Reading from before the checkpoint's position is harmless: an object's last event in
    /// the log wins, and a version the checkpoint holds keeps its fingerprint.
    #[test]
    fn events_the_checkpoint_already_reflects_change_nothing() {
        let mut objects: HashMap<String, Saved> = [("ns/a".to_string(), saved("ua", "7", 9))].into();
        let learned = learn(&mut objects, WATCHED, vec![event("c", Change::Updated, "ns/a", "ua", "5"), event("c", Change::Updated, "ns/a", "ua", "7")]);
        assert_eq!(objects["ns/a"], saved("ua", "7", 9));
        assert!(learned.records.is_empty());
        assert_eq!(learned.delivered["ua"], "7");
    }

    /// A record copied into the log with a version the API server has not reached (a
    /// forgery, or another cluster's) teaches nothing: taken as delivered, it froze its
    /// object, every later real change skipped as a repeat.
    #[test]
    fn an_event_ahead_of_the_api_server_is_ignored_and_counted() {
        let mut objects: HashMap<String, Saved> = [("ns/a".to_string(), saved("ua", "5", 9))].into();
        let forged = event("c", Change::Updated, "ns/a", "ua", "999999999");
        let tail = vec![event("c", Change::Updated, "ns/a", "ua", "7"), forged.clone()];
        let learned = learn(&mut objects, Watched { current: Some(40), ..WATCHED }, tail);
        assert_eq!(objects["ns/a"], saved("ua", "7", 0), "the real event wins");
        assert_eq!(learned.delivered["ua"], "7");
        assert_eq!((learned.events, learned.ahead, learned.first_ahead), (1, 1, Some(forged)));
    }

    #[test]
    fn only_the_watchs_own_events_are_learned() {
        let mut objects = HashMap::new();
        let other_resource = Logged { resource: "v1/Secret".into(), ..event("c", Change::Added, "ns/x", "u3", "3") };
        let tail = vec![
            event("other", Change::Added, "ns/x", "u1", "1"),
            event("c", Change::Added, "elsewhere/x", "u2", "2"),
            other_resource,
            event("c", Change::Added, "ns/x", "", "4"),
        ];
        let learned = learn(&mut objects, WATCHED, tail);
        assert_eq!((objects.len(), learned.events), (0, 0));
        let everywhere = Watched { namespace: None, ..WATCHED };
        assert_eq!(learn(&mut objects, everywhere, vec![event("c", Change::Added, "elsewhere/x", "u2", "2")]).events, 1);
    }
}
