//! The Kafka sink's configuration, and the librdkafka settings it makes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rdkafka::config::ClientConfig;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds;
use super::content::ContentMode;
use super::credentials::check_readable;
use super::problem::{Problem, problem};
use super::secret::{Secret, SecretFileError, mask_secrets_in};
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

/// librdkafka's own queue would buffer up to 1 GiB by default; deltaship bounds what is in
/// flight itself (delivery.max_in_flight), so a small cap here keeps memory bounded even
/// with large objects.
const QUEUE_MAX_KBYTES: &str = "65536";

/// What a librdkafka client made from the sink's settings is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRole {
    /// The sink's producer (and its admin clients): the brokers, deltaship's producer
    /// settings and the connection settings.
    Producer,
    /// A reader of the sink's topics (`rebuild --config`): the connection settings only,
    /// to add to the reader's own (its brokers, its group).
    Consumer,
}

impl KafkaConfig {
    /// The librdkafka settings for `role`: TLS, SASL, then the raw `librdkafka` options
    /// (last: they override). Secret files are read now; an error names the key and the
    /// file, never the content.
    pub fn client_config(&self, role: ClientRole) -> Result<ClientConfig, SecretFileError> {
        let mut c = ClientConfig::new();
        if role == ClientRole::Producer {
            c.set("bootstrap.servers", &self.brokers)
                // Per-partition order through retries, nothing lost or duplicated by the producer.
                .set("enable.idempotence", "true")
                .set("acks", "all")
                // Never give up on a record: a broker outage back-pressures the watches instead of
                // dropping events (0 = no timeout).
                .set("message.timeout.ms", "0")
                // Java-compatible partitioning, so other producers place the same key alike.
                .set("partitioner", "murmur2_random")
                .set("compression.type", self.compression.as_str())
                .set("queue.buffering.max.kbytes", QUEUE_MAX_KBYTES)
                .set("linger.ms", "5");
        }
        if let Some(protocol) = self.security_protocol() {
            c.set("security.protocol", protocol);
        }
        if let Some(tls) = &self.tls {
            let files = [("ssl.ca.location", &tls.ca_file), ("ssl.certificate.location", &tls.cert_file), ("ssl.key.location", &tls.key_file)];
            for (option, file) in files {
                if let Some(file) = file {
                    c.set(option, file.display().to_string());
                }
            }
            if let Some(file) = &tls.key_password_file {
                c.set("ssl.key.password", Secret::from_file("tls.key_password_file", file)?.expose());
            }
        }
        if let Some(sasl) = &self.sasl {
            let password = match (&sasl.password, &sasl.password_file) {
                (Some(p), _) => p.clone(),
                (None, Some(file)) => Secret::from_file("sasl.password_file", file)?,
                // Rejected by validation; the broker refuses it the same way.
                (None, None) => Secret::new(""),
            };
            c.set("sasl.mechanism", sasl.mechanism.as_str()).set("sasl.username", &sasl.username).set("sasl.password", password.expose());
        }
        for (k, v) in &self.librdkafka {
            c.set(k, v);
        }
        Ok(c)
    }

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
    fn compression_codecs_have_their_librdkafka_names_and_serde_lists_them_all() {
        for name in Compression::NAMES {
            let c: Compression = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(c.as_str(), name);
            assert_eq!(serde_json::to_value(c).unwrap(), name);
        }
        assert_eq!(kafka(serde_json::json!({})).compression, Compression::Lz4);
        let e = serde_json::from_value::<Compression>(serde_json::json!("brotli")).unwrap_err().to_string();
        assert!(e.contains("`none`, `gzip`, `snappy`, `lz4`, `zstd`"), "the loader recognises the list by these names: {e}");
    }

    #[test]
    fn tls_and_sasl_become_librdkafka_settings_and_raw_options_override_them() {
        let dir = std::env::temp_dir().join(format!("deltaship-kafka-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (password, key_password) = (dir.join("password"), dir.join("key-password"));
        std::fs::write(&password, "pa ss\n").unwrap();
        std::fs::write(&key_password, "k3y\r\n").unwrap();
        let tls_and_sasl = kafka(serde_json::json!({
            "tls": {"ca_file": "/ca.pem", "cert_file": "/c.pem", "key_file": "/c.key", "key_password_file": key_password},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "u", "password_file": password},
        }));
        let c = tls_and_sasl.client_config(ClientRole::Producer).unwrap();
        let expected = [
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", "/ca.pem"),
            ("ssl.certificate.location", "/c.pem"),
            ("ssl.key.location", "/c.key"),
            ("ssl.key.password", "k3y"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "pa ss"),
            ("enable.idempotence", "true"),
            ("compression.type", "lz4"),
        ];
        for (key, value) in expected {
            assert_eq!(c.get(key), Some(value), "{key}");
        }
        let consumer = tls_and_sasl.client_config(ClientRole::Consumer).unwrap();
        assert_eq!(consumer.get("sasl.password"), Some("pa ss"));
        assert_eq!(consumer.get("bootstrap.servers"), None, "the reader's own brokers");
        assert_eq!(consumer.get("enable.idempotence"), None, "no producer settings");

        let c = kafka(serde_json::json!({
            "tls": {}, "compression": "lz4",
            "librdkafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
        }))
        .client_config(ClientRole::Producer)
        .unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"), "raw options apply last");
        assert_eq!(c.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(c.get("ssl.ca.location"), None, "the system's CA store");
        assert_eq!(c.get("compression.type"), Some("lz4"));
        let c = kafka(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}})).client_config(ClientRole::Producer).unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_PLAINTEXT"));
        assert_eq!(c.get("sasl.password"), Some("p"));
        let c = kafka(serde_json::json!({})).client_config(ClientRole::Producer).unwrap();
        assert_eq!(c.get("security.protocol"), None, "librdkafka's default, PLAINTEXT");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unreadable_secret_file_is_an_error_naming_the_key_and_the_path() {
        let cfg = kafka(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password_file": "/nonexistent/pw"}}));
        for role in [ClientRole::Producer, ClientRole::Consumer] {
            let message = cfg.client_config(role).unwrap_err().to_string();
            assert!(message.contains("sasl.password_file") && message.contains("/nonexistent/pw"), "{message}");
        }
    }

    #[test]
    fn debug_output_hides_the_password() {
        let k = kafka(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password": "hunter2"}}));
        let shown = format!("{k:?}");
        assert!(!shown.contains("hunter2") && shown.contains("***"), "{shown}");
    }
}
