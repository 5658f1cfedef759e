//! The Kafka sink: CloudEvents Kafka binding over an idempotent rdkafka producer.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer, PurgeConfig};
use rdkafka::util::Timeout;

use super::{SendError, read_secret};
use super::kafka_log::{Cause, QuietContext};
use super::kafka_recover::{Progress, STATISTICS_INTERVAL_MS, Tracked};
use super::encode::{STRUCTURED_CONTENT_TYPE, binary_attributes, data_content_type, structured_bytes};
use crate::config::{ContentMode, KafkaConfig, Secret, mask_secrets_in};
use crate::event::{Envelope, EnvelopeKind};
use crate::model::ChangeType;

/// librdkafka's own queue would buffer up to 1 GiB by default; deltaship bounds what is in
/// flight itself (delivery.max_in_flight), so a small cap here keeps memory bounded even
/// with large objects.
const QUEUE_MAX_KBYTES: &str = "65536";

/// How old a client error may be to explain a failed metadata request: a minute, the
/// interval of the client error log lines.
const RECENT_CAUSE: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct KafkaSink {
    shared: Arc<Shared>,
    content_mode: ContentMode,
    tombstones: bool,
}

/// The producer, replaceable when it is stuck (kafka_recover), and what it takes to make
/// a new one.
struct Shared {
    config: ClientConfig,
    /// The producers' context, for the cause of failed metadata requests (a client's own
    /// context is not reachable through a FutureProducer); shared by every producer.
    context: QuietContext,
    producer: RwLock<FutureProducer<QuietContext>>,
    progress: Arc<Progress>,
}

impl KafkaSink {
    pub fn new(cfg: &KafkaConfig) -> Result<KafkaSink, SendError> {
        let config = client_config(cfg)?;
        let context = QuietContext::default();
        let producer = create_producer(&config, &context)?;
        Ok(KafkaSink {
            shared: Arc::new(Shared {
                config,
                context,
                producer: RwLock::new(producer),
                progress: Arc::default(),
            }),
            content_mode: cfg.content_mode,
            tombstones: cfg.tombstones,
        })
    }

    /// The current producer (a cheap handle).
    fn producer(&self) -> FutureProducer<QuietContext> {
        self.shared.producer.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn client_config(&self) -> &ClientConfig {
        &self.shared.config
    }

    pub(super) fn context(&self) -> &QuietContext {
        &self.shared.context
    }

    pub(super) fn progress(&self) -> &Progress {
        &self.shared.progress
    }

    /// Puts a new producer in place of the current one, whose records fail with a purge
    /// error and are sent again by the dispatcher through the new one.
    pub(super) fn replace_producer(&self) -> Result<(), SendError> {
        let fresh = create_producer(&self.shared.config, &self.shared.context)?;
        let old = std::mem::replace(&mut *self.shared.producer.write().unwrap_or_else(|p| p.into_inner()), fresh);
        // Dropping a producer purges and flushes it, which may block for a moment.
        tokio::task::spawn_blocking(move || drop(old));
        Ok(())
    }

    /// Sends one event; markers go to every partition of the topic. Resolves when the
    /// broker acknowledged every record (acks=all).
    pub async fn send(&self, env: &Envelope) -> Result<(), SendError> {
        let (payload, headers) = encode(env, self.content_mode);
        match env.kind {
            EnvelopeKind::Marker(_) => {
                let partitions = self.partitions(&env.destination).await?;
                let mut pending = Vec::with_capacity(partitions.len());
                for p in partitions {
                    pending.push(self.produce(&env.destination, &env.key, Some(&payload[..]), headers.clone(), Some(p))?);
                }
                for d in pending {
                    await_delivery(d).await?;
                }
            }
            EnvelopeKind::Object(change) => {
                let d = self.produce(&env.destination, &env.key, Some(&payload[..]), headers, None)?;
                await_delivery(d).await?;
                if self.tombstones && change == ChangeType::Deleted {
                    let d = self.produce(&env.destination, &env.key, None, OwnedHeaders::new(), None)?;
                    await_delivery(d).await?;
                }
            }
        }
        Ok(())
    }

    fn produce(
        &self,
        topic: &str,
        key: &str,
        payload: Option<&[u8]>,
        headers: OwnedHeaders,
        partition: Option<i32>,
    ) -> Result<Tracked<DeliveryFuture>, SendError> {
        let mut record = FutureRecord::<str, [u8]>::to(topic).key(key).headers(headers);
        if let Some(p) = payload {
            record = record.payload(p);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        let delivery = self.producer().send_result(record).map_err(|(e, _)| classify(e))?;
        Ok(self.shared.progress.track(delivery))
    }

    /// The partitions of `topic`, from fresh metadata (markers are rare; partitions may
    /// have been added since the last one).
    async fn partitions(&self, topic: &str) -> Result<Vec<i32>, SendError> {
        let producer = self.producer();
        let topic = topic.to_string();
        let md = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(Some(&topic), Timeout::After(Duration::from_secs(10)))
                .map(|md| md.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>()))
        })
        .await
        .map_err(|e| SendError::Retryable {
            kind: "metadata",
            message: e.to_string(),
        })?
        .map_err(|e| explain(&self.shared.context, e))?;
        match md {
            Some(p) if !p.is_empty() => Ok(p),
            _ => Err(SendError::Retryable {
                kind: "metadata",
                message: "the topic has no partitions yet".into(),
            }),
        }
    }

    /// Broker metadata within `timeout`: the sink is connected when this succeeds.
    /// A failure names the client's latest connection error (refused credentials, failed
    /// TLS) when there is one.
    pub async fn probe(&self, timeout: Duration) -> Result<usize, SendError> {
        let producer = self.producer();
        let md = tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, Timeout::After(timeout)))
            .await
            .map_err(|e| SendError::Retryable {
                kind: "metadata",
                message: e.to_string(),
            })?
            .map_err(|e| explain(&self.shared.context, e))?;
        self.shared.context.clear_cause();
        Ok(md.brokers().len())
    }

    /// Partition counts of `topics` (None when a topic does not exist), for `check`.
    pub async fn topic_partitions(&self, topics: Vec<String>) -> Result<Vec<(String, Option<usize>)>, SendError> {
        let (producer, context) = (self.producer(), self.shared.context.clone());
        tokio::task::spawn_blocking(move || {
            let md = producer
                .client()
                .fetch_metadata(None, Timeout::After(Duration::from_secs(10)))
                .map_err(|e| explain(&context, e))?;
            Ok(topics
                .into_iter()
                .map(|t| {
                    let n = md
                        .topics()
                        .iter()
                        .find(|m| m.name() == t && m.error().is_none())
                        .map(|m| m.partitions().len());
                    (t, n)
                })
                .collect())
        })
        .await
        .map_err(|e| SendError::Retryable {
            kind: "metadata",
            message: e.to_string(),
        })?
    }

    /// Drops every record librdkafka has queued or in flight.
    pub fn purge(&self) {
        self.producer().purge(PurgeConfig::default().queue().inflight());
    }

    /// Waits until everything queued in librdkafka is delivered, at most `timeout`.
    pub async fn flush(&self, timeout: Duration) -> Result<(), SendError> {
        let producer = self.producer();
        tokio::task::spawn_blocking(move || producer.flush(Timeout::After(timeout)))
            .await
            .map_err(|e| SendError::Retryable {
                kind: "flush",
                message: e.to_string(),
            })?
            .map_err(classify)
    }
}

/// The record value and headers of `env` in `mode`, per the CloudEvents Kafka binding.
pub fn encode(env: &Envelope, mode: ContentMode) -> (Bytes, OwnedHeaders) {
    let (payload, content_type, attrs): (_, &str, Vec<(String, String)>) = match mode {
        ContentMode::Binary => (
            env.data.clone(),
            data_content_type(&env.event),
            binary_attributes(&env.event)
                .filter(|(name, _)| *name != "datacontenttype")
                .map(|(name, value)| (format!("ce_{name}"), value))
                .collect(),
        ),
        ContentMode::Structured => (structured_bytes(&env.event, &env.data).into(), STRUCTURED_CONTENT_TYPE, Vec::new()),
    };
    let mut headers = OwnedHeaders::new_with_capacity(attrs.len() + 1).insert(Header {
        key: "content-type",
        value: Some(content_type),
    });
    for (k, v) in &attrs {
        headers = headers.insert(Header { key: k, value: Some(v) });
    }
    (payload, headers)
}

/// Creates the missing topics among `topics` with the configured partitions.
pub async fn create_topics(cfg: &KafkaConfig, topics: &[String]) -> Result<(), SendError> {
    let Some(tc) = &cfg.create_topics else { return Ok(()) };
    let config = client_config(cfg)?;
    let admin: AdminClient<QuietContext> = config.create_with_context(QuietContext::default()).map_err(|e| SendError::Fatal {
        kind: "config",
        message: format!("cannot create the Kafka admin client: {}", masked(&config, e)),
    })?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| {
            tc.config
                .iter()
                .fold(NewTopic::new(t, tc.partitions, TopicReplication::Fixed(tc.replication_factor)), |n, (k, v)| n.set(k, v))
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin.create_topics(&new, &opts).await.map_err(|e| explain(admin.inner().context(), e))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                return Err(SendError::Fatal {
                    kind: "create_topic",
                    message: format!("cannot create topic {topic}: {code}"),
                });
            }
        }
    }
    Ok(())
}

/// The producer settings of the sink (the benchmarks' raw baseline uses them too), with
/// its connection settings. Fails when a secret file cannot be read.
pub fn client_config(cfg: &KafkaConfig) -> Result<ClientConfig, SendError> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        // Per-partition order through retries, nothing lost or duplicated by the producer.
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // Never give up on a record: a broker outage back-pressures the watches instead of
        // dropping events (0 = no timeout).
        .set("message.timeout.ms", "0")
        // Java-compatible partitioning, so other producers place the same key alike.
        .set("partitioner", "murmur2_random")
        .set("compression.type", &cfg.compression)
        .set("queue.buffering.max.kbytes", QUEUE_MAX_KBYTES)
        .set("linger.ms", "5");
    connection_settings(&mut c, cfg)?;
    Ok(c)
}

/// TLS, SASL, then the raw `librdkafka` options (last: they override), for every client of
/// the sink's brokers: the producer, the admin client and `rebuild --config`'s consumer.
/// Secret files are read now; an error names the key and the file, never the content.
pub fn connection_settings(c: &mut ClientConfig, cfg: &KafkaConfig) -> Result<(), SendError> {
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
            c.set("ssl.key.password", read_secret("tls.key_password_file", file)?.expose());
        }
    }
    if let Some(sasl) = &cfg.sasl {
        let password = match (&sasl.password, &sasl.password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(file)) => read_secret("sasl.password_file", file)?,
            // Rejected by validation; the broker refuses it the same way.
            (None, None) => Secret::new(""),
        };
        c.set("sasl.mechanism", sasl.mechanism.as_str())
            .set("sasl.username", &sasl.username)
            .set("sasl.password", password.expose());
    }
    for (k, v) in &cfg.librdkafka {
        c.set(k, v);
    }
    Ok(())
}

/// A new producer with `config`, sharing `context`; it reports its statistics, for the
/// brokers it knows of (kafka_recover).
fn create_producer(config: &ClientConfig, context: &QuietContext) -> Result<FutureProducer<QuietContext>, SendError> {
    let mut config = config.clone();
    config.set("statistics.interval.ms", STATISTICS_INTERVAL_MS);
    config.create_with_context(context.clone()).map_err(|e| SendError::Fatal {
        kind: "config",
        message: format!("cannot create the Kafka producer: {}", masked(&config, e)),
    })
}

/// A client error with the values of secret options masked: librdkafka echoes the value
/// of an option it refuses.
fn masked(config: &ClientConfig, e: KafkaError) -> String {
    mask_secrets_in(&e.to_string(), config.config_map())
}

async fn await_delivery(d: Tracked<DeliveryFuture>) -> Result<(), SendError> {
    match d.delivery.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(classify(e)),
        Err(_) => Err(SendError::Retryable {
            kind: "canceled",
            message: "the producer dropped the delivery report".into(),
        }),
    }
}

/// `classify(e)`, naming the client's latest connection error when `e` only says that no
/// broker answered: a metadata request fails or times out on transport while SASL refuses
/// the credentials or the TLS handshake fails on every connection attempt. Stays
/// retryable: librdkafka keeps retrying, and the cause can go away without a restart (a
/// SCRAM user created or a broker certificate replaced after start-up).
fn explain(ctx: &QuietContext, e: KafkaError) -> SendError {
    match (classify(e), ctx.recent_cause(RECENT_CAUSE)) {
        (SendError::Retryable { kind, message }, Some(Cause { kind: cause, text, .. })) => match cause {
            "authentication" => SendError::Retryable {
                kind: "authentication",
                message: format!("{text}; the brokers refused the credentials: check the sink's sasl settings (mechanism, username, password)"),
            },
            "tls" => SendError::Retryable {
                kind: "tls",
                message: format!(
                    "{text}; TLS failed: check the sink's tls settings (ca_file must hold the brokers' CA; cert_file and key_file a client certificate the brokers trust)"
                ),
            },
            _ => SendError::Retryable {
                kind,
                message: format!("{message}; the client reports: {text}"),
            },
        },
        (other, _) => other,
    }
}

/// Retryable unless retrying cannot help (the broker or the config refuses the record).
fn classify(e: KafkaError) -> SendError {
    use RDKafkaErrorCode as C;
    let message = e.to_string();
    match e.rdkafka_error_code() {
        Some(C::MessageSizeTooLarge) | Some(C::InvalidMessageSize) => SendError::TooLarge { message },
        Some(C::TopicAuthorizationFailed) | Some(C::ClusterAuthorizationFailed) => SendError::Fatal {
            kind: "authorization",
            message,
        },
        Some(C::SaslAuthenticationFailed) | Some(C::Authentication) => SendError::Fatal {
            kind: "authentication",
            message,
        },
        Some(C::InvalidTopic) => SendError::Fatal { kind: "topic", message },
        // The topic does not exist and the broker does not create it: create it or set
        // sink.create_topics.
        Some(C::UnknownTopic) | Some(C::UnknownTopicOrPartition) => SendError::Fatal {
            kind: "unknown_topic",
            message,
        },
        Some(C::QueueFull) => SendError::Retryable { kind: "queue_full", message },
        // The producer was replaced (kafka_recover) or purged: sent again through the
        // current one.
        Some(C::PurgeQueue) | Some(C::PurgeInflight) => SendError::Retryable { kind: "purged", message },
        Some(C::MessageTimedOut) | Some(C::RequestTimedOut) => SendError::Retryable { kind: "timeout", message },
        _ => SendError::Retryable { kind: "broker", message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(v: serde_json::Value) -> KafkaConfig {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tls_and_sasl_become_librdkafka_settings_and_raw_options_override_them() {
        let dir = std::env::temp_dir().join(format!("deltaship-kafka-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (password, key_password) = (dir.join("password"), dir.join("key-password"));
        std::fs::write(&password, "pa ss\n").unwrap();
        std::fs::write(&key_password, "k3y\r\n").unwrap();
        let c = client_config(&kafka(serde_json::json!({
            "brokers": "b:1",
            "tls": {"ca_file": "/ca.pem", "cert_file": "/c.pem", "key_file": "/c.key", "key_password_file": key_password},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "u", "password_file": password},
        })))
        .unwrap();
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
        ];
        for (key, value) in expected {
            assert_eq!(c.get(key), Some(value), "{key}");
        }

        let c = client_config(&kafka(serde_json::json!({
            "brokers": "b:1", "tls": {},
            "librdkafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
        })))
        .unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"), "raw options apply last");
        assert_eq!(c.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(c.get("ssl.ca.location"), None, "the system's CA store");
        let c = client_config(&kafka(serde_json::json!({"brokers": "b:1", "sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}}))).unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_PLAINTEXT"));
        assert_eq!(c.get("sasl.password"), Some("p"));
        let c = client_config(&kafka(serde_json::json!({"brokers": "b:1"}))).unwrap();
        assert_eq!(c.get("security.protocol"), None, "librdkafka's default, PLAINTEXT");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unreadable_secret_file_is_a_config_error_naming_the_key_and_the_path() {
        let cfg = kafka(serde_json::json!({
            "brokers": "b:1", "sasl": {"mechanism": "PLAIN", "username": "u", "password_file": "/nonexistent/pw"},
        }));
        match client_config(&cfg) {
            Err(SendError::Fatal { kind: "config", message }) => {
                assert!(message.contains("sasl.password_file") && message.contains("/nonexistent/pw"), "{message}")
            }
            other => panic!("expected a config error, got {:?}", other.map(|_| ())),
        }
        assert!(KafkaSink::new(&cfg).is_err());
    }

    #[test]
    fn a_failed_metadata_request_names_the_latest_connection_error() {
        use rdkafka::ClientContext;
        let ctx = QuietContext::default();
        let timeout = || KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(explain(&ctx, timeout()).kind(), "broker");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::Authentication), "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed");
        let e = explain(&ctx, timeout());
        assert!(matches!(e, SendError::Retryable { kind: "authentication", .. }), "{e:?}");
        assert!(e.to_string().contains("SASL authentication error"), "{e}");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "ssl://h:1/bootstrap: Receive failed: SSL routines::sslv3 alert bad certificate");
        let e = explain(&ctx, timeout());
        assert!(matches!(e, SendError::Retryable { kind: "tls", .. }) && e.to_string().contains("TLS failed"), "{e}");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "h:1/bootstrap: Connect to ipv4#h:1 failed: Connection refused");
        let e = explain(&ctx, timeout());
        assert!(matches!(e, SendError::Retryable { kind: "broker", .. }) && e.to_string().contains("Connection refused"), "{e}");
        // A refusal of the record itself is not explained away.
        let refused = explain(&ctx, KafkaError::MetadataFetch(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert!(matches!(refused, SendError::Fatal { kind: "authorization", .. }), "{refused:?}");
    }
}
