//! The event stage: changes and markers as CloudEvents, routed, ready for a sink.

mod attributes;
#[cfg(test)]
pub(crate) mod fixtures;
mod id;
mod knative;
mod time;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::change::{Change, Marker, ObjectChange, Payload, StateTerms};

use crate::config::PayloadMode;
use crate::model::MarkerSlot;
use crate::model::digest::StateSum;
use crate::model::{ChangeType, MarkerPhase, Object, ObjectRef, ResourceType, SyncReason, WatchSeq};
use crate::plan::{Output, Scope};

pub use attributes::Attributes;
pub use id::event_id;
pub use time::EventTime;

const JSON: &str = "application/json";
/// `updated` events of resources with `payload = "patch"`: RFC 6902 from the previous event.
pub const JSON_PATCH: &str = "application/json-patch+json";

/// A CloudEvent with where it goes.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The attributes and extensions (`datacontenttype` included). The data is `data`.
    pub attributes: Attributes,
    /// The event's data as JSON bytes, serialized once where the event is built (in the
    /// watch task, while the object is hot): the sinks send these bytes as they are.
    pub data: Bytes,
    /// The Kafka topic or NATS subject.
    pub destination: Arc<str>,
    pub kind: EnvelopeKind,
    /// The `resource` metric label.
    pub resource: Arc<str>,
    /// True on the `sync.completed` marker of a watch's first sync (initial, or resume):
    /// once the sink has it, that watch counts as synced for /readyz.
    pub completes_initial_sync: bool,
    /// Where the event stands in its watch's order, when its route keeps a checkpoint: its
    /// acknowledgement moves the checkpoint.
    pub position: Option<WatchSeq>,
    /// When the watch event the event was built from arrived (set by the worker): the lag
    /// histogram measures from here to the sink's acknowledgement.
    pub observed: Option<Instant>,
    /// On a `sync.completed` marker that carries `state`: every object's digest term by
    /// partition key, so that a sink that copies the marker to each partition gives each
    /// copy its own partition's count and digest.
    pub state: Option<StateTerms>,
}

impl Envelope {
    /// An event going to `destination`, not yet placed in its watch's order (`position`,
    /// `observed` and `state` unset) and not completing a sync.
    pub fn new(attributes: Attributes, data: Bytes, destination: Arc<str>, kind: EnvelopeKind, resource: Arc<str>) -> Envelope {
        Envelope { attributes, data, destination, kind, resource, completes_initial_sync: false, position: None, observed: None, state: None }
    }

    /// The partition key (`partitionkey` extension): one per object, or the marker key.
    pub fn key(&self) -> &str {
        &self.attributes.partitionkey
    }
}

/// What every event of one watch carries alike, derived once per watch rather than per
/// event: the cluster, the CloudEvents `source`, the `apiversion` and `kind` extensions,
/// and the `resource` metric label, each one allocation shared by all the watch's events.
#[derive(Debug, Clone)]
pub struct WatchAttributes {
    pub cluster: Arc<str>,
    /// The `resource` metric label (`ResourceType::label`).
    pub resource: Arc<str>,
    source: Arc<str>,
    api_version: Arc<str>,
    kind: Arc<str>,
}

impl WatchAttributes {
    pub fn new(cluster: Arc<str>, resource: &ResourceType) -> WatchAttributes {
        WatchAttributes {
            source: resource.source(&cluster).into(),
            api_version: resource.api_version().into(),
            kind: resource.kind.as_str().into(),
            resource: resource.label().into(),
            cluster,
        }
    }

    /// The attributes of an event of this watch: the watch's own values, the given ones,
    /// and none of an object's (no subject, no object identity, no sync id).
    pub fn event(&self, id: String, ty: &'static str, now: DateTime<Utc>, partitionkey: String) -> Attributes {
        Attributes {
            id,
            ty,
            source: self.source.clone(),
            subject: None,
            time: EventTime::new(now),
            datacontenttype: JSON,
            dataschema: None,
            cluster: self.cluster.clone(),
            apiversion: self.api_version.clone(),
            kind: self.kind.clone(),
            object: None,
            syncid: None,
            partitionkey,
            truncated: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeKind {
    Object(ChangeType),
    /// A sync marker: it goes to every partition, and only after every earlier event.
    Marker(MarkerPhase),
}

impl EnvelopeKind {
    /// The `type` metric label.
    pub fn label(self) -> &'static str {
        match self {
            EnvelopeKind::Object(t) => t.as_str(),
            EnvelopeKind::Marker(MarkerPhase::Started) => "sync.started",
            EnvelopeKind::Marker(MarkerPhase::Completed) => "sync.completed",
        }
    }

    /// The CloudEvents `type`: `dev.deltaship.` then `object.<change>` or the marker's
    /// label.
    pub fn event_type(self) -> &'static str {
        match self {
            EnvelopeKind::Object(ChangeType::Added) => "dev.deltaship.object.added",
            EnvelopeKind::Object(ChangeType::Updated) => "dev.deltaship.object.updated",
            EnvelopeKind::Object(ChangeType::Deleted) => "dev.deltaship.object.deleted",
            EnvelopeKind::Object(ChangeType::Synced) => "dev.deltaship.object.synced",
            EnvelopeKind::Marker(MarkerPhase::Started) => "dev.deltaship.sync.started",
            EnvelopeKind::Marker(MarkerPhase::Completed) => "dev.deltaship.sync.completed",
        }
    }
}

/// Builds the envelope of a change of the watch `scope` (whose shared attributes are
/// `watch`) observed at `now`, shaped and routed for `output`.
pub fn build(watch: &WatchAttributes, scope: &Scope, output: &Output, change: Change, now: DateTime<Utc>) -> Envelope {
    match change {
        Change::Object(c) => object_event(watch, scope, output, c, now),
        Change::Marker(m) => marker_event(watch, scope, output, m, now),
    }
}

fn object_event(watch: &WatchAttributes, scope: &Scope, output: &Output, c: ObjectChange, now: DateTime<Utc>) -> Envelope {
    let kind = EnvelopeKind::Object(c.change);
    // An object too deep to ship whole goes as its reference, marked `truncated`.
    let truncated = matches!(&c.payload, Payload::Object(o) if o.truncated);
    let payload = match c.payload {
        Payload::Object(o) if o.truncated => Payload::Reference(o.reference),
        payload => payload,
    };
    let c = ObjectChange { payload, ..c };
    // What depends on the object's identity is derived first; the identity then moves
    // into the attributes (no copy of the reference).
    let r = c.payload.reference();
    let key = r.key();
    let reference = output.payload == PayloadMode::Reference || matches!(c.payload, Payload::Reference(_));
    let partitionkey = output.address.key(&key);
    let (ty, source, subject) = match &output.knative_source {
        None => (kind.event_type(), watch.source.clone(), key),
        Some(api_server) => knative::attributes(c.change, reference, api_server, &scope.resource, r),
    };
    let destination = output.address.object_destination(r);
    let sync_id = c.sync_id.as_deref().unwrap_or("");
    let id = event_id(&[&watch.cluster, &watch.resource, &r.uid, &r.resource_version, ty, sync_id]);
    let mut attributes = watch.event(id, ty, now, partitionkey);
    attributes.source = source;
    attributes.subject = Some(subject);
    attributes.syncid = c.sync_id;
    attributes.truncated = truncated;
    let (data, r) = match (output.payload, c.payload, c.previous) {
        (PayloadMode::Reference, payload, _) | (_, payload @ Payload::Reference(_), _) => {
            let r = payload.into_reference();
            let (data, schema) = match output.knative_source {
                Some(_) => (knative::reference_data(&watch.api_version, &scope.resource, &r), "knative-reference.schema.json"),
                None => (reference_data(&watch.api_version, &watch.kind, &r), "reference.schema.json"),
            };
            attributes.dataschema = dataschema(output, schema);
            (to_bytes(&data), r)
        }
        (PayloadMode::Patch, Payload::Object(o), Some(previous)) => match patch(&previous, &o) {
            Some(patch) => {
                attributes.datacontenttype = JSON_PATCH;
                (patch, o.reference)
            }
            None => (o.json, o.reference),
        },
        (_, Payload::Object(o), _) => (o.json, o.reference),
    };
    attributes.object = Some(r);
    Envelope::new(attributes, data, destination, kind, watch.resource.clone())
}

/// The same event as a reference (identity only), marked with the extension
/// `truncated = true`: what the `reference` oversize policy ships when the sink refuses the
/// whole object. None for markers and events already truncated.
pub fn truncated(env: &Envelope) -> Option<Envelope> {
    let a = &env.attributes;
    let r = a.object.as_ref().filter(|_| !a.truncated)?;
    let mut attributes = a.clone();
    attributes.datacontenttype = JSON;
    attributes.truncated = true;
    Some(Envelope { attributes, data: to_bytes(&reference_data(&a.apiversion, &a.kind, r)), ..env.clone() })
}

/// The `dataschema` attribute: `file` (one of the repository's `schemas/events/`) under the
/// configured `dataschema_base`, when one is set (checked as a URL at start-up).
fn dataschema(output: &Output, file: &str) -> Option<url::Url> {
    output.dataschema_base.as_deref().and_then(|base| url::Url::parse(base).ok()?.join(file).ok())
}

/// The JSON Patch from the `previous` JSON to the object's; None when either cannot be
/// parsed into a tree (a number beyond serde_json's range): the whole object goes instead.
fn patch(previous: &[u8], o: &Object) -> Option<Bytes> {
    let before: Value = serde_json::from_slice(previous).ok()?;
    Some(to_bytes(&json_patch::diff(&before, &o.value()?)))
}

/// Event data as JSON bytes, holding no more memory than they need (they may wait in a
/// queue for long).
fn to_bytes(data: &impl Serialize) -> Bytes {
    let mut bytes = serde_json::to_vec(data).expect("event data always serializes");
    bytes.shrink_to_fit();
    bytes.into()
}

/// The data of a reference event: the object's identity.
fn reference_data(api_version: &str, kind: &str, r: &ObjectRef) -> Value {
    let mut v = json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": r.name,
        "uid": r.uid,
        "resourceVersion": r.resource_version,
    });
    if let Some(ns) = &r.namespace {
        v["namespace"] = json!(ns);
    }
    v
}

fn marker_event(watch: &WatchAttributes, scope: &Scope, output: &Output, m: Marker, now: DateTime<Utc>) -> Envelope {
    let kind = EnvelopeKind::Marker(m.phase);
    let ty = kind.event_type();
    let scope_ns = scope.namespace.as_deref().unwrap_or("");
    let id = event_id(&[&watch.cluster, &watch.resource, scope_ns, &m.sync_id, ty]);
    let mut data = json!({
        "syncId": m.sync_id.as_ref(),
        "reason": m.reason,
        "mode": m.mode,
        "resource": {
            "group": scope.resource.group,
            "version": scope.resource.version,
            "kind": scope.resource.kind,
            "plural": scope.resource.plural,
        },
        "resourceVersion": m.resource_version,
    });
    for (field, value) in [("namespace", &scope.namespace), ("labelSelector", &scope.label_selector), ("fieldSelector", &scope.field_selector)] {
        if let Some(v) = value {
            data[field] = json!(v);
        }
    }
    if let Some(counts) = &m.counts {
        data["counts"] = json!(counts);
    }
    // The state consumers hold once they applied the marker, when they hold every change of
    // the watch (a route's filters would leave some out).
    let state = m.state.filter(|_| output.ships_everything()).map(|terms| {
        data["state"] = terms.iter().map(|(_, t)| *t).collect::<StateSum>().to_json();
        // Keyed by the records' keys: the same terms when those are the object keys.
        if output.address.keys_are_object_keys() { terms } else { Arc::new(terms.iter().map(|(key, t)| (output.address.key(key), *t)).collect()) }
    });
    let completes_initial_sync = m.phase == MarkerPhase::Completed && matches!(m.reason, SyncReason::Initial | SyncReason::Resume);
    let slot = MarkerSlot { namespace: scope.namespace.as_deref(), mode: m.mode, phase: m.phase };
    let mut attributes = watch.event(id, ty, now, output.address.marker_key(slot));
    attributes.dataschema = dataschema(output, "marker.schema.json");
    attributes.syncid = Some(m.sync_id);
    let destination = output.address.marker_destination_of(slot);
    Envelope { completes_initial_sync, state, ..Envelope::new(attributes, to_bytes(&data), destination, kind, watch.resource.clone()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::config::Template;
    use crate::model::SyncMode;
    use crate::model::fixtures::{configmap, configmaps};

    fn scope() -> Scope {
        Scope {
            index: 0,
            resource: configmaps(),
            namespace: None,
            label_selector: None,
            field_selector: None,
            redaction: Default::default(),
            ignore_fields: vec![],
            scanner: crate::json::Scanner::new(&[], &[]).unwrap(),
            relist: SyncMode::Diff,
            resync: None,
            state_markers: None,
            outputs: vec![],
        }
    }

    fn watch() -> WatchAttributes {
        WatchAttributes::new("c".into(), &configmaps())
    }

    fn output(payload: PayloadMode) -> Output {
        Output {
            route: 0,
            route_name: "default".into(),
            payload,
            filters: Default::default(),
            knative_source: None,
            dataschema_base: None,
            address: Address::topic("c", &configmaps(), &Template::parse("t.{plural}").unwrap()),
        }
    }

    fn updated(previous: Option<Value>) -> Change {
        Change::Object(ObjectChange {
            change: ChangeType::Updated,
            payload: Payload::Object(configmap("a", "u1", "2", json!({"v": "new"}))),
            sync_id: None,
            previous: previous.map(|v| serde_json::to_vec(&v).unwrap().into()),
            fingerprint: 0,
        })
    }

    fn data(env: &Envelope) -> Value {
        serde_json::from_slice(&env.data).expect("JSON data")
    }

    #[test]
    fn patch_payloads_carry_a_json_patch_from_the_previous_content() {
        let before = configmap("a", "u1", "1", json!({"v": "old"})).value().unwrap();
        let env = build(&watch(), &scope(), &output(PayloadMode::Patch), updated(Some(before)), Utc::now());
        assert_eq!(env.attributes.datacontenttype, JSON_PATCH);
        let patch = data(&env);
        assert!(patch.as_array().unwrap().contains(&json!({"op": "replace", "path": "/data/v", "value": "new"})), "{patch}");
        assert!(patch.as_array().unwrap().contains(&json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "2"})), "{patch}");
    }

    #[test]
    fn a_truncated_event_keeps_its_id_and_carries_the_reference() {
        let env = build(&watch(), &scope(), &output(PayloadMode::Object), updated(None), Utc::now());
        let t = truncated(&env).unwrap();
        assert_eq!(t.attributes.id, env.attributes.id);
        assert!(t.attributes.truncated);
        assert_eq!(t.attributes.datacontenttype, JSON);
        assert_eq!(data(&t), json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "2"}));
        assert!(truncated(&t).is_none(), "never truncated twice");
    }

    /// An object too deep to ship whole goes as its reference marked `truncated`, in every
    /// payload mode, with the id the whole object would have had.
    #[test]
    fn an_object_too_deep_to_ship_whole_is_shipped_as_a_truncated_reference() {
        let whole = build(&watch(), &scope(), &output(PayloadMode::Object), updated(None), Utc::now());
        for mode in [PayloadMode::Object, PayloadMode::Patch, PayloadMode::Reference] {
            let Change::Object(mut c) = updated(Some(json!({"v": "old"}))) else { unreachable!() };
            if let Payload::Object(o) = &mut c.payload {
                o.truncated = true;
                o.json = Bytes::new();
            }
            let env = build(&watch(), &scope(), &output(mode), Change::Object(c), Utc::now());
            assert!(env.attributes.truncated, "{mode:?}");
            assert_eq!((env.attributes.datacontenttype, &env.attributes.id), (JSON, &whole.attributes.id), "{mode:?}");
            assert_eq!(data(&env), json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "2"}));
        }
    }

    /// A `completed` marker carries the count and digest of the state consumers then hold,
    /// and the terms by partition key for sinks that split it; not on a route whose filters
    /// leave changes out (its consumers hold less).
    #[test]
    fn a_completed_marker_carries_the_count_and_digest_unless_a_filter_leaves_changes_out() {
        let terms: StateTerms = vec![("ns/a".to_string(), 5u128), ("ns/b".to_string(), u128::MAX)].into();
        let marker = Marker {
            phase: MarkerPhase::Completed,
            sync_id: "s".into(),
            reason: SyncReason::Initial,
            mode: SyncMode::Full,
            resource_version: "9".into(),
            counts: Some(Default::default()),
            state: Some(terms),
        };
        let env = build(&watch(), &scope(), &output(PayloadMode::Object), Change::Marker(marker.clone()), Utc::now());
        assert_eq!(data(&env)["state"], json!({"count": 2, "digest": format!("{:032x}", 4u128)}));
        let by_key: Vec<(String, u128)> = env.state.as_ref().unwrap().to_vec();
        assert_eq!(by_key, [("configmaps/ns/a".to_string(), 5), ("configmaps/ns/b".to_string(), u128::MAX)], "by partition key");
        let mut filtered = output(PayloadMode::Object);
        filtered.filters[1] = crate::plan::Filter::new(&serde_json::from_value(json!({"types": ["added"]})).unwrap());
        let env = build(&watch(), &scope(), &filtered, Change::Marker(marker), Utc::now());
        assert!(data(&env).get("state").is_none() && env.state.is_none());
    }

    #[test]
    fn object_and_reference_payloads() {
        let env = build(&watch(), &scope(), &output(PayloadMode::Object), updated(None), Utc::now());
        assert_eq!(env.attributes.datacontenttype, JSON);
        assert_eq!(data(&env)["data"]["v"], "new");
        let env = build(&watch(), &scope(), &output(PayloadMode::Reference), updated(None), Utc::now());
        assert_eq!(data(&env), json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "2"}));
    }

    #[test]
    fn references_name_their_schema_when_a_base_is_configured() {
        let mut with_base = output(PayloadMode::Reference);
        with_base.dataschema_base = Some("https://schemas.example.com/deltaship/events/".into());
        let env = build(&watch(), &scope(), &with_base, updated(None), Utc::now());
        assert_eq!(env.attributes.dataschema.as_ref().map(|u| u.as_str()), Some("https://schemas.example.com/deltaship/events/reference.schema.json"));
        with_base.payload = PayloadMode::Object;
        assert_eq!(build(&watch(), &scope(), &with_base, updated(None), Utc::now()).attributes.dataschema, None, "objects have no schema of ours");
        let env = build(&watch(), &scope(), &output(PayloadMode::Reference), updated(None), Utc::now());
        assert_eq!(env.attributes.dataschema, None, "no base, no dataschema");
    }

    #[test]
    fn event_types_are_the_prefix_then_the_change_or_the_marker() {
        for t in [ChangeType::Added, ChangeType::Updated, ChangeType::Deleted, ChangeType::Synced] {
            assert_eq!(EnvelopeKind::Object(t).event_type(), format!("dev.deltaship.object.{}", t.as_str()));
        }
        for p in [MarkerPhase::Started, MarkerPhase::Completed] {
            assert_eq!(EnvelopeKind::Marker(p).event_type(), format!("dev.deltaship.{}", EnvelopeKind::Marker(p).label()));
        }
    }

    #[test]
    fn the_events_of_a_watch_share_its_resource_label_and_carry_its_attributes() {
        let w = watch();
        let a = build(&w, &scope(), &output(PayloadMode::Object), updated(None), Utc::now());
        let b = build(&w, &scope(), &output(PayloadMode::Reference), updated(None), Utc::now());
        assert!(Arc::ptr_eq(&a.resource, &b.resource), "one label for the watch, not one per event");
        assert_eq!(&*a.resource, "configmaps");
        assert_eq!(&*a.attributes.source, "//c/api/v1/configmaps");
        assert_eq!(a.attributes.ty, "dev.deltaship.object.updated");
        assert_eq!(a.attributes.subject.as_deref(), Some("ns/a"));
        assert_eq!(&*a.attributes.apiversion, "v1");
        assert_eq!(&*a.attributes.cluster, "c");
        assert!(Arc::ptr_eq(&a.attributes.kind, &b.attributes.kind), "one kind for the watch");
        // The id over the same parts as before the attributes were shared: ids never change.
        assert_eq!(a.attributes.id, event_id(&["c", "configmaps", "u1", "2", "dev.deltaship.object.updated", ""]));
    }
}
