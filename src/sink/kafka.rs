//! The Kafka sink: CloudEvents Kafka binding over an idempotent rdkafka producer.

use std::time::Duration;

use bytes::Bytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer, PurgeConfig};
use rdkafka::util::Timeout;

use super::SendError;
use super::kafka_log::QuietContext;
use super::encode::{STRUCTURED_CONTENT_TYPE, binary_attributes, data_content_type, structured_bytes};
use crate::config::{ContentMode, KafkaConfig};
use crate::event::{Envelope, EnvelopeKind};
use crate::change::ChangeType;

/// librdkafka's own queue would buffer up to 1 GiB by default; deltaship bounds what is in
/// flight itself (delivery.max_in_flight), so a small cap here keeps memory bounded even
/// with large objects.
const QUEUE_MAX_KBYTES: &str = "65536";

#[derive(Clone)]
pub struct KafkaSink {
    producer: FutureProducer<QuietContext>,
    content_mode: ContentMode,
    tombstones: bool,
}

impl KafkaSink {
    pub fn new(cfg: &KafkaConfig) -> Result<KafkaSink, SendError> {
        let producer: FutureProducer<QuietContext> = client_config(cfg).create_with_context(QuietContext::default()).map_err(|e| SendError::Fatal {
            kind: "config",
            message: format!("cannot create the Kafka producer: {e}"),
        })?;
        Ok(KafkaSink {
            producer,
            content_mode: cfg.content_mode,
            tombstones: cfg.tombstones,
        })
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
    ) -> Result<rdkafka::producer::DeliveryFuture, SendError> {
        let mut record = FutureRecord::<str, [u8]>::to(topic).key(key).headers(headers);
        if let Some(p) = payload {
            record = record.payload(p);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        self.producer.send_result(record).map_err(|(e, _)| classify(e))
    }

    /// The partitions of `topic`, from fresh metadata (markers are rare; partitions may
    /// have been added since the last one).
    async fn partitions(&self, topic: &str) -> Result<Vec<i32>, SendError> {
        let producer = self.producer.clone();
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
        .map_err(classify)?;
        match md {
            Some(p) if !p.is_empty() => Ok(p),
            _ => Err(SendError::Retryable {
                kind: "metadata",
                message: "the topic has no partitions yet".into(),
            }),
        }
    }

    /// Broker metadata within `timeout`: the sink is connected when this succeeds.
    pub async fn probe(&self, timeout: Duration) -> Result<usize, SendError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, Timeout::After(timeout)))
            .await
            .map_err(|e| SendError::Retryable {
                kind: "metadata",
                message: e.to_string(),
            })?
            .map(|md| md.brokers().len())
            .map_err(classify)
    }

    /// Partition counts of `topics` (None when a topic does not exist), for `check`.
    pub async fn topic_partitions(&self, topics: Vec<String>) -> Result<Vec<(String, Option<usize>)>, SendError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || {
            let md = producer
                .client()
                .fetch_metadata(None, Timeout::After(Duration::from_secs(10)))
                .map_err(classify)?;
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
        self.producer.purge(PurgeConfig::default().queue().inflight());
    }

    /// Waits until everything queued in librdkafka is delivered, at most `timeout`.
    pub async fn flush(&self, timeout: Duration) -> Result<(), SendError> {
        let producer = self.producer.clone();
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
    let admin: AdminClient<QuietContext> = client_config(cfg).create_with_context(QuietContext::default()).map_err(|e| SendError::Fatal {
        kind: "config",
        message: format!("cannot create the Kafka admin client: {e}"),
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
    let results = admin.create_topics(&new, &opts).await.map_err(classify)?;
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

/// The producer settings of the sink (the benchmarks' raw baseline uses them too).
pub fn client_config(cfg: &KafkaConfig) -> ClientConfig {
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
    for (k, v) in &cfg.librdkafka {
        c.set(k, v);
    }
    c
}

async fn await_delivery(d: rdkafka::producer::DeliveryFuture) -> Result<(), SendError> {
    match d.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(classify(e)),
        Err(_) => Err(SendError::Retryable {
            kind: "canceled",
            message: "the producer dropped the delivery report".into(),
        }),
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
        Some(C::MessageTimedOut) | Some(C::RequestTimedOut) => SendError::Retryable { kind: "timeout", message },
        _ => SendError::Retryable { kind: "broker", message },
    }
}
