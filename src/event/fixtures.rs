//! Events as the pipeline hands them to a sink, for the unit tests of the stages after it.

use bytes::Bytes;

use super::{Envelope, EnvelopeKind, WatchAttributes};
use crate::model::fixtures::configmaps;

/// An event of `kind` about the ConfigMap `key` of cluster `c`, with CloudEvent id `id`, to
/// the topic `topic`; its data is `{}`.
pub(crate) fn configmap_event(key: &str, id: &str, kind: EnvelopeKind) -> Envelope {
    let mut attributes = WatchAttributes::new("c".into(), &configmaps()).event(id.into(), kind.event_type(), chrono::Utc::now(), key.into());
    attributes.subject = Some(key.into());
    Envelope::new(attributes, Bytes::from_static(b"{}"), "topic".into(), kind, "configmaps".into())
}
