//! One record as the consumer protocol takes it (the decoder's verdict, the protocol's
//! input): a step of the protocol, or why the record is bad.

use serde::Serialize;
use serde_json::Value;

/// What one record is for the protocol.
// One at a time, moved straight into the state: boxing the event would only add an
// allocation per record.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Step {
    Event(Received),
    /// A Kafka record with a null value (a compaction tombstone after a `deleted`).
    Tombstone,
    /// An event whose type is none of the contract's: not ours, ignored.
    Foreign,
}

/// Why a record was skipped: a bounded set, counted per reason in the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The value is empty.
    Empty,
    /// The value is larger than MAX_RECORD_BYTES.
    TooLarge,
    /// The value (or the whole structured event) is not JSON.
    NotJson,
    /// The JSON ends early.
    Truncated,
    /// The JSON nests deeper than MAX_DEPTH.
    TooDeep,
    /// A required attribute (id, type, subject, apiversion, kind) is absent or empty, or the
    /// data is absent or null.
    MissingAttribute,
    /// An attribute or the data has the wrong type (a number for a string, data that is not
    /// an object, a header that is not UTF-8, a patch that is not a JSON Patch).
    WrongType,
    /// A JSON Patch that does not apply to the stored object (or there is none).
    PatchNotApplied,
    /// A sequence number of the stream holds no message (deleted, or removed by limits).
    Missing,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "empty",
            Reason::TooLarge => "too_large",
            Reason::NotJson => "not_json",
            Reason::Truncated => "truncated",
            Reason::TooDeep => "too_deep",
            Reason::MissingAttribute => "missing_attribute",
            Reason::WrongType => "wrong_type",
            Reason::PatchNotApplied => "patch_not_applied",
            Reason::Missing => "missing",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record that cannot be applied: why, and what exactly was wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}: {problem}")]
pub struct Bad {
    pub reason: Reason,
    pub problem: String,
}

impl Bad {
    pub fn new(reason: Reason, problem: impl Into<String>) -> Bad {
        Bad { reason, problem: problem.into() }
    }
}

/// One received CloudEvent of the contract's types, whatever the binding.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    /// The `cluster` extension.
    pub cluster: String,
    /// Kafka partition (0 for NATS).
    pub partition: i32,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub enum Body {
    /// `sync.started` or `sync.completed`; `resource` is `apiVersion/Kind`; `state` the
    /// figures a `completed` carries, to check.
    Marker { started: bool, sync_id: String, full: bool, resource: String, namespace: Option<String>, state: Option<Figures> },
    /// An object event: `resource` is `apiVersion/Kind`, `key` the subject; `uid` and
    /// `resource_version` its extensions ("" when absent).
    Object { change: ChangeKind, resource: String, key: String, content: Content, uid: String, resource_version: String },
}

/// The count and digest of a set of objects (event contract §4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub count: u64,
    /// The sum of the objects' terms modulo 2^128.
    pub digest: u128,
}

impl Serialize for Figures {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({"count": self.count, "digest": format!("{:032x}", self.digest)}).serialize(s)
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "count {} digest {:032x}", self.count, self.digest)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Updated,
    Synced,
    Deleted,
}

#[derive(Debug, Clone)]
pub enum Content {
    Whole(Value),
    /// An RFC 6902 JSON Patch from the previously shipped content.
    Patch(json_patch::Patch),
    /// `deleted` (and only it): the data is not needed.
    None,
}
