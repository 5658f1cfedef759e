//! `resume`: where each route keeps its checkpoint, so that a restart ships only what
//! changed while deltaship was down.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds;
use super::problem::{Problem, problem};
use super::redact::{KEY_FIX, read_digest_key};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeConfig {
    /// Keep a checkpoint of what each route's sink acknowledged and start from it: a
    /// restart, rollout or leader handover ships only the changes made meanwhile. False:
    /// every start is a full initial sync. Default: true.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// How often acknowledged progress is written, in milliseconds (and once more on
    /// shutdown). Default: 1000.
    #[serde(default = "default_interval_ms")]
    #[schemars(transform = &bounds::CHECKPOINT_INTERVAL_MS)]
    pub interval_ms: u64,
    /// Kafka routes: the compacted topic of checkpoints, on the route's brokers (created
    /// with one partition when missing). Default: `deltaship.checkpoints`.
    #[serde(default = "default_kafka_topic")]
    pub kafka_topic: String,
    /// NATS routes: the JetStream key-value bucket of checkpoints (created when missing).
    /// Default: `deltaship-checkpoints`.
    #[serde(default = "default_nats_bucket")]
    pub nats_bucket: String,
    /// stdout and HTTP routes: the directory of checkpoint files, one per route. Default: none
    /// (those routes start with a full sync).
    pub directory: Option<PathBuf>,
    /// A file holding the key every checkpoint record is sealed with (HMAC-SHA256; at least
    /// 16 bytes, a trailing newline trimmed), so that a record written or edited without it
    /// is refused (`corrupt`) instead of resumed from. Every replica must use the same key.
    /// Default: none: records are not authenticated, and whoever may write the checkpoint
    /// store can make a start skip changes.
    pub key_file: Option<PathBuf>,
}

impl ResumeConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        bounds::CHECKPOINT_INTERVAL_MS.check(out, "resume", self.interval_ms);
        // The key file is read to check it; the bridge reads it again when it starts.
        if let Some(path) = &self.key_file
            && let Err(e) = read_digest_key(path)
        {
            out.push(problem("resume.key_file", e.to_string(), KEY_FIX));
        }
        let topic = &self.kafka_topic;
        // Kafka's rule for topic names (its `Topic.validate`).
        if !(1..=249).contains(&topic.len()) || topic == "." || topic == ".." || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
            out.push(problem(
                "resume.kafka_topic",
                format!("`{topic}` is not a valid Kafka topic name"),
                "use 1 to 249 letters, digits, `.`, `_` and `-`, e.g. `deltaship.checkpoints`",
            ));
        }
        let bucket = &self.nats_bucket;
        if bucket.is_empty() || !bucket.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)) {
            out.push(problem(
                "resume.nats_bucket",
                format!("`{bucket}` is not a valid key-value bucket name"),
                "use letters, digits, `_` and `-`, e.g. `deltaship-checkpoints`",
            ));
        }
    }
}

fn default_enabled() -> bool {
    true
}

fn default_interval_ms() -> u64 {
    1000
}

fn default_kafka_topic() -> String {
    "deltaship.checkpoints".into()
}

fn default_nats_bucket() -> String {
    "deltaship-checkpoints".into()
}

impl Default for ResumeConfig {
    fn default() -> Self {
        ResumeConfig {
            enabled: default_enabled(),
            interval_ms: default_interval_ms(),
            kafka_topic: default_kafka_topic(),
            nats_bucket: default_nats_bucket(),
            directory: None,
            key_file: None,
        }
    }
}
