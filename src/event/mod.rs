//! The event stage: changes and markers as CloudEvents, routed, ready for a sink.

mod id;
mod knative;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use cloudevents::event::AttributesWriter;
use cloudevents::{Event, EventBuilder, EventBuilderV10};
use serde::Serialize;
use serde_json::{Value, json};

use crate::change::{Change, Marker, ObjectChange, Payload};

use crate::config::PayloadMode;
use crate::model::MarkerSlot;
use crate::model::{ChangeType, MarkerPhase, Object, ObjectRef, Position, ResourceType, SyncReason};
use crate::plan::{Output, Scope};

pub use id::event_id;

const JSON: &str = "application/json";
/// `updated` events of resources with `payload = "patch"`: RFC 6902 from the previous event.
pub const JSON_PATCH: &str = "application/json-patch+json";

/// A CloudEvent with where it goes.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The attributes and extensions (`datacontenttype` included). It holds no data: that
    /// is `data`.
    pub event: Event,
    /// The event's data as JSON bytes, serialized once where the event is built (in the
    /// watch task, while the object is hot): the sinks send these bytes as they are.
    pub data: Bytes,
    /// The Kafka topic or NATS subject.
    pub destination: Arc<str>,
    /// The partition key (`partitionkey` extension): one per object, or the marker key.
    pub key: String,
    pub kind: EnvelopeKind,
    /// The `resource` metric label.
    pub resource: Arc<str>,
    /// True on the `sync.completed` marker of a watch's first sync (initial, or resume):
    /// once the sink has it, that watch counts as synced for /readyz.
    pub completes_initial_sync: bool,
    /// Where the event stands in its watch's order, when its route keeps a checkpoint: its
    /// acknowledgement moves the checkpoint.
    pub position: Option<Position>,
    /// When the watch event the event was built from arrived (set by the worker): the lag
    /// histogram measures from here to the sink's acknowledgement.
    pub observed: Option<Instant>,
}

/// What every event of one watch carries alike, derived once per watch rather than per
/// event: the cluster, the CloudEvents `source`, the `apiversion` extension, and the
/// `resource` metric label (one allocation shared by all the watch's envelopes).
#[derive(Debug, Clone)]
pub struct WatchAttributes {
    pub cluster: Arc<str>,
    /// The `resource` metric label (`ResourceType::label`).
    pub resource: Arc<str>,
    source: String,
    api_version: String,
}

impl WatchAttributes {
    pub fn new(cluster: Arc<str>, resource: &ResourceType) -> WatchAttributes {
        WatchAttributes { source: resource.source(&cluster), api_version: resource.api_version(), resource: resource.label().into(), cluster }
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

#[derive(Debug, thiserror::Error)]
#[error("cannot build the CloudEvent of {key}: {source}")]
pub struct BuildError {
    pub key: String,
    #[source]
    pub source: cloudevents::event::EventBuilderError,
}

/// Builds the envelope of a change of the watch `scope` (whose shared attributes are
/// `watch`) observed at `now`, shaped and routed for `output`.
pub fn build(watch: &WatchAttributes, scope: &Scope, output: &Output, change: Change, now: DateTime<Utc>) -> Result<Envelope, BuildError> {
    match change {
        Change::Object(c) => object_event(watch, scope, output, c, now),
        Change::Marker(m) => marker_event(watch, scope, output, m, now),
    }
}

fn object_event(watch: &WatchAttributes, scope: &Scope, output: &Output, c: ObjectChange, now: DateTime<Utc>) -> Result<Envelope, BuildError> {
    let kind = EnvelopeKind::Object(c.change);
    // The attributes are read from the payload's reference before the payload is taken
    // for the data (no copy of the reference).
    let r = c.payload.reference();
    let key = r.key();
    let reference = output.payload == PayloadMode::Reference || matches!(c.payload, Payload::Reference(_));
    let (ty, source, subject) = match &output.knative_source {
        None => (kind.event_type().to_owned(), watch.source.clone(), key.clone()),
        Some(api_server) => knative::attributes(c.change, reference, api_server, &scope.resource, r),
    };
    let destination = output.address.object_destination(r);
    let partition_key = output.address.key(&key);
    let sync_id = c.sync_id.as_deref().unwrap_or("");
    let id = event_id(&[&watch.cluster, &watch.resource, &r.uid, &r.resource_version, &ty, sync_id]);
    let mut b = EventBuilderV10::new()
        .id(id)
        .ty(ty)
        .source(source)
        .subject(subject)
        .time(now)
        .extension("cluster", &*watch.cluster)
        .extension("apiversion", watch.api_version.as_str())
        .extension("kind", scope.resource.kind.as_str())
        .extension("name", r.name.as_str())
        .extension("uid", r.uid.as_str())
        .extension("resourceversion", r.resource_version.as_str())
        .extension("partitionkey", partition_key.as_str());
    if let Some(ns) = &r.namespace {
        b = b.extension("namespace", ns.as_str());
    }
    if let Some(s) = &c.sync_id {
        b = b.extension("syncid", s.as_ref());
    }
    let mut event = b.build().map_err(|source| BuildError { key, source })?;
    let (data, content_type) = match (output.payload, c.payload, c.previous) {
        (PayloadMode::Reference, payload, _) | (_, payload @ Payload::Reference(_), _) => match output.knative_source {
            Some(_) => (to_bytes(&knative::reference_data(&watch.api_version, &scope.resource, payload.reference())), JSON),
            None => (to_bytes(&reference_data(watch, scope, payload.reference())), JSON),
        },
        (PayloadMode::Patch, Payload::Object(o), Some(previous)) => match patch(&previous, &o) {
            Some(patch) => (patch, JSON_PATCH),
            None => (o.json, JSON),
        },
        (_, Payload::Object(o), _) => (o.json, JSON),
    };
    event.set_datacontenttype(Some(content_type));
    if reference {
        let schema = if output.knative_source.is_some() { "knative-reference.schema.json" } else { "reference.schema.json" };
        set_dataschema(&mut event, output, schema);
    }
    Ok(Envelope {
        event,
        data,
        destination,
        key: partition_key,
        kind,
        resource: watch.resource.clone(),
        completes_initial_sync: false,
        position: None,
        observed: None,
    })
}

/// The same event as a reference (identity only), marked with the extension
/// `truncated = true`: what the `reference` oversize policy ships when the sink refuses the
/// whole object. None for markers and events that already are references.
pub fn truncated(env: &Envelope) -> Option<Envelope> {
    if matches!(env.kind, EnvelopeKind::Marker(_)) || env.event.extension("truncated").is_some() {
        return None;
    }
    let ext = |name: &str| env.event.extension(name).map(|v| v.to_string());
    let mut data = json!({
        "apiVersion": ext("apiversion")?,
        "kind": ext("kind")?,
        "name": ext("name")?,
        "uid": ext("uid")?,
        "resourceVersion": ext("resourceversion")?,
    });
    if let Some(ns) = ext("namespace") {
        data["namespace"] = json!(ns);
    }
    let mut event = env.event.clone();
    event.set_datacontenttype(Some(JSON));
    event.set_extension("truncated", true);
    Some(Envelope { event, data: to_bytes(&data), ..env.clone() })
}

/// The `dataschema` attribute: `file` (one of the repository's `schemas/events/`) under the
/// configured `dataschema_base`, when one is set (checked as a URL at start-up).
fn set_dataschema(event: &mut Event, output: &Output, file: &str) {
    if let Some(url) = output.dataschema_base.as_deref().and_then(|base| url::Url::parse(base).ok()?.join(file).ok()) {
        event.set_dataschema(Some(url));
    }
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

fn reference_data(watch: &WatchAttributes, scope: &Scope, r: &ObjectRef) -> Value {
    let mut v = json!({
        "apiVersion": watch.api_version,
        "kind": scope.resource.kind,
        "name": r.name,
        "uid": r.uid,
        "resourceVersion": r.resource_version,
    });
    if let Some(ns) = &r.namespace {
        v["namespace"] = json!(ns);
    }
    v
}

fn marker_event(watch: &WatchAttributes, scope: &Scope, output: &Output, m: Marker, now: DateTime<Utc>) -> Result<Envelope, BuildError> {
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
    let completes_initial_sync = m.phase == MarkerPhase::Completed && matches!(m.reason, SyncReason::Initial | SyncReason::Resume);
    let slot = MarkerSlot { namespace: scope.namespace.as_deref(), mode: m.mode, phase: m.phase };
    let key = output.address.marker_key(slot);
    let mut event = EventBuilderV10::new()
        .id(id)
        .ty(ty)
        .source(watch.source.as_str())
        .time(now)
        .extension("cluster", &*watch.cluster)
        .extension("apiversion", watch.api_version.as_str())
        .extension("kind", scope.resource.kind.as_str())
        .extension("syncid", m.sync_id.as_ref())
        .extension("partitionkey", key.as_str())
        .build()
        .map_err(|source| BuildError { key: key.clone(), source })?;
    event.set_datacontenttype(Some(JSON));
    set_dataschema(&mut event, output, "marker.schema.json");
    Ok(Envelope {
        event,
        data: to_bytes(&data),
        destination: output.address.marker_destination_of(slot),
        key,
        kind,
        resource: watch.resource.clone(),
        completes_initial_sync,
        position: None,
        observed: None,
    })
}

#[cfg(test)]
mod tests {
    use cloudevents::AttributesReader;

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
        let env = build(&watch(), &scope(), &output(PayloadMode::Patch), updated(Some(before)), Utc::now()).unwrap();
        assert_eq!(env.event.datacontenttype(), Some(JSON_PATCH));
        let patch = data(&env);
        assert!(patch.as_array().unwrap().contains(&json!({"op": "replace", "path": "/data/v", "value": "new"})), "{patch}");
        assert!(patch.as_array().unwrap().contains(&json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "2"})), "{patch}");
    }

    #[test]
    fn a_truncated_event_keeps_its_id_and_carries_the_reference() {
        let env = build(&watch(), &scope(), &output(PayloadMode::Object), updated(None), Utc::now()).unwrap();
        let t = truncated(&env).unwrap();
        assert_eq!(t.event.id(), env.event.id());
        assert_eq!(t.event.extension("truncated").map(|v| v.to_string()).as_deref(), Some("true"));
        assert_eq!(t.event.datacontenttype(), Some(JSON));
        assert_eq!(data(&t), json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "2"}));
        assert!(truncated(&t).is_none(), "never truncated twice");
    }

    #[test]
    fn object_and_reference_payloads() {
        let env = build(&watch(), &scope(), &output(PayloadMode::Object), updated(None), Utc::now()).unwrap();
        assert_eq!(env.event.datacontenttype(), Some(JSON));
        assert_eq!(data(&env)["data"]["v"], "new");
        let env = build(&watch(), &scope(), &output(PayloadMode::Reference), updated(None), Utc::now()).unwrap();
        assert_eq!(data(&env), json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "2"}));
    }

    #[test]
    fn references_name_their_schema_when_a_base_is_configured() {
        let mut with_base = output(PayloadMode::Reference);
        with_base.dataschema_base = Some("https://schemas.example.com/deltaship/events/".into());
        let env = build(&watch(), &scope(), &with_base, updated(None), Utc::now()).unwrap();
        assert_eq!(env.event.dataschema().map(|u| u.as_str()), Some("https://schemas.example.com/deltaship/events/reference.schema.json"));
        with_base.payload = PayloadMode::Object;
        assert_eq!(build(&watch(), &scope(), &with_base, updated(None), Utc::now()).unwrap().event.dataschema(), None, "objects have no schema of ours");
        let env = build(&watch(), &scope(), &output(PayloadMode::Reference), updated(None), Utc::now()).unwrap();
        assert_eq!(env.event.dataschema(), None, "no base, no dataschema");
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
        let a = build(&w, &scope(), &output(PayloadMode::Object), updated(None), Utc::now()).unwrap();
        let b = build(&w, &scope(), &output(PayloadMode::Reference), updated(None), Utc::now()).unwrap();
        assert!(Arc::ptr_eq(&a.resource, &b.resource), "one label for the watch, not one per event");
        assert_eq!(&*a.resource, "configmaps");
        assert_eq!(a.event.source().to_string(), "//c/api/v1/configmaps");
        assert_eq!(a.event.ty(), "dev.deltaship.object.updated");
        assert_eq!(a.event.subject(), Some("ns/a"));
        assert_eq!(a.event.extension("apiversion").map(|v| v.to_string()).as_deref(), Some("v1"));
        assert_eq!(a.event.extension("cluster").map(|v| v.to_string()).as_deref(), Some("c"));
        // The id over the same parts as before the attributes were shared: ids never change.
        assert_eq!(a.event.id(), event_id(&["c", "configmaps", "u1", "2", "dev.deltaship.object.updated", ""]));
    }
}
