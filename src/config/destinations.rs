//! Where events go, checked across resources and routes: NATS subjects are single
//! subjects inside a created stream's, and no two watches of one kind share a destination
//! and the keys of their sync markers.

use std::collections::HashSet;

use super::model::Config;
use super::nats::{NatsConfig, NatsMode};
use super::problem::{Problem, problem};
use super::resource::ResourceConfig;
use super::sink::SinkConfig;
use super::template::Template;
use crate::model::MarkerSlot;
use crate::model::subject::encode_token;

pub(super) fn validate(c: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    for (i, r) in c.resources.iter().enumerate() {
        if let Some(t) = &r.subject {
            check_subject_tokens(&mut out, format!("resources[{i}].subject"), t);
        }
    }
    for (position, route) in c.effective_routes().iter().enumerate() {
        if let SinkConfig::Nats(n) = &route.sink {
            check_nats_subjects(&mut out, &route_sink_key(c, position), n);
        }
    }
    check_stream_subjects(&mut out, c);
    check_shared_markers(&mut out, c);
    out
}

/// The sink's subject templates name single subjects; its stream's subjects are filters.
fn check_nats_subjects(out: &mut Vec<Problem>, key: &str, n: &NatsConfig) {
    let at = |field: &str| format!("{key}.{field}");
    check_subject_tokens(out, at("subject_template"), &n.subject_template);
    check_subject_tokens(out, at("marker_subject_template"), &n.marker_subject_template);
    let js = &n.jetstream;
    if let Some(p) = js.fence_subject.as_deref().and_then(bad_subject) {
        out.push(Problem { key: at("jetstream.fence_subject"), ..p });
    }
    for (k, f) in js.subjects.iter().enumerate() {
        let tokens: Vec<&str> = f.split('.').collect();
        let last = tokens.len() - 1;
        let bad = tokens
            .iter()
            .enumerate()
            .any(|(i, t)| t.is_empty() || t.contains(char::is_whitespace) || (*t != "*" && t.contains('*')) || (t.contains('>') && (*t != ">" || i != last)));
        if bad {
            out.push(problem(
                at(&format!("jetstream.subjects[{k}]")),
                format!("`{f}` is not a subject filter"),
                "use dot-separated non-empty tokens, `*` for one token and `>` only as the last token, e.g. `deltaship.>`",
            ));
        }
    }
}

/// Template `t` with the placeholders known at load filled in: `{cluster}`, and the group,
/// version and kind of `r` (each encoded as one subject token). Plural, namespace and
/// name stay placeholders. `t` is a parsed template's text, so its braces are placeholders.
fn fill_known(t: &str, cluster: &str, r: &ResourceConfig) -> String {
    t.replace("{cluster}", &encode_token(Some(cluster)))
        .replace("{group}", &encode_token(Some(r.group.as_str()).filter(|g| !g.is_empty())))
        .replace("{version}", &encode_token(Some(&r.version)))
        .replace("{kind}", &encode_token(Some(&r.kind.to_ascii_lowercase())))
}

/// The subject tokens of `t` for `r`: `Some(text)` where known at load, `None` where the
/// token varies.
fn subject_tokens(t: &str, cluster: &str, r: &ResourceConfig) -> Vec<Option<String>> {
    fill_known(t, cluster, r).split('.').map(|token| (!token.contains('{')).then(|| token.to_string())).collect()
}

/// What makes subject template `t` name no valid subject: empty tokens, wildcards (`*`,
/// `>`) or whitespace, which NATS refuses (or reads as wildcards) at publish.
fn bad_subject(t: &str) -> Option<Problem> {
    if t.split('.').any(str::is_empty) {
        Some(problem("", format!("`{t}` has an empty token (a leading, trailing or double `.`)"), "separate non-empty tokens with single dots"))
    } else if t.contains(['*', '>']) || t.contains(char::is_whitespace) {
        Some(problem(
            "",
            format!("`{t}` has a wildcard (`*`, `>`) or whitespace: it cannot name the subject of a message"),
            "use literal tokens and placeholders only, e.g. `deltaship.{cluster}.{group}.{kind}.{namespace}.{name}`",
        ))
    } else {
        None
    }
}

fn check_subject_tokens(out: &mut Vec<Problem>, key: String, t: &Template) {
    if let Some(p) = bad_subject(t.as_str()) {
        out.push(Problem { key, ..p });
    }
}

/// The configured sink of effective route `position`, for errors.
fn route_sink_key(c: &Config, position: usize) -> String {
    if c.routes.is_empty() { "sink".into() } else { format!("routes[{position}].sink") }
}

/// Per route: a created JetStream stream's subjects cover every subject the route
/// publishes (JetStream stores nothing outside them, and the publish would fail): each
/// object's, and each marker's, `<marker subject>.<namespace>.<full|diff>.<started|completed>`
/// (see `Address::marker_destination_of`).
fn check_stream_subjects(out: &mut Vec<Problem>, c: &Config) {
    let mut reported = HashSet::new();
    for (position, route) in c.effective_routes().iter().enumerate() {
        let SinkConfig::Nats(n) = &route.sink else { continue };
        if n.mode != NatsMode::Jetstream || !n.jetstream.create {
            continue;
        }
        let key = route_sink_key(c, position);
        let filters = &n.jetstream.subjects;
        for (i, rc) in c.resources.iter().enumerate().filter(|(_, rc)| route.selects(rc)) {
            let objects = match &rc.subject {
                Some(t) => (format!("resources[{i}].subject"), t, true),
                None => (format!("{key}.subject_template"), &n.subject_template, true),
            };
            for (tkey, t, per_object) in [objects, (format!("{key}.marker_subject_template"), &n.marker_subject_template, false)] {
                // A template that check_per_resource or check_subject_tokens refuses is reported there.
                if bad_subject(t.as_str()).is_some() || (!per_object && t.names_object()) {
                    continue;
                }
                let tokens = subject_tokens(t.as_str(), &c.cluster, rc);
                let subjects: Vec<Vec<Option<String>>> = if per_object {
                    vec![tokens]
                } else {
                    MarkerSlot::suffixes().map(|(mode, phase)| tokens.iter().cloned().chain([None, Some(mode.into()), Some(phase.into())]).collect()).collect()
                };
                let outside = subjects.iter().find(|s| !filters.iter().any(|f| filter_covers(f, s)));
                if let Some(outside) = outside
                    && reported.insert(tkey.clone())
                {
                    let shown: Vec<&str> = outside.iter().map(|t| t.as_deref().unwrap_or("*")).collect();
                    let what =
                        if per_object { "subjects" } else { "marker subjects (the template followed by `.<namespace>.<full|diff>.<started|completed>`)" };
                    out.push(problem(
                        tkey,
                        format!(
                            "{what} such as `{}` (resources[{i}]) fall outside the stream's subjects {filters:?}, so JetStream would not store them",
                            shown.join(".")
                        ),
                        format!("add a filter covering them to `{key}.jetstream.subjects` (e.g. `{}.>`), or change the template", shown[0]),
                    ));
                }
            }
        }
        check_fence_subject(out, c, &key, n);
    }
}

/// With leader election and fencing, a created stream's subjects cover the fence subject
/// (`JetStreamConfig::fence_subject_of`; the lease's namespace may be known only at run
/// time, from `$POD_NAMESPACE`).
fn check_fence_subject(out: &mut Vec<Problem>, c: &Config, key: &str, n: &NatsConfig) {
    let election = &c.leader_election;
    if !election.enabled || !election.fence || n.jetstream.fence_subject.as_deref().is_some_and(|s| bad_subject(s).is_some()) {
        return;
    }
    let namespace = election.namespace.as_deref().unwrap_or("{namespace}");
    let subject = n.jetstream.fence_subject_of(&c.cluster, namespace, &election.lease_name);
    let tokens: Vec<Option<String>> = subject.split('.').map(|t| (t != "%7Bnamespace%7D").then(|| t.to_string())).collect();
    let filters = &n.jetstream.subjects;
    if !filters.iter().any(|f| filter_covers(f, &tokens)) {
        out.push(problem(
            format!("{key}.jetstream.fence_subject"),
            format!("the fence subject `{subject}` falls outside the stream's subjects {filters:?}, so JetStream would not store a new leader's fence record"),
            format!("add a filter covering it to `{key}.jetstream.subjects`, set `{key}.jetstream.fence_subject` to a subject they cover, or set `leader_election.fence = false`"),
        ));
    }
}

/// Per route: two entries of one kind whose events reach one destination while their
/// namespace scopes overlap. Their markers share a key (`/deltaship/sync/<resource>/<ns or
/// *>/...`: the selectors are not part of it), so compaction keeps one entry's and a
/// consumer's `sync.completed` of one removes the other's objects in that scope; objects
/// both select are shipped twice. A destination is the topic on Kafka (a resource's own
/// `topic`, or the sink's template filled in), the whole route on NATS (one stream: its
/// marker subject cannot differ per entry) and on stdout. Different versions of a kind are
/// the same objects.
fn check_shared_markers(out: &mut Vec<Problem>, c: &Config) {
    let destination = |sink: &SinkConfig, r: &ResourceConfig| -> Option<String> {
        match sink {
            SinkConfig::Kafka(k) => Some(fill_known(r.topic.as_ref().unwrap_or(&k.topic_template).as_str(), &c.cluster, r)),
            SinkConfig::Nats(_) | SinkConfig::Http(_) | SinkConfig::Stdout {} => None,
        }
    };
    let mut reported = HashSet::new();
    for route in c.effective_routes() {
        let selected: Vec<(usize, &ResourceConfig)> = c.resources.iter().enumerate().filter(|(_, r)| route.selects(r)).collect();
        for (a, (j, y)) in selected.iter().enumerate() {
            let Some((i, _)) = selected[..a].iter().find(|(_, x)| {
                x.group == y.group && x.kind.eq_ignore_ascii_case(&y.kind) && scopes_overlap(x, y) && destination(&route.sink, x) == destination(&route.sink, y)
            }) else {
                continue;
            };
            if !reported.insert(*j) {
                continue;
            }
            let on = if c.routes.is_empty() { String::new() } else { format!(" on route `{}`", route.name) };
            let separate = match route.sink {
                SinkConfig::Kafka(_) => "give each its own `topic`",
                _ => "ship them on separate routes to separate streams or outputs",
            };
            out.push(problem(
                format!("resources[{j}]"),
                format!(
                    "watches {} in namespaces that resources[{i}] watches too, and ships to the same destination{on}: their sync markers share a key, so a consumer's `sync.completed` of one would remove the other's objects (and objects both select would be shipped twice)",
                    y.kind
                ),
                format!("merge them into one entry (one `namespaces` list, one combined selector), give them disjoint `namespaces`, or {separate}"),
            ));
        }
    }
}

/// Whether two watches of one kind may see the same namespace: either watches every
/// namespace (an empty list), or the lists share one.
fn scopes_overlap(x: &ResourceConfig, y: &ResourceConfig) -> bool {
    x.namespaces.is_empty() || y.namespaces.is_empty() || x.namespaces.iter().any(|ns| y.namespaces.contains(ns))
}

/// Whether the stream subject `filter` (with `*` and `>` wildcards) matches every subject
/// of `tokens` (`None`: any one token).
fn filter_covers(filter: &str, tokens: &[Option<String>]) -> bool {
    let filter: Vec<&str> = filter.split('.').collect();
    for (i, f) in filter.iter().enumerate() {
        if *f == ">" {
            return tokens.len() > i;
        }
        match tokens.get(i) {
            Some(_) if *f == "*" => {}
            Some(Some(token)) if token == f => {}
            _ => return false,
        }
    }
    tokens.len() == filter.len()
}

#[cfg(test)]
mod tests {
    use super::super::validate::tests::{base, keys};
    use super::super::validate::validate;
    use super::*;

    fn nats(extra: serde_json::Value) -> Option<SinkConfig> {
        let mut sink = serde_json::json!({"type": "nats", "url": "nats://n:4222"});
        sink.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(sink).unwrap()
    }

    #[test]
    fn subject_templates_with_wildcards_or_empty_tokens_are_refused() {
        let mut c = base();
        c.sink = nats(serde_json::json!({"subject_template": "x.*.>.{name}", "marker_subject_template": "x..{kind}"}));
        c.resources[0].subject = Template::parse("a b.{name}").ok();
        assert_eq!(keys(&c), ["resources[0].subject", "sink.subject_template", "sink.marker_subject_template"]);
        let shown = validate(&c)[1].to_string();
        assert!(shown.contains("wildcard") && shown.contains("x.*.>.{name}"), "{shown}");
        c.sink = nats(serde_json::json!({"jetstream": {"subjects": ["a.>.b", "a..b", "a*"]}}));
        c.resources[0].subject = None;
        assert_eq!(keys(&c)[..3], ["sink.jetstream.subjects[0]", "sink.jetstream.subjects[1]", "sink.jetstream.subjects[2]"]);
    }

    #[test]
    fn subjects_outside_a_created_stream_are_refused_and_those_inside_pass() {
        let mut c = base();
        c.cluster = "prod".into();
        // Object subjects outside; markers inside.
        c.sink = nats(serde_json::json!({"subject_template": "k8s.{cluster}.{namespace}.{name}", "jetstream": {"subjects": ["deltaship.>"]}}));
        assert_eq!(keys(&c), ["sink.subject_template"]);
        assert!(validate(&c)[0].problem.contains("`k8s.prod.*.*`"), "{:?}", validate(&c));
        // Literal tokens and the cluster, group and kind match literally; the rest only `*` or
        // `>`. Markers take three more tokens: `.<namespace>.<full|diff>.<started|completed>`.
        let nats_with = |filters: &[&str]| {
            nats(serde_json::json!({
                "subject_template": "k8s.{cluster}.{namespace}.{name}",
                "marker_subject_template": "k8s.{cluster}._.{kind}",
                "jetstream": {"subjects": filters},
            }))
        };
        let inside: [&[&str]; 5] = [
            &["k8s.prod.>"],
            &["k8s.>"],
            &[">"],
            &["k8s.prod.*.*", "k8s.prod._.configmap.*.*.*"],
            &["k8s.*.*.*", "k8s.prod._.configmap.*.full.*", "k8s.prod._.configmap.*.diff.>"],
        ];
        for filters in inside {
            c.sink = nats_with(filters);
            assert!(validate(&c).is_empty(), "{filters:?}: {:?}", validate(&c));
        }
        for filter in ["k8s.prod.*", "k8s.staging.>", "k8s.prod.*.*.*", "k8s.prod.x.*"] {
            c.sink = nats_with(&[filter, "k8s.prod._.configmap.>"]);
            assert_eq!(keys(&c), ["sink.subject_template"], "{filter}");
        }
        // Markers without room for their slot's tokens, or with one mode or phase left out.
        for filters in [&["k8s.prod.*.*", "k8s.prod._.configmap"][..], &["k8s.prod.*.*", "k8s.prod._.configmap.*.*.started"]] {
            c.sink = nats_with(filters);
            assert_eq!(keys(&c), ["sink.marker_subject_template"], "{filters:?}");
            let p = &validate(&c)[0];
            assert!(p.problem.contains("`k8s.prod._.configmap.*.") && p.problem.contains("<started|completed>"), "{p}");
        }
        // A resource's own subject is checked as its key; an existing stream or core NATS is not checked.
        c.sink = nats(serde_json::json!({"jetstream": {"subjects": ["deltaship.>"]}}));
        c.resources[0].subject = Template::parse("cm.{name}").ok();
        assert_eq!(keys(&c), ["resources[0].subject"]);
        c.sink = nats(serde_json::json!({"jetstream": {"create": false}}));
        assert!(validate(&c).is_empty());
        c.sink = nats(serde_json::json!({"mode": "core"}));
        assert!(validate(&c).is_empty());
    }

    #[test]
    fn with_fencing_a_created_stream_must_cover_the_fence_subject() {
        let mut c = base();
        c.cluster = "prod".into();
        c.leader_election.enabled = true;
        c.leader_election.namespace = Some("ops".into());
        let with = |jetstream: serde_json::Value| {
            nats(serde_json::json!({
                "subject_template": "k8s.{cluster}.{namespace}.{name}",
                "marker_subject_template": "k8s.{cluster}._.{kind}",
                "jetstream": jetstream,
            }))
        };
        // The default fence subject, deltaship.prod._fence.ops.deltaship, is outside `k8s.>`.
        c.sink = with(serde_json::json!({"subjects": ["k8s.>"]}));
        assert_eq!(keys(&c), ["sink.jetstream.fence_subject"]);
        let p = &validate(&c)[0];
        assert!(p.problem.contains("`deltaship.prod._fence.ops.deltaship`") && p.fix.contains("leader_election.fence = false"), "{p}");
        // A fence subject inside, the default one covered, fencing off, or no election: fine.
        for (jetstream, fence, enabled) in [
            (serde_json::json!({"subjects": ["k8s.>"], "fence_subject": "k8s._fence"}), true, true),
            (serde_json::json!({"subjects": ["k8s.>", "deltaship.*._fence.ops.*"]}), true, true),
            (serde_json::json!({"subjects": ["k8s.>"]}), false, true),
            (serde_json::json!({"subjects": ["k8s.>"]}), true, false),
        ] {
            c.sink = with(jetstream.clone());
            (c.leader_election.fence, c.leader_election.enabled) = (fence, enabled);
            assert!(validate(&c).is_empty(), "{jetstream} fence={fence} election={enabled}: {:?}", validate(&c));
        }
        // Without a namespace in the config (`$POD_NAMESPACE` at run time) any namespace
        // token must be covered; a fence subject must name one subject.
        (c.leader_election.fence, c.leader_election.enabled, c.leader_election.namespace) = (true, true, None);
        c.sink = with(serde_json::json!({"subjects": ["k8s.>", "deltaship.*._fence.ops.*"]}));
        assert_eq!(keys(&c), ["sink.jetstream.fence_subject"]);
        c.sink = with(serde_json::json!({"subjects": ["k8s.>"], "fence_subject": "k8s.*"}));
        assert_eq!(keys(&c), ["sink.jetstream.fence_subject"]);
    }

    #[test]
    fn two_entries_of_one_kind_to_one_destination_are_refused_with_the_fix() {
        let mut c = base();
        let mut second = c.resources[0].clone();
        second.label_selector = Some("app=b".into());
        c.resources.push(second.clone());
        let p = &validate(&c)[0];
        assert_eq!(p.key, "resources[1]");
        assert!(p.problem.contains("resources[0] watches too") && p.problem.contains("sync.completed"), "{p}");
        assert!(p.fix.contains("one entry") && p.fix.contains("disjoint `namespaces`"), "{p}");
        // The same entry twice; namespace lists that overlap, or one watching all namespaces.
        c.resources[1] = c.resources[0].clone();
        assert_eq!(keys(&c), ["resources[1]"]);
        for (a, b) in [(vec!["x", "y"], vec!["y", "z"]), (vec![], vec!["y"]), (vec!["x"], vec![])] {
            c.resources[0].namespaces = a.iter().map(|s| s.to_string()).collect();
            c.resources[1].namespaces = b.iter().map(|s| s.to_string()).collect();
            assert_eq!(keys(&c), ["resources[1]"], "{a:?} {b:?}");
        }
        // Disjoint namespace lists: markers keyed and applied per namespace, allowed.
        c.resources[1].namespaces = vec!["z".into()];
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.resources[0].namespaces.clear();
        c.resources[1] = second.clone();
        // The same on Kafka and NATS (a version of its own does not make another object).
        c.resources[1].version = "v2".into();
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1"})).unwrap();
        assert_eq!(keys(&c), ["resources[1]"]);
        assert!(validate(&c)[0].fix.contains("own `topic`"));
        c.sink = nats(serde_json::json!({}));
        assert_eq!(keys(&c), ["resources[1]"]);
        // A topic of its own, or a template with {version}: different destinations, allowed.
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1"})).unwrap();
        c.resources[1].topic = Template::parse("cm-b").ok();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.resources[1].topic = None;
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1", "topic_template": "t.{group}.{plural}.{version}"})).unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        // Different kinds share a destination safely (keys prefixed); routes are checked each.
        c.sink = None;
        c.resources[1] = ResourceConfig { kind: "Secret".into(), ..second };
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.resources.push(c.resources[0].clone());
        c.routes = serde_json::from_value(serde_json::json!([
            {"name": "a", "sink": {"type": "stdout"}, "resources": ["Secret"]},
            {"name": "b", "sink": {"type": "stdout"}},
        ]))
        .unwrap();
        let p = &validate(&c)[0];
        assert_eq!(p.key, "resources[2]");
        assert!(p.problem.contains("on route `b`"), "{p}");
    }
}
