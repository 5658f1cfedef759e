//! The plain data every layer speaks: a watched resource, a decoded object, what a watch
//! observed, and the words of the event contract (change types, sync reasons and modes,
//! marker phases). No logic beyond accessors; nothing here imports another module of the
//! crate.

mod object;
mod resource;

use serde::{Deserialize, Serialize};

pub use object::{Object, ObjectError, ObjectRef};
pub use resource::ResourceType;

/// What a watch observed, its object already decoded and redacted: kube-runtime's
/// `watcher::Event` as the later stages take it.
#[derive(Debug)]
pub enum Observed {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Every object delivered as `synced`.
    Full,
    /// Only differences against the index.
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerPhase {
    Started,
    Completed,
}

/// Objects and resources for unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    pub use super::object::fixtures::*;
    pub use super::resource::fixtures::*;
}
