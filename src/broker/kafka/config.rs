//! The librdkafka settings of a client of the brokers of a Kafka sink's configuration:
//! its producer, or a reader of its topics.

use rdkafka::config::ClientConfig;

use crate::config::{KafkaConfig, Secret, SecretFileError};

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

/// The librdkafka settings of `cfg` for `role`: TLS, SASL, then the raw `librdkafka`
/// options (last: they override). Secret files are read now; an error names the key and
/// the file, never the content.
pub fn client_config(cfg: &KafkaConfig, role: ClientRole) -> Result<ClientConfig, SecretFileError> {
    let mut c = ClientConfig::new();
    if role == ClientRole::Producer {
        c.set("bootstrap.servers", &cfg.brokers)
            // Per-partition order through retries, nothing lost or duplicated by the producer.
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // Never give up on a record: a broker outage back-pressures the watches instead of
            // dropping events (0 = no timeout).
            .set("message.timeout.ms", "0")
            // Java-compatible partitioning, so other producers place the same key alike.
            .set("partitioner", "murmur2_random")
            .set("compression.type", cfg.compression.as_str())
            .set("queue.buffering.max.kbytes", QUEUE_MAX_KBYTES)
            .set("linger.ms", "5");
    }
    if let Some(protocol) = cfg.security_protocol() {
        c.set("security.protocol", protocol);
    }
    if let Some(tls) = &cfg.tls {
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
    if let Some(sasl) = &cfg.sasl {
        let password = match (&sasl.password, &sasl.password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(file)) => Secret::from_file("sasl.password_file", file)?,
            // Rejected by validation; the broker refuses it the same way.
            (None, None) => Secret::new(""),
        };
        c.set("sasl.mechanism", sasl.mechanism.as_str()).set("sasl.username", &sasl.username).set("sasl.password", password.expose());
    }
    for (k, v) in &cfg.librdkafka {
        c.set(k, v);
    }
    Ok(c)
}

/// The settings of a reader of `brokers` (with `connection`: that sink's TLS, SASL and
/// librdkafka settings) that commits nothing under `group`, reads committed records only
/// and reports the end of each partition.
pub fn reader_config(brokers: &str, connection: Option<&KafkaConfig>, group: &str) -> Result<ClientConfig, SecretFileError> {
    let mut config = match connection {
        Some(k) => client_config(k, ClientRole::Consumer)?,
        None => ClientConfig::new(),
    };
    // The broker holds a fetch at a partition's end this long (librdkafka's default: 500 ms);
    // reading stops at every partition's end, which each such wait would delay. A prefetch
    // of 8 MB (librdkafka's default: 64 MB) reads as fast, and keeps what a reader that runs
    // for months (`rebuild --follow`) holds from swinging with how far ahead it fetched.
    let reader = [
        ("bootstrap.servers", brokers),
        ("group.id", group),
        ("enable.auto.commit", "false"),
        ("fetch.wait.max.ms", "100"),
        ("queued.max.messages.kbytes", "8192"),
    ];
    for (key, value) in reader {
        // The sink's raw librdkafka options win, as they do over its producer's settings.
        if config.get(key).is_none() {
            config.set(key, value);
        }
    }
    // Not overridable: a fenced route's aborted transactions stay in the log, and reading
    // stops at the partition's end, which transaction markers (never delivered) may occupy.
    config.set("isolation.level", "read_committed").set("enable.partition.eof", "true");
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_and_sasl_become_librdkafka_settings_and_raw_options_override_them() {
        let dir = std::env::temp_dir().join(format!("deltaship-kafka-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (password, key_password) = (dir.join("password"), dir.join("key-password"));
        std::fs::write(&password, "pa ss\n").unwrap();
        std::fs::write(&key_password, "k3y\r\n").unwrap();
        let tls_and_sasl = KafkaConfig::fixture(serde_json::json!({
            "tls": {"ca_file": "/ca.pem", "cert_file": "/c.pem", "key_file": "/c.key", "key_password_file": key_password},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "u", "password_file": password},
        }));
        let c = client_config(&tls_and_sasl, ClientRole::Producer).unwrap();
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
        let consumer = client_config(&tls_and_sasl, ClientRole::Consumer).unwrap();
        assert_eq!(consumer.get("sasl.password"), Some("pa ss"));
        assert_eq!(consumer.get("bootstrap.servers"), None, "the reader's own brokers");
        assert_eq!(consumer.get("enable.idempotence"), None, "no producer settings");

        let raw = KafkaConfig::fixture(serde_json::json!({
            "tls": {}, "compression": "lz4",
            "librdkafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
        }));
        let c = client_config(&raw, ClientRole::Producer).unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"), "raw options apply last");
        assert_eq!(c.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(c.get("ssl.ca.location"), None, "the system's CA store");
        assert_eq!(c.get("compression.type"), Some("lz4"));
        let c =
            client_config(&KafkaConfig::fixture(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}})), ClientRole::Producer)
                .unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_PLAINTEXT"));
        assert_eq!(c.get("sasl.password"), Some("p"));
        let c = client_config(&KafkaConfig::fixture(serde_json::json!({})), ClientRole::Producer).unwrap();
        assert_eq!(c.get("security.protocol"), None, "librdkafka's default, PLAINTEXT");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reader_prefetches_little_reads_committed_records_and_the_sinks_raw_options_win() {
        let plain = reader_config("b:1", None, "g").unwrap();
        for (key, value) in [("bootstrap.servers", "b:1"), ("group.id", "g"), ("queued.max.messages.kbytes", "8192"), ("isolation.level", "read_committed")] {
            assert_eq!(plain.get(key), Some(value), "{key}");
        }
        let raw = KafkaConfig::fixture(serde_json::json!({"librdkafka": {"queued.max.messages.kbytes": "65536", "isolation.level": "read_uncommitted"}}));
        let c = reader_config("b:1", Some(&raw), "g").unwrap();
        assert_eq!(c.get("queued.max.messages.kbytes"), Some("65536"));
        assert_eq!(c.get("isolation.level"), Some("read_committed"), "not overridable");
    }

    #[test]
    fn an_unreadable_secret_file_is_an_error_naming_the_key_and_the_path() {
        let cfg = KafkaConfig::fixture(serde_json::json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password_file": "/nonexistent/pw"}}));
        for role in [ClientRole::Producer, ClientRole::Consumer] {
            let message = client_config(&cfg, role).unwrap_err().to_string();
            assert!(message.contains("sasl.password_file") && message.contains("/nonexistent/pw"), "{message}");
        }
    }
}
