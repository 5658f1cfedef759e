//! Events built as the pipeline hands them to a sink, for tests that drive a sink directly.

use deltaship::event::{Envelope, EnvelopeKind, WatchAttributes};
use deltaship::model::ResourceType;
use serde_json::json;

/// An event of `kind` about the ConfigMap `key` of `cluster`, with CloudEvent id `id`, to
/// `destination` (a topic or subject); its data names the key and the id.
pub fn configmap_event(cluster: &str, destination: &str, key: &str, id: &str, kind: EnvelopeKind) -> Envelope {
    let configmaps = ResourceType { group: String::new(), version: "v1".into(), kind: "ConfigMap".into(), plural: "configmaps".into(), namespaced: true };
    let mut attributes = WatchAttributes::new(cluster.into(), &configmaps).event(id.into(), kind.event_type(), chrono::Utc::now(), key.into());
    attributes.subject = Some(key.into());
    let data = serde_json::to_vec(&json!({"metadata": {"name": key}, "data": {"id": id}})).unwrap().into();
    Envelope::new(attributes, data, destination.into(), kind, "configmaps".into())
}
