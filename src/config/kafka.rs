//! The Kafka sink's configuration.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds;
use super::content::ContentMode;
use super::credentials::check_readable;
use super::problem::{Problem, problem};
use super::secret::{Secret, mask_secrets_in};
use super::template::{Template, check_per_resource};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma separated, e.g. `broker-1:9092,broker-2:9092`. Required.
    pub brokers: String,
    /// Topic name template. Placeholders: `{cluster}`, `{group}` (`core` for the core
    /// group), `{version}`, `{kind}` (lowercase), `{plural}`.
    /// Default: `deltaship.{cluster}.{group}.{plural}` (one topic per resource).
    #[serde(default = "Template::default_topic")]
    pub topic_template: Template,
    /// `binary` (default: attributes as `ce_` headers, value = data) or `structured`
    /// (value = the whole event as JSON).
    #[serde(default)]
    pub content_mode: ContentMode,
    /// After each `deleted` event, also send a tombstone (same key, null value), for
    /// compacted topics. Default: false.
    #[serde(default)]
    pub tombstones: bool,
    /// Compression codec: `none`, `gzip`, `snappy`, `lz4` or `zstd`. Default: `lz4` (the
    /// cheapest per batch: librdkafka sets up a new zstd context for every batch it
    /// compresses, which at live rates of small batches costs more CPU and memory than the
    /// records themselves).
    #[serde(default)]
    pub compression: Compression,
    /// Create missing topics at start-up with these settings. Default: not set (topics
    /// must exist, or the broker must auto-create them).
    pub create_topics: Option<TopicCreation>,
    /// TLS to the brokers. Setting it, even empty (`tls = {}`: the system's CA store, no
    /// client certificate), turns TLS on: `security.protocol` becomes `SSL`, or `SASL_SSL`
    /// with `sasl`. Default: not set (no TLS).
    pub tls: Option<KafkaTls>,
    /// SASL authentication (PLAIN or SCRAM). Setting it makes `security.protocol`
    /// `SASL_PLAINTEXT`, or `SASL_SSL` with `tls`. Default: not set (no authentication).
    pub sasl: Option<KafkaSasl>,
    /// Raw librdkafka options (https://github.com/confluentinc/librdkafka CONFIGURATION.md),
    /// applied last: they override deltaship's producer settings and those derived from
    /// `tls` and `sasl`, except that `acks` (or `request.required.acks`) cannot be 0: an
    /// event counts as delivered only on the brokers' acknowledgement. Values whose key
    /// names a password or secret are masked in `print-config` and logs. Default: none.
    #[serde(default)]
    #[schemars(extend("properties" = {
        "acks": {"type": "string", "not": {"pattern": "^\\s*0\\s*$"}},
        "request.required.acks": {"type": "string", "not": {"pattern": "^\\s*0\\s*$"}}
    }))]
    pub librdkafka: BTreeMap<String, String>,
}

/// A compression codec of librdkafka's `compression.type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    #[default]
    Lz4,
    Zstd,
}

impl Compression {
    /// Every codec's name, as serde lists them when a value is none of them: the config
    /// loader recognises the list to name the key (inside a sink its path is lost).
    pub const NAMES: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

    /// The name librdkafka uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicCreation {
    /// Partitions of each created topic. Default: 3.
    #[serde(default = "default_partitions")]
    #[schemars(transform = &bounds::PARTITIONS)]
    pub partitions: i32,
    /// Replication factor of each created topic. Default: 1.
    #[serde(default = "default_replication")]
    #[schemars(transform = &bounds::REPLICATION_FACTOR)]
    pub replication_factor: i32,
    /// Topic configs of created topics, e.g. `{"cleanup.policy" = "compact"}` for a
    /// replica of cluster state (with `tombstones = true`). Default: none.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn default_partitions() -> i32 {
    3
}

fn default_replication() -> i32 {
    1
}

/// TLS settings; the files are PEM and must be readable at start-up.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaTls {
    /// CA certificate(s) to verify the brokers' certificates with (librdkafka's
    /// `ssl.ca.location`). Default: the system's CA store.
    pub ca_file: Option<PathBuf>,
    /// Client certificate, with `key_file`, for mutual TLS (`ssl.certificate.location`).
    /// Default: none.
    pub cert_file: Option<PathBuf>,
    /// Private key of `cert_file` (`ssl.key.location`). Default: none.
    pub key_file: Option<PathBuf>,
    /// File holding the password of an encrypted `key_file` (`ssl.key.password`), read at
    /// start-up, trailing newline trimmed. Default: none (the key is not encrypted).
    pub key_password_file: Option<PathBuf>,
}

/// SASL credentials. The password comes from exactly one of `password_file` (better) or
/// `password` (also from the environment: `DELTASHIP_SINK__SASL__PASSWORD`); it is masked
/// in `print-config` and never logged.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (`sasl.mechanism`). Required.
    pub mechanism: SaslMechanism,
    /// The SASL user name (`sasl.username`). Required.
    pub username: String,
    /// The password, inline. Default: none.
    pub password: Option<Secret>,
    /// File holding the password, read at start-up, trailing newline trimmed.
    /// Default: none.
    pub password_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The name librdkafka (and the broker) use.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl KafkaConfig {
    /// librdkafka's `security.protocol` for `tls` and `sasl`; None (librdkafka's default,
    /// `PLAINTEXT`) when neither is set.
    pub fn security_protocol(&self) -> Option<&'static str> {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (true, true) => Some("SASL_SSL"),
            (true, false) => Some("SSL"),
            (false, true) => Some("SASL_PLAINTEXT"),
            (false, false) => None,
        }
    }
}

impl KafkaConfig {
    /// The problems of this sink, at `key` (`sink` or `routes[i].sink`).
    pub(super) fn validate(&self, out: &mut Vec<Problem>, key: &str) {
        let k = self;
        let at = |field: &str| format!("{key}.{field}");
        if k.brokers.trim().is_empty() {
            out.push(problem(at("brokers"), "is empty", "list bootstrap servers, e.g. `kafka-0:9092,kafka-1:9092`"));
        }
        check_per_resource(out, at("topic_template"), &k.topic_template);
        // librdkafka checks each option when it is set: an unknown name or a bad value is a
        // config error now, its value masked when the name looks secret (librdkafka echoes it).
        for (name, value) in &k.librdkafka {
            if matches!(name.as_str(), "acks" | "request.required.acks") && value.trim() == "0" {
                out.push(problem(
                    at(&format!("librdkafka.\"{name}\"")),
                    "0 asks the brokers for no acknowledgement, and deltaship counts an event delivered only on the brokers' acknowledgement",
                    "remove it (deltaship sets `all`)",
                ));
            }
            if let Err(e) = rdkafka::ClientConfig::new().set(name, value).create_native_config() {
                let reason = match e {
                    rdkafka::error::KafkaError::ClientConfig(_, description, _, _) => description,
                    other => other.to_string(),
                };
                out.push(problem(
                    at(&format!("librdkafka.\"{name}\"")),
                    format!("librdkafka refuses it: {}", mask_secrets_in(&reason, [(name.as_str(), value.as_str())])),
                    "correct the option's name or value (librdkafka's CONFIGURATION.md lists them), or remove it",
                ));
            }
        }
        if let Some(t) = &k.create_topics {
            bounds::PARTITIONS.check(out, &at("create_topics"), t.partitions);
            bounds::REPLICATION_FACTOR.check(out, &at("create_topics"), t.replication_factor);
        }
        if let Some(tls) = &k.tls {
            match (&tls.cert_file, &tls.key_file) {
                (Some(_), None) => out.push(problem(
                    at("tls.key_file"),
                    "is missing: a client certificate (`cert_file`) needs its key",
                    "set both `cert_file` and `key_file` (mutual TLS), or neither",
                )),
                (None, Some(_)) => out.push(problem(
                    at("tls.cert_file"),
                    "is missing: `key_file` needs its certificate",
                    "set both `cert_file` and `key_file` (mutual TLS), or neither",
                )),
                _ => {}
            }
            if tls.key_password_file.is_some() && tls.key_file.is_none() {
                out.push(problem(
                    at("tls.key_password_file"),
                    "is set without `key_file`",
                    "set `key_file` to the encrypted key, or remove `key_password_file`",
                ));
            }
            let files = [
                ("tls.ca_file", &tls.ca_file, "the CA certificate(s) in PEM"),
                ("tls.cert_file", &tls.cert_file, "the client certificate in PEM"),
                ("tls.key_file", &tls.key_file, "the client certificate's private key in PEM"),
                ("tls.key_password_file", &tls.key_password_file, "the password of `key_file`"),
            ];
            for (field, path, what) in files {
                if let Some(path) = path {
                    check_readable(out, at(field), path, what);
                }
            }
        }
        if let Some(sasl) = &k.sasl {
            if sasl.username.trim().is_empty() {
                out.push(problem(at("sasl.username"), "is empty", "set the SASL user name the brokers know"));
            }
            match (&sasl.password, &sasl.password_file) {
                (Some(_), Some(_)) => out.push(problem(
                    at("sasl.password"),
                    "is set together with `password_file`",
                    "keep one: `password_file` (a file holding the password) or `password`",
                )),
                (None, None) => {
                    // Environment variables reach `sink` only, not list entries such as routes.
                    let env = if key == "sink" { " (e.g. from DELTASHIP_SINK__SASL__PASSWORD)" } else { "" };
                    out.push(problem(
                        at("sasl.password"),
                        "is missing: neither `password` nor `password_file` is set",
                        format!("set `password_file` to a file holding the password, or `password`{env}"),
                    ));
                }
                (None, Some(path)) => check_readable(out, at("sasl.password_file"), path, "the SASL password"),
                (Some(_), None) => {}
            }
        }
    }
}

#[cfg(test)]
impl KafkaConfig {
    /// A Kafka sink's configuration for unit tests: brokers `b:1`, and `extra`'s keys.
    pub fn fixture(extra: serde_json::Value) -> KafkaConfig {
        let mut v = serde_json::json!({"brokers": "b:1"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_protocol_follows_tls_and_sasl() {
        let sasl = serde_json::json!({"mechanism": "SCRAM-SHA-512", "username": "u", "password": "p"});
        assert_eq!(KafkaConfig::fixture(serde_json::json!({})).security_protocol(), None);
        assert_eq!(KafkaConfig::fixture(serde_json::json!({"tls": {}})).security_protocol(), Some("SSL"));
        assert_eq!(KafkaConfig::fixture(serde_json::json!({"sasl": sasl})).security_protocol(), Some("SASL_PLAINTEXT"));
        assert_eq!(KafkaConfig::fixture(serde_json::json!({"tls": {}, "sasl": sasl})).security_protocol(), Some("SASL_SSL"));
    }

    #[test]
    fn mechanisms_have_their_kafka_names_and_others_are_rejected() {
        for name in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let m: SaslMechanism = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(m.as_str(), name);
            assert_eq!(serde_json::to_value(m).unwrap(), name);
        }
        let e = serde_json::from_value::<SaslMechanism>(serde_json::json!("scram-sha-256")).unwrap_err().to_string();
        assert!(e.contains("SCRAM-SHA-256"), "lists the valid names: {e}");
    }

    #[test]
    fn compression_codecs_have_their_librdkafka_names_and_serde_lists_them_all() {
        for name in Compression::NAMES {
            let c: Compression = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(c.as_str(), name);
            assert_eq!(serde_json::to_value(c).unwrap(), name);
        }
        assert_eq!(KafkaConfig::fixture(serde_json::json!({})).compression, Compression::Lz4);
        let e = serde_json::from_value::<Compression>(serde_json::json!("brotli")).unwrap_err().to_string();
        assert!(e.contains("`none`, `gzip`, `snappy`, `lz4`, `zstd`"), "the loader recognises the list by these names: {e}");
    }

    #[test]
    fn debug_output_hides_the_password() {
        let k = KafkaConfig::fixture(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password": "hunter2"}}));
        let shown = format!("{k:?}");
        assert!(!shown.contains("hunter2") && shown.contains("***"), "{shown}");
    }
}
