//! Resume: each route keeps a checkpoint of what its sink acknowledged (every object's
//! uid, resourceVersion and fingerprint, and each watch's position), where its events go.
//! A start loads it into the watch's index and continues the watch from that position,
//! or lists and ships only the differences when the API server no longer has it.

pub mod decision;
pub mod holder;
mod progress;
mod record;
mod seal;
mod store;
mod tail;
mod timeline;
mod writer;

use std::collections::HashMap;

use sha2::{Digest, Sha256};

pub use progress::{Effect, Hold, Progress, Records, Start, key_hash};
pub use record::{Loaded, Now, Parsed, Refused, Saved, Tail, Unusable, WatchRecord, object_key, parse, route_prefix, watch_prefix};
pub use seal::Seal;
pub use store::{Store, StoreError};
pub use tail::{Learned, Logged, Watched, learn};
pub use timeline::{Sample, Timeline, judge, newest};
pub use writer::{Checkpointer, Destination};

use crate::change::Entry;
use crate::plan::{Output, Scope};

/// Where a watch starts from a checkpoint: the index to load and the watch position it
/// was acknowledged at.
#[derive(Debug, Clone)]
pub struct Resume {
    pub entries: Vec<(String, Entry)>,
    pub resource_version: String,
    /// Per uid, the newest resourceVersion consumers received after the checkpoint (read
    /// from the log's tail): the resumed watch ships none of those again.
    pub delivered: HashMap<String, String>,
}

/// The digest of what decides the events of one watch on one route: the cluster, the
/// resource and its watch scope, what is fingerprinted and redacted, and the route's
/// filters, shape and destinations. A checkpoint written under another digest is not
/// resumed from (its fingerprints or what its consumers hold may differ).
pub fn digest(cluster: &str, scope: &Scope, output: &Output) -> String {
    let described = format!(
        "{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        record::FORMAT,
        cluster,
        scope.resource,
        scope.namespace,
        scope.label_selector,
        scope.field_selector,
        scope.ignore_fields,
        scope.redaction,
        output.payload,
        output.filters,
        output.knative_source,
        output.address,
    );
    let hash = Sha256::digest(described.as_bytes());
    crate::hex::encode("", &hash[..12])
}
