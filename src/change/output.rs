//! What the change stage hands on: object changes and sync markers.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::model::{ChangeType, MarkerPhase, Object, ObjectRef, SyncMode, SyncReason};
use crate::plan::Candidate;

/// What an object change carries: the object, or only its reference when nothing more is
/// known (a delete inferred from a relist: the index keeps fingerprints, not objects).
#[derive(Debug, Clone)]
pub enum Payload {
    Object(Object),
    Reference(ObjectRef),
}

impl Payload {
    pub fn reference(&self) -> &ObjectRef {
        match self {
            Payload::Object(o) => &o.reference,
            Payload::Reference(r) => r,
        }
    }

    pub fn into_reference(self) -> ObjectRef {
        match self {
            Payload::Object(o) => o.reference,
            Payload::Reference(r) => r,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ObjectChange {
    pub change: ChangeType,
    pub payload: Payload,
    /// Set on `synced` changes: the sync they belong to.
    pub sync_id: Option<Arc<str>>,
    /// On `updated` changes where the index keeps content: the JSON shipped before.
    pub previous: Option<Bytes>,
    /// The fingerprint the index keeps for the object after this change (0 on deletes).
    pub fingerprint: u128,
}

/// The contents of an object change parsed into trees, for filters that compare paths.
#[derive(Debug, Default)]
pub struct Trees {
    previous: Option<Value>,
    now: Option<Value>,
}

impl ObjectChange {
    /// The previous and current content as trees (parsed here: only filters on changed
    /// paths need them).
    pub fn trees(&self) -> Trees {
        Trees {
            previous: self.previous.as_ref().and_then(|json| serde_json::from_slice(json).ok()),
            now: match &self.payload {
                Payload::Object(o) => o.value(),
                Payload::Reference(_) => None,
            },
        }
    }

    /// What the routes' filters look at; without `trees`, the contents count as unknown.
    pub fn candidate<'a>(&self, trees: Option<&'a Trees>) -> Candidate<'a> {
        Candidate { change: self.change, previous: trees.and_then(|t| t.previous.as_ref()), now: trees.and_then(|t| t.now.as_ref()) }
    }
}

/// Counts of the object events a sync produced, by type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncCounts {
    pub added: u64,
    pub updated: u64,
    pub deleted: u64,
    pub synced: u64,
}

impl SyncCounts {
    pub(super) fn count(&mut self, t: ChangeType) {
        match t {
            ChangeType::Added => self.added += 1,
            ChangeType::Updated => self.updated += 1,
            ChangeType::Deleted => self.deleted += 1,
            ChangeType::Synced => self.synced += 1,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Marker {
    pub phase: MarkerPhase,
    pub sync_id: Arc<str>,
    pub reason: SyncReason,
    pub mode: SyncMode,
    /// On `completed`: the list's own resourceVersion (the `Observed::Bookmark` the watch
    /// sends before `InitDone`); for a resume, the checkpoint's version; for a resync, which
    /// lists nothing, the highest resourceVersion among the indexed objects. Empty on
    /// `started`.
    pub resource_version: String,
    /// Set on `completed`.
    pub counts: Option<SyncCounts>,
    /// Set on `completed`: every indexed object's key and digest term
    /// (`model::digest::term`), the state consumers hold once they applied the marker.
    pub state: Option<StateTerms>,
}

/// Object keys and their digest terms (shared by the routes of a watch). A `Vec` behind the
/// `Arc`: made from the index at once, with no second copy of 100,000 terms at a sync's end.
pub type StateTerms = Arc<Vec<(String, u128)>>;

#[derive(Debug, Clone)]
pub enum Change {
    Object(ObjectChange),
    Marker(Marker),
}
