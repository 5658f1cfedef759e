//! The change stage: watch events classified against the index into changes and markers.

mod classify;
mod filter;
mod fingerprint;
mod index;
mod object;

use std::sync::Arc;

use serde::Serialize;

pub use classify::Classifier;
pub use filter::Filter;
pub use fingerprint::{Fingerprinter, Serialized};
pub use index::{Entry, Index};
pub use object::{Object, ObjectError, ObjectRef};

use crate::config::SyncMode;
#[cfg(test)]
pub(crate) use object::fixtures;

/// A watch event with the object already decoded (kube-runtime's `watcher::Event`).
#[derive(Debug)]
pub enum WatchEvent {
    /// A (re)list starts.
    Init,
    /// One object of the list.
    InitApply(Object),
    /// The list is complete: indexed objects it did not contain are gone.
    InitDone,
    /// ADDED or MODIFIED.
    Apply(Object),
    /// DELETED, with the object's final state.
    Delete(Object),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeType {
    Added,
    Updated,
    Deleted,
    Synced,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "added",
            ChangeType::Updated => "updated",
            ChangeType::Deleted => "deleted",
            ChangeType::Synced => "synced",
        }
    }
}

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
}

#[derive(Debug, Clone)]
pub struct ObjectChange {
    pub change: ChangeType,
    pub payload: Payload,
    /// Set on `synced` changes: the sync they belong to.
    pub sync_id: Option<Arc<str>>,
    /// On `updated` changes where the index keeps content: what was shipped before.
    pub previous: Option<Arc<serde_json::Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncReason {
    Initial,
    Relist,
    /// A periodic resync, from the index.
    Resync,
}

impl SyncReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncReason::Initial => "initial",
            SyncReason::Relist => "relist",
            SyncReason::Resync => "resync",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerPhase {
    Started,
    Completed,
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
    fn count(&mut self, t: ChangeType) {
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
    /// The highest resourceVersion among the listed objects (kube-runtime's watcher does
    /// not expose the list's own resourceVersion). Empty on `started` and for empty lists.
    pub resource_version: String,
    /// Set on `completed`.
    pub counts: Option<SyncCounts>,
}

#[derive(Debug, Clone)]
pub enum Change {
    Object(ObjectChange),
    Marker(Marker),
}
