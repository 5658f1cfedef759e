//! Who leads a route: a record in the route's checkpoint naming the configuration, the
//! watches and the lease of the deployment writing it, renewed while it runs and released
//! when it stops. A start that finds one of its watches held, recently, by another
//! configuration under another lease (two deployments given the same cluster name, sink and
//! checkpoint, watching the same resource in the same scope) does not lead the route: both
//! would ship, each overwriting the other's checkpoint of that watch, and consumers would
//! lose what one of them does not select. Deployments whose watches differ keep apart
//! records and lead side by side. Pure: the writer renews it, start-up reads it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How often a running deployment renews its record, at least (and with every checkpoint
/// write when its interval is longer).
pub const RENEW_EVERY: Duration = Duration::from_secs(10);
/// A record not renewed for this many renewal periods is taken as left behind (its
/// deployment stopped without releasing it: a crash, a kill).
const LIVE_FOR_RENEWALS: u64 = 3;

/// A deployment writing a route's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The digest of the route's configuration: every watch's `checkpoint::digest`.
    pub configuration: String,
    /// The key prefixes of the route's watches (`checkpoint::watch_prefix`), sorted.
    #[serde(default)]
    pub watches: Vec<String>,
    /// The lease its replicas share (`namespace/name`), with leader election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Which process wrote it (the lease identity, or the host name): for messages only.
    pub instance: String,
    /// When it was written (ms since the epoch, the writer's clock).
    pub written_ms: u64,
    /// How often it is renewed while its deployment runs.
    pub renew_ms: u64,
    /// Written by a deployment that stopped: the route is free.
    #[serde(default)]
    pub released: bool,
}

/// The record's key in the route's checkpoint (no watch's key ends so).
pub fn key(route_prefix: &str) -> String {
    format!("{route_prefix}.h")
}

/// The digest of a route's configuration from its watches' digests, in any order.
pub fn configuration<'a>(digests: impl IntoIterator<Item = &'a str>) -> String {
    let mut all: Vec<&str> = digests.into_iter().collect();
    all.sort_unstable();
    all.dedup();
    let hash = Sha256::digest(all.join(",").as_bytes());
    crate::hex::encode("", &hash[..12])
}

/// The wall clock in ms since the epoch: records of different processes compare by it.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// What a start does with the route, given the record it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    Lead,
    /// Held by another configuration whose record was left behind `stale_for` ago: led,
    /// and said.
    TakeOver {
        other: Holder,
    },
    /// A watch held now by another deployment (another configuration, under another lease
    /// or none): not led while it is.
    Refuse {
        other: Holder,
    },
}

/// Whether `mine` may lead the route whose record is `found`, at `now_ms`. Watches in
/// common are what two deployments would overwrite of each other's. The same lease
/// proves one leader at a time (a rolling update of one deployment changes its
/// configuration under its lease); the same configuration cannot be told from a restart
/// of this deployment.
pub fn judge(mine: &Holder, found: Option<&Holder>, now_ms: u64) -> Claim {
    let Some(other) = found else { return Claim::Lead };
    let same_lease = mine.lease.is_some() && mine.lease == other.lease;
    let shared = mine.watches.iter().any(|w| other.watches.binary_search(w).is_ok());
    if same_lease || other.configuration == mine.configuration || other.released || !shared {
        return Claim::Lead;
    }
    let live_until = other.written_ms.saturating_add(other.renew_ms.saturating_mul(LIVE_FOR_RENEWALS));
    if now_ms < live_until { Claim::Refuse { other: other.clone() } } else { Claim::TakeOver { other: other.clone() } }
}

impl Holder {
    /// For messages: `configuration 1a2b… under lease ns/name (instance pod-x)`.
    pub fn describe(&self) -> String {
        let lease = self.lease.as_deref().map_or_else(|| "without leader election".to_string(), |l| format!("under lease {l}"));
        format!("configuration {} {lease} (instance {})", self.configuration, self.instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(configuration: &str, lease: Option<&str>, written_ms: u64) -> Holder {
        Holder {
            configuration: configuration.into(),
            watches: vec!["c.r.configmaps.ns".into()],
            lease: lease.map(str::to_string),
            instance: "i".into(),
            written_ms,
            renew_ms: 10_000,
            released: false,
        }
    }

    #[test]
    fn a_route_held_now_by_another_configuration_under_another_lease_is_not_led() {
        let mine = holder("a", Some("ns/one"), 100_000);
        let other = holder("b", Some("ns/two"), 95_000);
        assert_eq!(judge(&mine, Some(&other), 100_000), Claim::Refuse { other: other.clone() });
        let unleased = holder("b", None, 95_000);
        assert!(matches!(judge(&holder("a", None, 0), Some(&unleased), 100_000), Claim::Refuse { .. }), "two deployments without leader election");
    }

    #[test]
    fn a_free_route_a_restart_and_a_rolling_update_under_one_lease_lead() {
        let mine = holder("a", Some("ns/one"), 100_000);
        assert_eq!(judge(&mine, None, 100_000), Claim::Lead, "a first start");
        assert_eq!(judge(&mine, Some(&holder("a", Some("ns/two"), 99_000)), 100_000), Claim::Lead, "the same configuration: a restart");
        assert_eq!(judge(&mine, Some(&holder("b", Some("ns/one"), 99_000)), 100_000), Claim::Lead, "the lease proves one leader");
        let released = Holder { released: true, ..holder("b", None, 99_000) };
        assert_eq!(judge(&mine, Some(&released), 100_000), Claim::Lead, "stopped and released it");
        let elsewhere = Holder { watches: vec!["c.r.configmaps.other".into(), "c.r.secrets.ns".into()], ..holder("b", None, 99_000) };
        assert_eq!(judge(&holder("a", None, 0), Some(&elsewhere), 100_000), Claim::Lead, "other watches: records apart");
    }

    #[test]
    fn a_record_left_behind_by_a_crash_is_taken_over_after_three_renewals() {
        let mine = holder("a", None, 0);
        let other = holder("b", None, 100_000);
        assert!(matches!(judge(&mine, Some(&other), 129_999), Claim::Refuse { .. }));
        assert_eq!(judge(&mine, Some(&other), 130_000), Claim::TakeOver { other });
    }

    #[test]
    fn a_routes_configuration_is_its_watches_whatever_their_order() {
        assert_eq!(configuration(["x", "y"]), configuration(["y", "x", "y"]));
        assert_ne!(configuration(["x"]), configuration(["x", "y"]));
    }

    #[test]
    fn the_record_key_is_no_watch_key() {
        let k = key("c.r");
        assert!(!k.ends_with(".w") && !k.contains(".o."), "{k}");
    }
}
