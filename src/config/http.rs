//! The HTTP sink's configuration: CloudEvents POSTed to a URL (a Knative Broker or Service,
//! a function, a webhook).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ContentMode, Secret};

/// The variable a Knative SinkBinding or ContainerSource sets to the sink's address.
pub const K_SINK: &str = "K_SINK";
/// The variable a Knative source sets to the CloudEvent extensions every event carries,
/// as JSON: `{"extensions": {"name": "value"}}`.
pub const K_CE_OVERRIDES: &str = "K_CE_OVERRIDES";

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSinkConfig {
    /// The URL each event is POSTed to, `http://` or `https://`. Default: the environment
    /// variable `K_SINK`, which a Knative SinkBinding or ContainerSource sets; one of the
    /// two is required.
    pub url: Option<String>,
    /// `binary` (default: attributes as `ce-` headers, body = data) or `structured` (body =
    /// the whole event as JSON, `application/cloudevents+json`).
    #[serde(default)]
    pub content_mode: ContentMode,
    /// Time allowed for one request, from connecting to the end of the response, in
    /// milliseconds; a request that takes longer is retried. Default: 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Requests in flight at once (each object has at most one). Default: 64.
    #[serde(default = "default_max_requests")]
    pub max_requests: usize,
    /// What an answer of 400-499 other than 408, 413 and 429 does (retrying cannot help):
    /// `fail` (default: the bridge stops, naming the status; the restart re-delivers) or
    /// `skip` (the event is dropped, logged and counted in
    /// `deltaship_events_dropped_total{reason="rejected"}`).
    #[serde(default)]
    pub on_client_error: ClientErrorPolicy,
    /// TLS to an `https://` URL. Default: the system's CA store, no client certificate.
    #[serde(default)]
    pub tls: HttpTls,
    /// Credentials sent with every request. Default: none.
    #[serde(default)]
    pub auth: HttpAuth,
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn default_max_requests() -> usize {
    64
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClientErrorPolicy {
    /// The bridge stops, naming the status and the answer.
    #[default]
    Fail,
    /// The event is dropped, logged and counted.
    Skip,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpTls {
    /// CA certificate(s) (PEM) to verify the server with, instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `key_file`, for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// At most one of a bearer token and a user with a password. Secrets inline (also from
/// the environment, e.g. `DELTASHIP_SINK__AUTH__TOKEN`) or, better, as files; masked in
/// `print-config` and never logged. Files are read again when they change, so a rotated
/// token is used without a restart.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpAuth {
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<Secret>,
    /// File holding the token (trailing newline trimmed), e.g. a projected service account
    /// token.
    pub token_file: Option<PathBuf>,
    /// User of HTTP basic authentication, with `password` or `password_file`.
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub password_file: Option<PathBuf>,
}

impl HttpSinkConfig {
    /// The URL events go to: `url`, else `$K_SINK`.
    pub fn target_url(&self) -> Option<String> {
        self.url.clone().or_else(|| std::env::var(K_SINK).ok().filter(|u| !u.is_empty()))
    }
}

/// The extensions of `$K_CE_OVERRIDES` (none when unset), set on every event as Knative's
/// sources do; an error says what is wrong with the variable's JSON.
pub fn ce_overrides() -> Result<BTreeMap<String, String>, String> {
    let Ok(text) = std::env::var(K_CE_OVERRIDES) else { return Ok(BTreeMap::new()) };
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Overrides {
        #[serde(default)]
        extensions: BTreeMap<String, String>,
    }
    let parsed: Overrides = serde_json::from_str(&text).map_err(|e| format!("is not JSON of the form {{\"extensions\": {{\"name\": \"value\"}}}}: {e}"))?;
    if let Some(bad) = parsed.extensions.keys().find(|k| k.is_empty() || k.len() > 20 || !k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())) {
        return Err(format!("names the extension `{bad}`; CloudEvents extension names are 1 to 20 lowercase letters or digits"));
    }
    Ok(parsed.extensions)
}
