//! The Kafka sink's producer and its send path: one record per event (markers to every
//! partition), resolved on the brokers' acknowledgement.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{Producer as _, PurgeConfig};
use rdkafka::util::Timeout;

use super::binding::encode;
use super::delivery::{Delivery, Producer, Undelivered};
use super::error::{classify, client_refused};
use super::log::QuietContext;
use super::partition;
use super::recover::{Progress, STATISTICS_INTERVAL_MS, Tracked};
use crate::config::{ClientRole, ContentMode, KafkaConfig};
use crate::event::{Envelope, EnvelopeKind};
use crate::model::{ChangeType, Placement};
use crate::sink::{ErrorKind, Failure, SendError, SinkError};

/// How long one `expedite` keeps librdkafka from lingering, at most. While the brokers
/// answer, what a barrier waits for is acknowledged within milliseconds (a new producer's
/// first connection takes longer); a thread of the blocking pool waits this long only while
/// they do not, and then lingering does not matter.
const EXPEDITE_WAIT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct KafkaSink {
    shared: Arc<Shared>,
    content_mode: ContentMode,
    tombstones: bool,
}

/// The producer, replaceable when it is stuck (kafka::recover), and what it takes to make
/// a new one.
struct Shared {
    config: ClientConfig,
    /// The producers' context, for the cause of failed metadata requests; shared by every
    /// producer.
    context: QuietContext,
    producer: RwLock<Producer>,
    progress: Arc<Progress>,
}

impl KafkaSink {
    pub fn new(cfg: &KafkaConfig) -> Result<KafkaSink, SinkError> {
        let config = cfg.client_config(ClientRole::Producer)?;
        let context = QuietContext::default();
        let producer = create_producer(&config, &context)?;
        Ok(KafkaSink {
            shared: Arc::new(Shared { config, context, producer: RwLock::new(producer), progress: Arc::default() }),
            content_mode: cfg.content_mode,
            tombstones: cfg.tombstones,
        })
    }

    /// The current producer (a cheap handle).
    pub(super) fn producer(&self) -> Producer {
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
    pub(super) fn replace_producer(&self) -> Result<(), SinkError> {
        let fresh = create_producer(&self.shared.config, &self.shared.context)?;
        let old = std::mem::replace(&mut *self.shared.producer.write().unwrap_or_else(|p| p.into_inner()), fresh);
        old.purge(PurgeConfig::default().queue().inflight());
        Ok(())
    }

    /// Sends one event; markers go to every partition of the topic. Resolves when the
    /// broker acknowledged every record (acks=all), with where an object event was stored
    /// (a marker, stored once per partition, has no one place).
    pub async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
        let (payload, headers) = encode(env, self.content_mode);
        match env.kind {
            EnvelopeKind::Marker(_) => {
                let partitions = self.partitions(&env.destination).await?;
                let mut pending = Vec::with_capacity(partitions.len());
                for &p in &partitions {
                    // A marker with a state carries each partition's own count and digest.
                    let d = match partition::for_partition(env, p, partitions.len()) {
                        Some(copy) => {
                            let (payload, headers) = encode(&copy, self.content_mode);
                            self.produce(&env.destination, env.key(), Some(&payload[..]), headers, Some(p))?
                        }
                        None => self.produce(&env.destination, env.key(), Some(&payload[..]), headers.clone(), Some(p))?,
                    };
                    pending.push(d);
                }
                // A marker is a barrier: nothing more joins its batches until it is
                // acknowledged, so lingering for more would only delay it.
                self.expedite();
                for d in pending {
                    await_delivery(d).await?;
                }
                Ok(None)
            }
            EnvelopeKind::Object(change) => {
                let d = self.produce(&env.destination, env.key(), Some(&payload[..]), headers, None)?;
                let placed = await_delivery(d).await?;
                if self.tombstones && change == ChangeType::Deleted {
                    let d = self.produce(&env.destination, env.key(), None, OwnedHeaders::new(), None)?;
                    await_delivery(d).await?;
                }
                Ok(Some(placed))
            }
        }
    }

    fn produce(&self, topic: &str, key: &str, payload: Option<&[u8]>, headers: OwnedHeaders, partition: Option<i32>) -> Result<Tracked<Delivery>, SendError> {
        let delivery = self.producer().send(topic, key, payload, Some(headers), partition).map_err(classify)?;
        Ok(self.shared.progress.track(delivery))
    }

    /// Has librdkafka send what it holds at once rather than linger for more records to
    /// batch (`linger.ms`), until nothing is outstanding (at most `EXPEDITE_WAIT`): for a
    /// barrier, behind which nothing more comes until everything before it is acknowledged.
    /// It returns at once; a thread of the blocking pool waits.
    pub fn expedite(&self) {
        let producer = self.producer();
        drop(tokio::task::spawn_blocking(move || producer.expedite(EXPEDITE_WAIT)));
    }

    /// Drops every record librdkafka has queued or in flight.
    pub fn purge(&self) {
        self.producer().purge(PurgeConfig::default().queue().inflight());
    }

    /// Waits until everything queued in librdkafka is delivered, at most `timeout`.
    pub async fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        let producer = self.producer();
        tokio::task::spawn_blocking(move || producer.flush(Timeout::After(timeout)))
            .await
            .map_err(|e| SendError::Retryable { kind: ErrorKind::Flush, source: Failure::Blocking(e) })?
            .map_err(|e| classify(e).into())
    }
}

/// A new producer with `config`, sharing `context`; it reports its statistics, for the
/// brokers it knows of (kafka::recover).
fn create_producer(config: &ClientConfig, context: &QuietContext) -> Result<Producer, SinkError> {
    let mut config = config.clone();
    config.set("statistics.interval.ms", STATISTICS_INTERVAL_MS);
    Producer::create(&config, context).map_err(|e| client_refused("producer", &config, e))
}

async fn await_delivery(d: Tracked<Delivery>) -> Result<Placement, SendError> {
    match d.delivery.await {
        Ok(Ok(placed)) => Ok(placed),
        Ok(Err(Undelivered::Kafka(e))) => Err(classify(e)),
        Ok(Err(Undelivered::Unconfirmed)) => Err(SendError::Retryable { kind: ErrorKind::Unconfirmed, source: Failure::Unconfirmed }),
        Err(e) => Err(SendError::Retryable { kind: ErrorKind::Canceled, source: Failure::DeliveryDropped(e) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_with_an_unreadable_secret_file_is_not_built() {
        let cfg: KafkaConfig = serde_json::from_value(serde_json::json!({
            "brokers": "b:1", "sasl": {"mechanism": "PLAIN", "username": "u", "password_file": "/nonexistent/pw"},
        }))
        .unwrap();
        match KafkaSink::new(&cfg) {
            Err(e @ SinkError::SecretFile(_)) => assert!(e.to_string().starts_with("config: sasl.password_file: cannot read /nonexistent/pw"), "{e}"),
            other => panic!("expected a secret file error, got {:?}", other.map(|_| ())),
        }
    }
}
