//! Whether a watch resumes from a checkpoint, and from which route's: a pure function of
//! what start-up gathered (`pipeline::resume` does the I/O). A checkpoint is resumed from
//! only when everything that can be checked shows it describes what this watch's consumers
//! hold, in this cluster's history; anything else is a full initial sync, with a reason.

use super::record::{Now, Unusable, WatchRecord};
use super::timeline::Timeline;

/// What one route of the watch holds of it, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// The route keeps no checkpoint (`NoStore`), or its store could not be read
    /// (`Unreadable`).
    Untracked(Unusable),
    /// Records that cannot be used as read: none (`Missing`), or refused by the parse
    /// (`Corrupt`).
    Refused(Unusable),
    /// The watch's record as read.
    Found(WatchRecord),
}

/// One route of the watch: the digest of its configuration now, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteFacts {
    pub digest: String,
    pub held: Held,
}

/// What proves the candidate checkpoint belongs to the API server's history, gathered only
/// for a candidate (`candidate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    NotGathered,
    /// Its newest objects, with what the log's tail taught applied, compared with the API
    /// server's (`timeline::judge`); `None`: they could not be looked up.
    Judged(Option<Timeline>),
}

/// Everything the decision looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `resume.enabled` and the resource's `resume`.
    pub enabled: bool,
    /// Where the API server stands.
    pub now: Now,
    /// Each route of the watch, in the watch's order.
    pub routes: Vec<RouteFacts>,
    /// The watch keeps each object's shipped content (resyncs, patch payloads), which a
    /// checkpoint does not hold: it lists to fill it in.
    pub keeps_content: bool,
    pub proof: Proof,
}

/// Where the watch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// From the checkpoint of the route at `route` (its place among the watch's routes):
    /// continuing the watch from `continue_from`, or (`None`) listing and shipping the
    /// list as a diff against the checkpoint.
    Resume { route: usize, continue_from: Option<String> },
    /// A full initial sync; why, and the route whose checkpoint gave the reason (`None`
    /// when the watch has no route).
    FullSync(Option<(usize, Unusable)>),
}

/// The route whose checkpoint the watch may resume from once it is proven (`Proof`), or why
/// none: resume is on, the watch has one route (several routes' consumers may hold different
/// states after a stop, which no one resume diff makes exact for all of them), and that
/// route's checkpoint was written under the watch's configuration, for this cluster, at a
/// version the API server issued and has reached, with its first sync acknowledged whole
/// or its log's tail named (what consumers received of a first sync cut short is read back).
pub fn candidate(facts: &Facts) -> Result<usize, Option<(usize, Unusable)>> {
    resumable(facts).map(|(route, _)| route)
}

/// Where the watch starts: from the candidate's checkpoint only once its objects show it
/// belongs to the API server's history (`Timeline::Proven`); not looked up, or not
/// gathered, is not proven.
pub fn decide(facts: &Facts) -> Decision {
    let (route, record) = match resumable(facts) {
        Ok(found) => found,
        Err(why) => return Decision::FullSync(why),
    };
    let refused = match &facts.proof {
        Proof::Judged(Some(timeline)) => timeline.refusal(),
        Proof::Judged(None) | Proof::NotGathered => Some(Unusable::Unverified),
    };
    if let Some(why) = refused {
        return Decision::FullSync(Some((route, why)));
    }
    // Without a position (a first sync cut short), or keeping content the checkpoint has
    // not, the watch lists.
    let continue_from = record.resource_version.clone().filter(|_| !facts.keeps_content);
    Decision::Resume { route, continue_from }
}

/// `candidate`, with the candidate's record. Resume off comes first: that start replaces
/// every route's checkpoint, whatever it holds.
fn resumable(facts: &Facts) -> Result<(usize, &WatchRecord), Option<(usize, Unusable)>> {
    if !facts.enabled {
        return Err((!facts.routes.is_empty()).then_some((0, Unusable::Disabled)));
    }
    let mut records = Vec::with_capacity(facts.routes.len());
    for (i, route) in facts.routes.iter().enumerate() {
        records.push(usable(route, &facts.now).map_err(|why| Some((i, why)))?);
    }
    match records[..] {
        [] => Err(None),
        [record] => Ok((0, record)),
        _ => Err(Some((0, Unusable::SeveralRoutes))),
    }
}

/// A route's checkpoint, if it could be resumed from as far as its record tells.
fn usable<'a>(route: &'a RouteFacts, now: &Now) -> Result<&'a WatchRecord, Unusable> {
    let record = match &route.held {
        Held::Untracked(why) | Held::Refused(why) => return Err(*why),
        Held::Found(record) => record,
    };
    if record.digest != route.digest {
        return Err(Unusable::Foreign);
    }
    match record.belongs_to(now) {
        // A first sync cut short, whose events the log holds.
        Err(Unusable::Incomplete) if record.tail.is_some() => Ok(record),
        Err(why) => Err(why),
        Ok(()) => Ok(record),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::checkpoint::Tail;

    fn record(digest: &str, rv: Option<&str>, uid: Option<&str>, tail: bool) -> WatchRecord {
        WatchRecord {
            format: 1,
            digest: digest.into(),
            resource_version: rv.map(str::to_string),
            objects: 1,
            cluster_uid: uid.map(str::to_string),
            tail: tail.then(|| Tail { log: "t".into(), next: BTreeMap::new() }),
        }
    }

    fn facts(routes: Vec<Held>, now: Option<&str>, proof: Proof) -> Facts {
        Facts {
            enabled: true,
            now: Now { version: now.map(str::to_string), cluster_uid: Some("c1".into()) },
            routes: routes.into_iter().map(|held| RouteFacts { digest: "d".into(), held }).collect(),
            keeps_content: false,
            proof,
        }
    }

    const PROVEN: Proof = Proof::Judged(Some(Timeline::Proven));

    #[test]
    fn a_proven_checkpoint_of_the_one_route_is_continued_from_at_its_position() {
        let f = facts(vec![Held::Found(record("d", Some("50"), Some("c1"), true))], Some("70"), PROVEN);
        assert_eq!(decide(&f), Decision::Resume { route: 0, continue_from: Some("50".into()) });
        let listing = Facts { keeps_content: true, ..f };
        assert_eq!(decide(&listing), Decision::Resume { route: 0, continue_from: None }, "content the checkpoint lacks is listed");
    }

    #[test]
    fn a_checkpoint_not_proven_to_belong_to_the_history_is_never_resumed_from() {
        let held = || vec![Held::Found(record("d", Some("50"), Some("c1"), true))];
        let rewound = Timeline::Diverged { key: "ns/a".into(), recorded: "50".into(), current: "20".into() };
        for (proof, why) in [
            (Proof::Judged(Some(rewound)), Unusable::Rewound),
            (Proof::Judged(Some(Timeline::Unproven)), Unusable::Unproven),
            (Proof::Judged(None), Unusable::Unverified),
            (Proof::NotGathered, Unusable::Unverified),
        ] {
            assert_eq!(decide(&facts(held(), Some("70"), proof.clone())), Decision::FullSync(Some((0, why))), "{proof:?}");
        }
    }

    #[test]
    fn a_first_sync_cut_short_resumes_by_listing_only_where_its_log_can_be_read_back() {
        let cut_short = |tail| facts(vec![Held::Found(record("d", None, Some("c1"), tail))], Some("70"), PROVEN);
        assert_eq!(decide(&cut_short(true)), Decision::Resume { route: 0, continue_from: None });
        assert_eq!(decide(&cut_short(false)), Decision::FullSync(Some((0, Unusable::Incomplete))));
    }

    // The model: each fact of a start drawn fresh, stale, forged, ahead or behind, on every
    // start path (none, one or several routes; resume on or off; a first start, a
    // checkpoint cut short, a resumed one).

    fn version() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            3 => (1u64..100).prop_map(|v| Some(v.to_string())),
            1 => Just(None),
            1 => prop_oneof![Just(String::new()), Just("abc".to_string()), Just("-3".to_string()), Just("1e3".to_string())].prop_map(Some),
        ]
    }

    fn uid() -> impl Strategy<Value = Option<String>> {
        prop_oneof![3 => Just(Some("c1".to_string())), 1 => Just(Some("c2".to_string())), 1 => Just(None)]
    }

    fn held() -> impl Strategy<Value = Held> {
        let why = prop_oneof![Just(Unusable::NoStore), Just(Unusable::Unreadable)];
        let refused = prop_oneof![Just(Unusable::Missing), Just(Unusable::Corrupt)];
        let found = (prop_oneof![4 => Just("d"), 1 => Just("other")], version(), uid(), any::<bool>())
            .prop_map(|(digest, rv, uid, tail)| Held::Found(record(digest, rv.as_deref(), uid.as_deref(), tail)));
        prop_oneof![1 => why.prop_map(Held::Untracked), 1 => refused.prop_map(Held::Refused), 6 => found]
    }

    fn proof() -> impl Strategy<Value = Proof> {
        let timeline = prop_oneof![
            4 => Just(Timeline::Proven),
            1 => Just(Timeline::Unproven),
            1 => Just(Timeline::Diverged { key: "ns/a".into(), recorded: "9".into(), current: "3".into() }),
        ];
        prop_oneof![1 => Just(Proof::NotGathered), 1 => Just(Proof::Judged(None)), 6 => timeline.prop_map(|t| Proof::Judged(Some(t)))]
    }

    fn any_facts() -> impl Strategy<Value = Facts> {
        (any::<bool>(), version(), uid(), prop::collection::vec(held(), 0..4), any::<bool>(), proof()).prop_map(
            |(enabled, now, cluster, held, keeps_content, proof)| Facts {
                enabled,
                now: Now { version: now, cluster_uid: cluster },
                routes: held.into_iter().map(|held| RouteFacts { digest: "d".into(), held }).collect(),
                keeps_content,
                proof,
            },
        )
    }

    fn number(v: &str) -> Option<u64> {
        (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())).then(|| v.parse().ok()).flatten()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// What the contract asks of a resume, stated apart from the code: it comes from the
        /// watch's one route, with resume on, a checkpoint written under this configuration
        /// for this cluster, not ahead of the API server, proven by its objects; it continues
        /// at the checkpoint's own position, or lists.
        #[test]
        fn a_resume_happens_only_when_every_fact_allows_it(f in any_facts()) {
            if let Decision::Resume { route, continue_from } = decide(&f) {
                prop_assert!(f.enabled);
                prop_assert_eq!(f.routes.len(), 1);
                prop_assert_eq!(route, 0);
                let Held::Found(record) = &f.routes[0].held else { return Err(TestCaseError::fail("resumed from no record")) };
                prop_assert_eq!(&record.digest, &f.routes[0].digest);
                prop_assert!(!matches!((&record.cluster_uid, &f.now.cluster_uid), (Some(a), Some(b)) if a != b), "another cluster's");
                prop_assert_eq!(&f.proof, &Proof::Judged(Some(Timeline::Proven)));
                match &record.resource_version {
                    Some(at) => {
                        let (at, now) = (number(at), f.now.version.as_deref().and_then(number));
                        prop_assert!(matches!((at, now), (Some(at), Some(now)) if at <= now), "a position the API server has not reached, or not one it issues");
                    }
                    None => prop_assert!(record.tail.is_some(), "a first sync cut short resumes only by reading its log back"),
                }
                match continue_from {
                    Some(from) => {
                        prop_assert!(!f.keeps_content, "content the checkpoint lacks must be listed");
                        prop_assert_eq!(Some(&from), record.resource_version.as_ref());
                    }
                    None => prop_assert!(f.keeps_content || record.resource_version.is_none(), "a proven position is continued from"),
                }
            }
        }

        /// A start that could resume does, so that a restart ships only what changed.
        #[test]
        fn every_fact_allowing_it_the_watch_resumes(f in any_facts()) {
            let ok = f.enabled && f.routes.len() == 1 && f.proof == Proof::Judged(Some(Timeline::Proven)) && match &f.routes[0].held {
                Held::Found(r) => r.digest == f.routes[0].digest
                    && !matches!((&r.cluster_uid, &f.now.cluster_uid), (Some(a), Some(b)) if a != b)
                    && match &r.resource_version {
                        Some(at) => matches!((number(at), f.now.version.as_deref().and_then(number)), (Some(at), Some(now)) if at <= now),
                        None => r.tail.is_some(),
                    },
                _ => false,
            };
            prop_assert_eq!(ok, matches!(decide(&f), Decision::Resume { .. }));
        }

        /// A full sync says why, naming a route of the watch, whenever the watch has one:
        /// resume off first, then a route's own fault, then what the routes together decide.
        #[test]
        fn a_full_sync_names_a_route_and_its_reason(f in any_facts()) {
            if let Decision::FullSync(why) = decide(&f) {
                match why {
                    None => prop_assert!(f.routes.is_empty()),
                    Some((route, why)) => {
                        prop_assert!(route < f.routes.len());
                        if let (true, Held::Untracked(own) | Held::Refused(own)) = (f.enabled, &f.routes[route].held) {
                            prop_assert_eq!(*own, why);
                        }
                        if why == Unusable::SeveralRoutes {
                            prop_assert!(f.routes.iter().all(|r| usable(r, &f.now).is_ok()));
                        }
                        prop_assert_eq!(why == Unusable::Disabled, !f.enabled, "resume off is said first");
                    }
                }
            }
        }

        /// Making any one fact worse never turns a full sync into a resume: a second route, a
        /// position moved ahead of the API server, another cluster's identity, a record
        /// under another configuration, an object that went back.
        #[test]
        fn a_worse_fact_never_allows_a_resume(f in any_facts(), worse in 0..5usize) {
            let mut w = f.clone();
            match (worse, w.routes.first_mut()) {
                (0, Some(_)) => w.routes.push(RouteFacts { digest: "d".into(), held: Held::Found(record("d", Some("1"), Some("c1"), true)) }),
                (1, Some(RouteFacts { held: Held::Found(r), .. })) => r.resource_version = Some("1000".into()),
                (2, Some(RouteFacts { held: Held::Found(r), .. })) => {
                    r.cluster_uid = Some("c9".into());
                    w.now.cluster_uid = Some("c1".into());
                }
                (3, Some(RouteFacts { held: Held::Found(r), .. })) => r.digest = "other".into(),
                (4, _) => w.proof = Proof::Judged(Some(Timeline::Diverged { key: "k".into(), recorded: "9".into(), current: "3".into() })),
                _ => {}
            }
            if !matches!(decide(&f), Decision::Resume { .. }) {
                let resumed = matches!(decide(&w), Decision::Resume { .. });
                prop_assert!(!resumed, "a worse fact allowed a resume");
            }
            let resumed = matches!(decide(&w), Decision::Resume { .. });
            prop_assert!(w == f || !resumed, "the worse fact must refuse: {:?}", decide(&w));
        }
    }
}
