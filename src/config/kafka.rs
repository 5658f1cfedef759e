//! The Kafka sink's configuration.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ContentMode, Secret, Template};

#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Compression codec: `none`, `gzip`, `snappy`, `lz4` or `zstd`. Default: `zstd`.
    #[serde(default = "default_compression")]
    pub compression: String,
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
    /// `tls` and `sasl`. Values whose key names a password or secret are masked in
    /// `print-config` and logs. Default: none.
    #[serde(default)]
    pub librdkafka: BTreeMap<String, String>,
}

fn default_compression() -> String {
    "zstd".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicCreation {
    /// Partitions of each created topic. Default: 3.
    #[serde(default = "default_partitions")]
    pub partitions: i32,
    /// Replication factor of each created topic. Default: 1.
    #[serde(default = "default_replication")]
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
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(extra: serde_json::Value) -> KafkaConfig {
        let mut v = serde_json::json!({"brokers": "b:1"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn security_protocol_follows_tls_and_sasl() {
        let sasl = serde_json::json!({"mechanism": "SCRAM-SHA-512", "username": "u", "password": "p"});
        assert_eq!(kafka(serde_json::json!({})).security_protocol(), None);
        assert_eq!(kafka(serde_json::json!({"tls": {}})).security_protocol(), Some("SSL"));
        assert_eq!(kafka(serde_json::json!({"sasl": sasl})).security_protocol(), Some("SASL_PLAINTEXT"));
        assert_eq!(kafka(serde_json::json!({"tls": {}, "sasl": sasl})).security_protocol(), Some("SASL_SSL"));
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
    fn debug_output_hides_the_password() {
        let k = kafka(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password": "hunter2"}}));
        let shown = format!("{k:?}");
        assert!(!shown.contains("hunter2") && shown.contains("***"), "{shown}");
    }
}
