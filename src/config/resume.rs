//! `resume`: where each route keeps its checkpoint, so that a restart ships only what
//! changed while deltaship was down.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// The checkpoint key file (read to check it; the bridge reads it again when it starts).
pub(super) fn validate(c: &super::Config) -> Vec<super::Problem> {
    match &c.resume.key_file {
        Some(path) => match super::read_digest_key(path) {
            Ok(_) => Vec::new(),
            Err(e) => vec![super::Problem { key: "resume.key_file".into(), problem: e.to_string(), fix: super::KEY_FIX.into() }],
        },
        None => Vec::new(),
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
