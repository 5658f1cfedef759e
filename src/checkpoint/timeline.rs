//! Whether a checkpoint belongs to the API server's history: a few of its objects compared
//! with what the API server holds of them now. Pure: start-up gathers the samples.

use std::collections::HashMap;

use super::record::{Saved, Unusable};

/// How many of a checkpoint's objects start-up looks up: the newest, the ones a restored
/// etcd is most likely to have lost or rolled back.
pub const SAMPLES: usize = 8;

/// One object of the checkpoint and what the API server holds under its key now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub key: String,
    pub saved: Saved,
    /// Its uid and resourceVersion now; `None`: no object under that key.
    pub current: Option<(String, String)>,
}

/// What the samples show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timeline {
    /// An object still holds the version recorded or a later one, and none went back.
    Proven,
    /// An object (same uid) is older now than the checkpoint recorded: within one history
    /// an object's version never goes back, so the API server's history was replaced (etcd
    /// restored from a backup, and written past the checkpoint's version since).
    Diverged { key: String, recorded: String, current: String },
    /// Nothing to tell by: every sampled object is gone or was re-created (or the
    /// checkpoint holds none).
    Unproven,
}

impl Timeline {
    /// The reason not to resume, when there is one.
    pub fn refusal(&self) -> Option<Unusable> {
        match self {
            Timeline::Proven => None,
            Timeline::Diverged { .. } => Some(Unusable::Rewound),
            Timeline::Unproven => Some(Unusable::Unproven),
        }
    }
}

/// The keys of the `SAMPLES` newest objects of a checkpoint (by resourceVersion, then key).
pub fn newest(objects: &HashMap<String, Saved>) -> Vec<String> {
    let mut all: Vec<(u64, &String)> = objects.iter().map(|(k, s)| (s.resource_version.parse().unwrap_or(0), k)).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    all.into_iter().take(SAMPLES).map(|(_, k)| k.clone()).collect()
}

/// What `samples` show of the checkpoint they were drawn from.
pub fn judge(samples: &[Sample]) -> Timeline {
    let number = |v: &str| v.parse::<u64>().ok();
    let mut proven = false;
    for s in samples {
        let Some((uid, version)) = &s.current else { continue };
        if *uid != s.saved.uid {
            continue;
        }
        match (number(version), number(&s.saved.resource_version)) {
            (Some(now), Some(recorded)) if now < recorded => {
                return Timeline::Diverged { key: s.key.clone(), recorded: s.saved.resource_version.clone(), current: version.clone() };
            }
            (Some(_), Some(_)) => proven = true,
            _ => {}
        }
    }
    if proven { Timeline::Proven } else { Timeline::Unproven }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(key: &str, recorded: &str, current: Option<(&str, &str)>) -> Sample {
        Sample {
            key: key.into(),
            saved: Saved { uid: format!("uid-{key}"), resource_version: recorded.into(), fingerprint: 1 },
            current: current.map(|(u, v)| (u.to_string(), v.to_string())),
        }
    }

    #[test]
    fn an_object_at_its_recorded_version_or_later_proves_the_history() {
        let same = sample("ns/a", "50", Some(("uid-ns/a", "50")));
        let later = sample("ns/b", "40", Some(("uid-ns/b", "90")));
        assert_eq!(judge(&[same.clone(), later]), Timeline::Proven);
        assert_eq!(judge(&[sample("ns/gone", "60", None), same]), Timeline::Proven, "a delete while down is ordinary");
    }

    #[test]
    fn an_object_older_than_recorded_shows_a_replaced_history_whatever_the_others_show() {
        let older = sample("ns/b", "70", Some(("uid-ns/b", "30")));
        let got = judge(&[sample("ns/a", "50", Some(("uid-ns/a", "50"))), older]);
        assert_eq!(got, Timeline::Diverged { key: "ns/b".into(), recorded: "70".into(), current: "30".into() });
        assert_eq!(got.refusal(), Some(Unusable::Rewound));
    }

    #[test]
    fn gone_or_recreated_objects_prove_nothing() {
        let recreated = sample("ns/a", "50", Some(("another-uid", "20")));
        assert_eq!(judge(&[recreated, sample("ns/b", "60", None)]), Timeline::Unproven);
        assert_eq!(judge(&[]), Timeline::Unproven, "an empty checkpoint");
        assert_eq!(Timeline::Unproven.refusal(), Some(Unusable::Unproven));
    }

    #[test]
    fn the_newest_objects_are_sampled() {
        let objects: HashMap<String, Saved> =
            (0..20).map(|i| (format!("ns/o{i:02}"), Saved { uid: format!("u{i}"), resource_version: (100 + i).to_string(), fingerprint: 0 })).collect();
        let keys = newest(&objects);
        assert_eq!(keys.len(), SAMPLES);
        assert_eq!(keys[0], "ns/o19");
        assert_eq!(keys[SAMPLES - 1], format!("ns/o{:02}", 20 - SAMPLES));
    }
}
