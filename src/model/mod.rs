//! The plain data every layer speaks: a watched resource, a decoded object, what a watch
//! observed, and the words of the event contract (change types, sync reasons and modes,
//! marker phases and slots, NATS subject tokens). No logic beyond accessors and those
//! encodings; nothing here imports another module of the crate.

pub mod digest;
mod object;
mod resource;
mod stall;
pub mod subject;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use object::{Object, ObjectError, ObjectRef};
pub use resource::ResourceType;
pub use stall::{Stall, StallReason};

/// What a watch observed, its object already decoded and redacted: the events of
/// kube-runtime's watcher (which `watch::stream` replaces) and what that watcher keeps to
/// itself (resume, bookmarks, stalls).
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
    /// The watch continues from the resourceVersion of the checkpoint the index was
    /// loaded from: nothing was missed, nothing is listed.
    Resumed,
    /// The watch stands at this resourceVersion with nothing before it left to observe (a
    /// completed list's own version, a bookmark): where a checkpoint can resume from.
    Bookmark(String),
    /// The watch stopped following the API server (see `Stall`); a list comes next. When the
    /// API server's history was replaced, that list replaces what was shipped.
    Stalled(Stall),
}

/// Where an event stands in its watch's order (`watch`: the watch's position in the plan,
/// `seq`: the change's number within it), so that its acknowledgement moves that watch's
/// checkpoint on the event's route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSeq {
    pub watch: usize,
    pub seq: u64,
}

/// Where the broker stored an event: its Kafka partition and offset, or (NATS JetStream,
/// partition 0) its stream sequence. The checkpoint records how far its events reached, so
/// that a start after a crash reads what was delivered after it (`checkpoint::tail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub partition: i32,
    pub offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
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
    /// A start from a checkpoint: only what changed since it was written.
    Resume,
    /// A periodic state marker: no objects, the count and digest of the state held.
    State,
}

impl SyncReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncReason::Initial => "initial",
            SyncReason::Relist => "relist",
            SyncReason::Resync => "resync",
            SyncReason::Resume => "resume",
            SyncReason::State => "state",
        }
    }
}

/// How a sync ships the listed objects (the `mode` of its markers); a resource's `relist`
/// chooses it for relists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Only differences against the index.
    #[default]
    Diff,
    /// Every object delivered as `synced`.
    Full,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Diff => "diff",
            SyncMode::Full => "full",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerPhase {
    Started,
    Completed,
}

impl MarkerPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerPhase::Started => "started",
            MarkerPhase::Completed => "completed",
        }
    }
}

/// What tells one sync's markers apart from another's on a compacted topic or a stream
/// that keeps one message per subject: the watch's namespace (None: every namespace), the
/// sync's mode and the marker's phase. Compaction then keeps the latest `started` and the
/// latest `completed` of every watch and mode, so a consumer reading a compacted log still
/// sees the last full sync whole and removes what it did not deliver.
#[derive(Debug, Clone, Copy)]
pub struct MarkerSlot<'a> {
    pub namespace: Option<&'a str>,
    pub mode: SyncMode,
    pub phase: MarkerPhase,
}

impl MarkerSlot<'_> {
    /// The `(mode, phase)` tokens that follow a marker subject, one pair per slot of a watch.
    pub fn suffixes() -> impl Iterator<Item = (&'static str, &'static str)> {
        [SyncMode::Full, SyncMode::Diff].into_iter().flat_map(|mode| {
            [MarkerPhase::Started, MarkerPhase::Completed].map(|phase| {
                let slot = MarkerSlot { namespace: None, mode, phase };
                (slot.mode.as_str(), slot.phase.as_str())
            })
        })
    }
}

/// Objects and resources for unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    pub use super::object::fixtures::*;
    pub use super::resource::fixtures::*;
}
