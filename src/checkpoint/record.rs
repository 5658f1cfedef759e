//! The records a checkpoint is written as: one per watch (its position and the digest of
//! its configuration) and one per acknowledged object (uid, resourceVersion, fingerprint),
//! under keys that are valid Kafka keys, NATS key-value keys and file lines alike.
//!
//! Keys: `<cluster>.<route>.<resource>.<namespace>.w` for a watch and
//! `<cluster>.<route>.<resource>.<namespace>.o.<object key>` for its objects, every part
//! encoded by `token` (`=` for all namespaces).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::Seal;

/// The format of the records' values; a checkpoint of another format is not read.
pub const FORMAT: u32 = 1;

/// `value` as one key token: ASCII letters, digits, `-`, `_` and `/` are kept, every other
/// byte becomes `=XX` (upper-case hex), so the token holds no `.` and only characters NATS
/// key-value keys allow. The empty value is `=`.
pub fn token(value: &str) -> String {
    if value.is_empty() {
        return "=".into();
    }
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/') {
            out.push(b as char);
        } else {
            out.push('=');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The key prefix of everything `route` of `cluster` keeps.
pub fn route_prefix(cluster: &str, route: &str) -> String {
    format!("{}.{}", token(cluster), token(route))
}

/// The key prefix of one watch's records within its route's prefix.
pub fn watch_prefix(route_prefix: &str, resource_label: &str, namespace: Option<&str>) -> String {
    format!("{route_prefix}.{}.{}", token(resource_label), token(namespace.unwrap_or("")))
}

pub fn watch_key(watch_prefix: &str) -> String {
    format!("{watch_prefix}.w")
}

pub fn object_key(watch_prefix: &str, object_key: &str) -> String {
    format!("{watch_prefix}.o.{}", token(object_key))
}

/// A watch's record: where it stood and for which configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchRecord {
    pub format: u32,
    /// The digest of the watch's configuration on this route (`Scope` and `Output`): a
    /// checkpoint written under another configuration is not resumed from.
    pub digest: String,
    /// The watch position everything recorded was acknowledged at; `None` until the first
    /// sync was acknowledged whole.
    pub resource_version: Option<String>,
    /// How many object records belong to it (a check that none was lost).
    pub objects: u64,
    /// The identity of the cluster it was written for (the `kube-system` namespace's uid),
    /// when this identity could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_uid: Option<String>,
    /// Where, in the log the route's events go to, events of the watch that these records
    /// may not reflect begin (`checkpoint::tail`); absent for sinks that cannot be read
    /// back (HTTP, stdout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<Tail>,
}

/// A place in a route's log: the Kafka topic or JetStream stream, and per partition (0 for
/// a stream) the offset or sequence to read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tail {
    pub log: String,
    pub next: BTreeMap<i32, u64>,
}

/// Where the API server stands when a checkpoint is about to be resumed from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Now {
    /// Its current resourceVersion for the watch's scope (a consistent read); `None` when it
    /// could not be read.
    pub version: Option<String>,
    /// The cluster's identity, when this identity may read it.
    pub cluster_uid: Option<String>,
}

impl WatchRecord {
    /// Whether the checkpoint belongs to the timeline of the cluster as it stands `now`: its
    /// version is one the API server issues (a decimal number) and not ahead of the API
    /// server's (an etcd restored from a backup, a cluster re-created under the same name),
    /// and it was written for this cluster.
    pub fn belongs_to(&self, now: &Now) -> Result<(), Unusable> {
        if let (Some(written), Some(current)) = (&self.cluster_uid, &now.cluster_uid)
            && written != current
        {
            return Err(Unusable::OtherCluster);
        }
        let Some(at) = self.resource_version.as_deref() else { return Err(Unusable::Incomplete) };
        let at = version_number(at).ok_or(Unusable::BadVersion)?;
        let current = now.version.as_deref().and_then(version_number).ok_or(Unusable::Unverified)?;
        if at > current {
            return Err(Unusable::Ahead);
        }
        Ok(())
    }
}

/// A resourceVersion as the number etcd issues it; `None` for anything else.
fn version_number(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// An object's record: what the consumers of the route hold of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub uid: String,
    #[serde(rename = "rv")]
    pub resource_version: String,
    /// The object's fingerprint as the watch stage took it (`json::Scanner`, or
    /// `json::Fingerprinter` for an object it changed), 32 hex digits.
    #[serde(rename = "fp", with = "hex128")]
    pub fingerprint: u128,
}

mod hex128 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let s = <&str>::deserialize(d)?;
        u128::from_str_radix(s, 16).map_err(D::Error::custom)
    }
}

/// One watch's checkpoint as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub watch: WatchRecord,
    /// By object key (`namespace/name`).
    pub objects: HashMap<String, Saved>,
}

/// Why a watch's checkpoint cannot be resumed from: the bounded `reason` label of
/// `deltaship_resume_fallbacks_total` and what the log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No record of the watch (first start, or resume was off).
    Missing,
    /// A record that does not parse, of another format, or objects missing.
    Corrupt,
    /// Written under another configuration of the watch or route.
    Foreign,
    /// The first sync was never acknowledged whole.
    Incomplete,
    /// The checkpoint store could not be read.
    Unreadable,
    /// The route keeps no checkpoint (stdout without `resume.directory`).
    NoStore,
    /// The checkpoint's version is not one the API server issues (empty, or not a number).
    BadVersion,
    /// The checkpoint is ahead of the API server's current version.
    Ahead,
    /// Written for another cluster (another `kube-system` namespace uid).
    OtherCluster,
    /// The API server's current version, or the checkpoint's newest objects there, could not
    /// be read to check the checkpoint against.
    Unverified,
    /// Resume is off for the watch (`resume.enabled` or `resources[].resume`): its
    /// checkpoint is replaced by what this start ships.
    Disabled,
    /// The watch is shipped by several routes: after a crash their consumers may hold
    /// different states (each route acknowledges on its own), which no one resume diff
    /// makes exact for all of them.
    SeveralRoutes,
    /// One of its objects is older at the API server than it recorded: the API server's
    /// history was replaced (etcd restored from a backup) and written past its version.
    Rewound,
    /// None of its newest objects could be found as it recorded them or later (all gone or
    /// re-created), so nothing shows it belongs to the API server's history.
    Unproven,
}

impl Unusable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unusable::Missing => "missing",
            Unusable::Corrupt => "corrupt",
            Unusable::Foreign => "foreign",
            Unusable::Incomplete => "incomplete",
            Unusable::Unreadable => "unreadable",
            Unusable::NoStore => "no_store",
            Unusable::BadVersion => "bad_version",
            Unusable::Ahead => "ahead",
            Unusable::OtherCluster => "other_cluster",
            Unusable::Unverified => "unverified",
            Unusable::Disabled => "disabled",
            Unusable::SeveralRoutes => "several_routes",
            Unusable::Rewound => "rewound",
            Unusable::Unproven => "unproven",
        }
    }

    /// Whether the reason points at something an operator should look into (a restored
    /// etcd, another cluster, a tampered or unreadable position), not an ordinary first start.
    pub fn is_alarming(self) -> bool {
        matches!(self, Unusable::BadVersion | Unusable::Ahead | Unusable::OtherCluster | Unusable::Unverified | Unusable::Corrupt | Unusable::Rewound)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Unusable::Missing => "no checkpoint of this watch",
            Unusable::Corrupt => "the checkpoint is corrupt (a record does not parse, or records are missing)",
            Unusable::Foreign => "the checkpoint was written under another configuration of this watch or route",
            Unusable::Incomplete => "the checkpoint was written before the first sync was acknowledged whole",
            Unusable::Unreadable => "the checkpoint store could not be read",
            Unusable::NoStore => "the route keeps no checkpoint",
            Unusable::BadVersion => "the checkpoint's resourceVersion is not one the API server issues (empty or not a number)",
            Unusable::Ahead => {
                "the checkpoint is ahead of the API server (etcd restored from a backup, or a cluster re-created under the same name); continuing from it would ship nothing until the API server caught up"
            }
            Unusable::OtherCluster => "the checkpoint was written for another cluster (its kube-system namespace has another uid)",
            Unusable::Unverified => {
                "the checkpoint could not be checked against the API server (its current resourceVersion, or the checkpoint's newest objects there, could not be read)"
            }
            Unusable::Disabled => "resume is off for this watch; the checkpoint is replaced by what this start ships",
            Unusable::SeveralRoutes => {
                "the watch is shipped by several routes, whose consumers may hold different states after a stop; a full sync makes each of them exact"
            }
            Unusable::Rewound => {
                "an object of the checkpoint is older at the API server than the checkpoint recorded: the API server's history was replaced (etcd restored from a backup) and has moved past the checkpoint since"
            }
            Unusable::Unproven => {
                "none of the checkpoint's newest objects is at the API server as recorded or later (all gone or re-created), so nothing shows the checkpoint belongs to its history"
            }
        }
    }
}

/// A checkpoint that cannot be resumed from: why, and the keys of its records (to clear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub why: Unusable,
    pub keys: Vec<String>,
}

/// One route's checkpoints by watch prefix.
pub type Parsed = HashMap<String, Result<Loaded, Refused>>;

/// One watch's records while they are read: the watch record, and the objects parsed as
/// they come (the raw values are not kept).
#[derive(Default)]
struct Reading {
    watch: Option<Vec<u8>>,
    objects: HashMap<String, Saved>,
    /// Tokens of object records that do not parse.
    unreadable: Vec<String>,
}

impl Reading {
    fn object(&mut self, token: &str, value: &[u8]) {
        match (untoken(token), serde_json::from_slice::<Saved>(value)) {
            (Some(key), Ok(saved)) => {
                self.objects.insert(key, saved);
            }
            _ => self.unreadable.push(token.to_string()),
        }
    }

    /// The watch's checkpoint, or `Corrupt` with the keys of its records (to clear).
    fn finish(self, prefix: &str) -> Result<Loaded, Refused> {
        let watch = self.watch.and_then(|w| serde_json::from_slice::<WatchRecord>(&w).ok());
        match watch {
            Some(watch) if self.unreadable.is_empty() && watch.format == FORMAT && watch.objects == self.objects.len() as u64 => {
                Ok(Loaded { watch, objects: self.objects })
            }
            _ => {
                let mut keys: Vec<String> = self.objects.keys().map(|k| object_key(prefix, k)).collect();
                keys.extend(self.unreadable.iter().map(|t| format!("{prefix}.o.{t}")));
                Err(Refused { why: Unusable::Corrupt, keys })
            }
        }
    }
}

/// The watches of one route's records (latest value per key), by watch prefix: their
/// checkpoint, or why it is unusable. A record `seal` cannot open (forged, edited, or
/// sealed with another key) is unreadable, which makes its watch's checkpoint `Corrupt`.
/// Object records of a watch without a watch record are reported under their prefix as
/// `Corrupt`, so that they are cleared. Each record is parsed and dropped in turn: the raw
/// values and the parsed ones are not held whole at once.
pub fn parse(records: HashMap<String, Vec<u8>>, seal: &Seal) -> Parsed {
    let mut watches: HashMap<String, Reading> = HashMap::new();
    for (key, value) in records {
        let value = seal.open(&key, &value).unwrap_or_default();
        if let Some(prefix) = key.strip_suffix(".w") {
            watches.entry(prefix.to_string()).or_default().watch = Some(value.to_vec());
        } else if let Some((prefix, token)) = key.split_once(".o.") {
            match watches.get_mut(prefix) {
                Some(reading) => reading.object(token, value),
                None => watches.entry(prefix.to_string()).or_default().object(token, value),
            }
        }
    }
    watches
        .into_iter()
        .map(|(prefix, reading)| {
            let loaded = reading.finish(&prefix);
            (prefix, loaded)
        })
        .collect()
}

/// The value of a `token`.
fn untoken(token: &str) -> Option<String> {
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            out.push(u8::from_str_radix(token.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn saved(rv: &str) -> Saved {
        Saved { uid: "u".into(), resource_version: rv.into(), fingerprint: 0xabc }
    }

    fn parse_plain(records: HashMap<String, Vec<u8>>) -> Parsed {
        parse(records, &Seal::default())
    }

    /// With a key, a checkpoint whose records were written without it, or edited (the
    /// position moved on: changes would be skipped), is corrupt; sealed records read back.
    #[test]
    fn with_a_key_only_sealed_unchanged_records_are_read() {
        let seal = Seal::new(Some(b"a key of sixteen bytes or more"));
        let watch = WatchRecord { format: FORMAT, digest: "d".into(), resource_version: Some("7".into()), objects: 1, cluster_uid: None, tail: None };
        let plain = records(&watch, &[("ns/a", saved("1"))]);
        let sealed: HashMap<String, Vec<u8>> = plain.iter().map(|(k, v)| (k.clone(), seal.seal(k, v.clone()))).collect();
        assert_eq!(parse(sealed.clone(), &seal).into_values().next().unwrap().unwrap().watch, watch);
        assert_eq!(parse(plain, &seal).into_values().next().unwrap().unwrap_err().why, Unusable::Corrupt, "unsealed");
        let mut forged = sealed;
        let key = forged.keys().find(|k| k.ends_with(".w")).unwrap().clone();
        let edited = String::from_utf8(forged[&key].clone()).unwrap().replace("\"7\"", "\"900\"");
        forged.insert(key, edited.into_bytes());
        assert_eq!(parse(forged, &seal).into_values().next().unwrap().unwrap_err().why, Unusable::Corrupt, "position edited");
    }

    fn records(watch: &WatchRecord, objects: &[(&str, Saved)]) -> HashMap<String, Vec<u8>> {
        let prefix = watch_prefix(&route_prefix("c", "r"), "configmaps", None);
        let mut out: HashMap<_, _> = objects.iter().map(|(k, s)| (object_key(&prefix, k), serde_json::to_vec(s).unwrap())).collect();
        out.insert(watch_key(&prefix), serde_json::to_vec(watch).unwrap());
        out
    }

    #[test]
    fn a_watch_and_its_objects_read_back() {
        let watch = WatchRecord { format: FORMAT, digest: "d".into(), resource_version: Some("7".into()), objects: 2, cluster_uid: None, tail: None };
        let parsed = parse_plain(records(&watch, &[("ns/a", saved("1")), ("system:admin", saved("2"))]));
        let loaded = parsed.into_values().next().unwrap().unwrap();
        assert_eq!(loaded.watch, watch);
        assert_eq!(loaded.objects["system:admin"], saved("2"));
        assert_eq!(serde_json::to_string(&saved("1")).unwrap(), r#"{"uid":"u","rv":"1","fp":"00000000000000000000000000000abc"}"#);
    }

    #[test]
    fn lost_or_unparsable_records_make_the_checkpoint_corrupt() {
        let watch = WatchRecord { format: FORMAT, digest: "d".into(), resource_version: Some("7".into()), objects: 2, cluster_uid: None, tail: None };
        let parsed = parse_plain(records(&watch, &[("ns/a", saved("1"))]));
        let refused = parsed.into_values().next().unwrap().unwrap_err();
        assert_eq!((refused.why, refused.keys.len()), (Unusable::Corrupt, 1), "one object record lost");
        let mut garbage = records(&watch, &[("ns/a", saved("1")), ("ns/b", saved("2"))]);
        let prefix = watch_prefix(&route_prefix("c", "r"), "configmaps", None);
        garbage.insert(object_key(&prefix, "ns/b"), b"{not json".to_vec());
        let mut refused = parse_plain(garbage).into_values().next().unwrap().unwrap_err();
        refused.keys.sort();
        assert_eq!((refused.why, refused.keys), (Unusable::Corrupt, vec![object_key(&prefix, "ns/a"), object_key(&prefix, "ns/b")]), "cleared whole");
    }

    #[test]
    fn keys_are_valid_nats_key_value_keys() {
        let prefix = watch_prefix(&route_prefix("prod.eu", "all routes"), "deployments.apps", Some("ns"));
        let key = object_key(&prefix, "ns/system:controller:x.y");
        assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_/=.".contains(&b)), "{key}");
        assert_eq!(key, "prod=2Eeu.all=20routes.deployments=2Eapps.ns.o.ns/system=3Acontroller=3Ax=2Ey");
    }

    #[test]
    fn a_checkpoint_belongs_only_to_its_clusters_timeline_up_to_now() {
        let record = |rv: Option<&str>, uid: Option<&str>| WatchRecord {
            format: FORMAT,
            digest: "d".into(),
            resource_version: rv.map(str::to_string),
            objects: 0,
            cluster_uid: uid.map(str::to_string),
            tail: None,
        };
        let now = |v: Option<&str>, uid: Option<&str>| Now { version: v.map(str::to_string), cluster_uid: uid.map(str::to_string) };
        let here = now(Some("100"), Some("k"));
        assert_eq!(record(Some("100"), Some("k")).belongs_to(&here), Ok(()), "at the API server's version");
        assert_eq!(record(Some("99"), None).belongs_to(&here), Ok(()), "written without the identity (it could not be read)");
        assert_eq!(record(Some("99"), Some("k")).belongs_to(&now(Some("100"), None)), Ok(()), "the identity cannot be read now");
        assert_eq!(record(Some("101"), Some("k")).belongs_to(&here), Err(Unusable::Ahead), "101 > 100 as numbers");
        assert_eq!(record(Some("99999999999"), Some("k")).belongs_to(&now(Some("100000000000"), None)), Ok(()), "not compared as text");
        assert_eq!(record(Some("5"), Some("other")).belongs_to(&here), Err(Unusable::OtherCluster));
        for bad in ["", "abc", "-1", "1e3", " 7", "18446744073709551616"] {
            assert_eq!(record(Some(bad), Some("k")).belongs_to(&here), Err(Unusable::BadVersion), "{bad:?}");
        }
        assert_eq!(record(None, Some("k")).belongs_to(&here), Err(Unusable::Incomplete));
        assert_eq!(record(Some("5"), Some("k")).belongs_to(&now(None, Some("k"))), Err(Unusable::Unverified));
        assert_eq!(record(Some("5"), Some("k")).belongs_to(&now(Some("abc"), Some("k"))), Err(Unusable::Unverified));
    }

    proptest! {
        #[test]
        fn tokens_round_trip_without_dots(s in ".{0,60}") {
            let t = token(&s);
            prop_assert!(!t.contains('.') && !t.is_empty());
            if !s.is_empty() {
                prop_assert_eq!(untoken(&t), Some(s));
            }
        }
    }
}
