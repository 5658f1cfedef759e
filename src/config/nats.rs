//! The NATS sink's configuration.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds;
use super::content::ContentMode;
use super::credentials::{Credentials, check_credentials};
use super::problem::{Problem, problem};
use super::secret::{Secret, has_userinfo, mask_urls};
use super::template::{Template, check_per_resource};
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
    #[schemars(transform = &bounds::REPLICAS)]
    pub replicas: usize,
    /// Window in which the stream drops a message whose id it already has, in seconds.
    /// Keep it above the longest retry. Default: 120.
    #[serde(default = "default_duplicate_window_secs")]
    #[schemars(transform = &bounds::DUPLICATE_WINDOW_SECS)]
    pub duplicate_window_secs: u64,
    /// Messages kept per subject in a created stream; 0 (default) keeps all. With the
    /// default subject template, 1 makes the stream a live snapshot of cluster state.
    #[serde(default)]
    #[schemars(transform = &bounds::MAX_MSGS_PER_SUBJECT)]
    pub max_msgs_per_subject: i64,
    /// Time to wait for the stream's ack of one publish before retrying, in seconds.
    /// Default: 10.
    #[serde(default = "default_ack_timeout_secs")]
    #[schemars(transform = &bounds::ACK_TIMEOUT_SECS)]
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

impl NatsConfig {
    /// The problems of this sink, at `key` (`sink` or `routes[i].sink`).
    pub(super) fn validate(&self, out: &mut Vec<Problem>, key: &str) {
        let n = self;
        let at = |field: &str| format!("{key}.{field}");
        if n.url.trim().is_empty() {
            out.push(problem(at("url"), "is empty", "list server URLs, e.g. `nats://nats-0:4222,nats://nats-1:4222`"));
        }
        if has_userinfo(&n.url) {
            out.push(problem(
                at("url"),
                format!("`{}` holds credentials before a host, which the NATS client never sends", mask_urls(&n.url)),
                "remove them from the URL and set `auth` (`user` with `password_file`, or `token_file`)",
            ));
        }
        check_per_resource(out, at("marker_subject_template"), &n.marker_subject_template);
        let js = &n.jetstream;
        if js.stream.is_empty() || js.stream.contains(['.', '*', '>', ' ', '\t', '/', '\\']) {
            out.push(problem(
                at("jetstream.stream"),
                format!("`{}` is not a valid stream name", js.stream),
                "use letters, digits, `-` and `_`, e.g. `DELTASHIP`",
            ));
        }
        if js.create && js.subjects.is_empty() {
            out.push(problem(at("jetstream.subjects"), "is empty", "list the stream's subjects, e.g. [\"deltaship.>\"]"));
        }
        bounds::REPLICAS.check(out, &at("jetstream"), js.replicas);
        bounds::DUPLICATE_WINDOW_SECS.check(out, &at("jetstream"), js.duplicate_window_secs);
        bounds::MAX_MSGS_PER_SUBJECT.check(out, &at("jetstream"), js.max_msgs_per_subject);
        bounds::ACK_TIMEOUT_SECS.check(out, &at("jetstream"), js.ack_timeout_secs);
        let a = &n.auth;
        let methods = [a.user.is_some(), a.token.is_some() || a.token_file.is_some(), a.nkey_seed_file.is_some(), a.credentials_file.is_some()];
        if methods.iter().filter(|m| **m).count() > 1 {
            out.push(problem(at("auth"), "sets more than one way to authenticate", "keep one of: user with password, token, nkey_seed_file, credentials_file"));
        }
        check_credentials(
            out,
            key,
            Credentials {
                user: a.user.is_some(),
                password: (a.password.is_some(), a.password_file.is_some()),
                token: (a.token.is_some(), a.token_file.is_some()),
                cert_and_key: (n.tls.cert_file.is_some(), n.tls.key_file.is_some()),
                files: &[
                    ("auth.password_file", &a.password_file, "the password"),
                    ("auth.token_file", &a.token_file, "the token"),
                    ("auth.nkey_seed_file", &a.nkey_seed_file, "the NKey seed"),
                    ("auth.credentials_file", &a.credentials_file, "the credentials (JWT and NKey seed)"),
                    ("tls.ca_file", &n.tls.ca_file, "the CA certificate(s) in PEM"),
                    ("tls.cert_file", &n.tls.cert_file, "the client certificate in PEM"),
                    ("tls.key_file", &n.tls.key_file, "the client certificate's private key in PEM"),
                ],
            },
        );
    }
}
