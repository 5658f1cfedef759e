//! The NATS sink's configuration.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ContentMode, Secret, Template};
use crate::model::subject::encode_token;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URLs, comma separated, e.g. `nats://nats-0:4222,nats://nats-1:4222`. Required.
    pub url: String,
    /// Subject of each object's events. Placeholders: `{cluster}`, `{group}`, `{version}`,
    /// `{kind}` (lowercase), `{plural}`, `{namespace}`, `{name}`; each value is encoded to
    /// stay one token, `_` for the core group and for cluster-scoped objects' namespace.
    /// Default: `deltaship.{cluster}.{group}.{kind}.{namespace}.{name}`.
    #[serde(default = "Template::default_subject")]
    pub subject_template: Template,
    /// Subject of a resource's sync markers (no `{namespace}` or `{name}`).
    /// Default: `deltaship.{cluster}.{group}.{kind}._sync` (`_sync` is never a namespace).
    #[serde(default = "Template::default_marker_subject")]
    pub marker_subject_template: Template,
    /// `jetstream` (default: each publish awaits the stream's ack, deduplicated by id) or
    /// `core` (publish and flush: at most once).
    #[serde(default)]
    pub mode: NatsMode,
    /// `binary` (default: attributes as `ce-` headers, payload = data) or `structured`.
    #[serde(default)]
    pub content_mode: ContentMode,
    /// The JetStream stream (jetstream mode).
    #[serde(default)]
    pub jetstream: JetStreamConfig,
    /// Credentials: at most one of user+password, token, nkey seed, credentials file.
    #[serde(default)]
    pub auth: NatsAuth,
    /// TLS settings.
    #[serde(default)]
    pub tls: NatsTls,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NatsMode {
    #[default]
    Jetstream,
    Core,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JetStreamConfig {
    /// Stream name. Default: `DELTASHIP`.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Create the stream at start-up if missing (settings below). When false, a missing
    /// stream is a start-up error. Default: true.
    #[serde(default = "default_true")]
    pub create: bool,
    /// Subjects of a created stream. Default: `["deltaship.>"]`.
    #[serde(default = "default_stream_subjects")]
    pub subjects: Vec<String>,
    /// `file` (default) or `memory` storage for a created stream.
    #[serde(default)]
    pub storage: Storage,
    /// Replicas of a created stream. Default: 1.
    #[serde(default = "default_replicas")]
    pub replicas: usize,
    /// Window in which the stream drops a message whose id it already has, in seconds.
    /// Keep it above the longest retry. Default: 120.
    #[serde(default = "default_duplicate_window_secs")]
    pub duplicate_window_secs: u64,
    /// Messages kept per subject in a created stream; 0 (default) keeps all. With the
    /// default subject template, 1 makes the stream a live snapshot of cluster state.
    #[serde(default)]
    pub max_msgs_per_subject: i64,
    /// Time to wait for the stream's ack of one publish before retrying, in seconds.
    /// Default: 10.
    #[serde(default = "default_ack_timeout_secs")]
    pub ack_timeout_secs: u64,
    /// With leader election, the subject of the fence record a new leader publishes before
    /// anything else; every later publish expects it to be the last on this subject, so a
    /// deposed leader's publishes are refused. Default:
    /// `deltaship.<cluster>._fence.<lease namespace>.<lease name>` (each value one token).
    #[serde(default)]
    pub fence_subject: Option<String>,
}

impl Default for JetStreamConfig {
    fn default() -> Self {
        JetStreamConfig {
            stream: default_stream(),
            create: true,
            subjects: default_stream_subjects(),
            storage: Storage::default(),
            replicas: default_replicas(),
            duplicate_window_secs: default_duplicate_window_secs(),
            max_msgs_per_subject: 0,
            ack_timeout_secs: default_ack_timeout_secs(),
            fence_subject: None,
        }
    }
}

impl JetStreamConfig {
    /// The subject of the fence records of the lease `namespace`/`name` (see `fence_subject`).
    pub fn fence_subject_of(&self, cluster: &str, namespace: &str, name: &str) -> String {
        match &self.fence_subject {
            Some(subject) => subject.clone(),
            None => ["deltaship", &encode_token(Some(cluster)), "_fence", &encode_token(Some(namespace)), &encode_token(Some(name))].join("."),
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_stream() -> String {
    "DELTASHIP".into()
}
fn default_stream_subjects() -> Vec<String> {
    vec!["deltaship.>".into()]
}
fn default_replicas() -> usize {
    1
}
fn default_duplicate_window_secs() -> u64 {
    120
}
fn default_ack_timeout_secs() -> u64 {
    10
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    #[default]
    File,
    Memory,
}

/// Secrets may be given inline (also from env, e.g. `DELTASHIP_SINK__AUTH__PASSWORD`) or,
/// better, as files; they are masked in `print-config` and never logged.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsAuth {
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub password_file: Option<PathBuf>,
    pub token: Option<Secret>,
    pub token_file: Option<PathBuf>,
    /// File holding an NKey seed (`SU...`).
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (JWT and NKey seed).
    pub credentials_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsTls {
    /// CA certificate(s) (PEM) to trust for the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `key_file`, for mutual TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Refuse to connect without TLS. Default: false (TLS when the URL is `tls://` or the
    /// server requires it).
    #[serde(default)]
    pub required: bool,
}
