//! A Kafka route's checkpoint: a compacted topic of one partition on the route's brokers,
//! one record per key (the checkpoint key as the record key), a tombstone for a delete.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::producer::{Producer as _, PurgeConfig};
use rdkafka::{Offset, TopicPartitionList};

use super::error::{Refusal, StoreError, TopicError};
use super::inflight::{self, STALL, Stop};
use crate::broker::kafka::{ClientError, ClientRole, Producer, QuietContext, Undelivered, client_config, reader_config};
use crate::checkpoint::progress::Records;
use crate::config::KafkaConfig;

/// The bound of one metadata, offsets or admin request, and of the wait for the next
/// record while reading.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Records sent and not yet acknowledged, at most: well under librdkafka's queue
/// (`queue.buffering.max.messages`, 100,000).
const WINDOW: usize = 10_000;

pub struct KafkaStore {
    topic: String,
    /// The producer's settings: the sink's connection, with the bounds of a checkpoint write.
    config: ClientConfig,
    /// The reader's settings: the sink's connection.
    reader: ClientConfig,
    /// Shared by the store's clients: their logs, and the cause of a failed request.
    context: QuietContext,
    /// Replaced after a write that timed out (librdkafka can be left with no broker after a
    /// broker restart, and then neither delivers nor fails).
    producer: Mutex<Producer>,
}

/// Why the topic is not ready: for good (it must be fixed first), or for now.
enum NotReady {
    Refused(Refusal),
    Failed(TopicError),
}

impl From<TopicError> for NotReady {
    fn from(e: TopicError) -> NotReady {
        NotReady::Failed(e)
    }
}

impl KafkaStore {
    /// Connects with the sink's settings, and creates the topic when it is missing and
    /// `sink.create_topics` is set (with its replication factor). A topic that is not
    /// compacted or has more than one partition is refused.
    pub async fn open(cfg: &KafkaConfig, topic: &str) -> Result<KafkaStore, StoreError> {
        let fail = |source: TopicError| StoreError::Kafka { topic: topic.to_string(), source };
        let store = KafkaStore::connect(cfg, topic).map_err(|e| fail(e.into()))?;
        store.prepare(cfg).await.map_err(|e| match e {
            NotReady::Refused(reason) => StoreError::Refused { store: format!("topic {topic}"), reason },
            NotReady::Failed(e) => fail(e),
        })?;
        Ok(store)
    }

    /// The store's clients, made with the sink's settings (nothing is requested yet).
    fn connect(cfg: &KafkaConfig, topic: &str) -> Result<KafkaStore, ClientError> {
        let mut config = client_config(cfg, ClientRole::Producer)?;
        // A checkpoint is created by `open` only, compacted; never by a broker that creates
        // the topics a metadata request names (auto.create.topics.enable).
        config.set("allow.auto.create.topics", "false");
        // The sink's producer never gives up on a record (0); a checkpoint write must end.
        config.set("message.timeout.ms", STALL.as_millis().to_string());
        let mut reader = reader_config(&cfg.brokers, Some(cfg), "deltaship-checkpoints")?;
        reader.set("allow.auto.create.topics", "false");
        let context = QuietContext::default();
        let producer = create_producer(&config, &context)?;
        Ok(KafkaStore { topic: topic.to_string(), config, reader, context, producer: Mutex::new(producer) })
    }

    /// Finds the topic, or creates it; then checks its shape.
    async fn prepare(&self, cfg: &KafkaConfig) -> Result<(), NotReady> {
        let admin: AdminClient<QuietContext> =
            self.config.create_with_context(self.context.clone()).map_err(|e| TopicError::from(ClientError::refused("admin client", &self.config, e)))?;
        let partitions = match self.partitions().await? {
            Some(n) => n,
            None => {
                let Some(creation) = &cfg.create_topics else {
                    return Err(NotReady::Refused(Refusal::NoTopic));
                };
                self.create(&admin, creation.replication_factor).await?
            }
        };
        if partitions != 1 {
            return Err(NotReady::Refused(Refusal::Partitions(partitions)));
        }
        let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let described =
            admin.describe_configs(&[ResourceSpecifier::Topic(&self.topic)], &opts).await.map_err(|e| self.explain("cannot read its configuration", e))?;
        let policy = match described.into_iter().next() {
            Some(Ok(resource)) => resource.get("cleanup.policy").and_then(|e| e.value.clone()).unwrap_or_default(),
            Some(Err(code)) => return Err(NotReady::Failed(TopicError::Configuration(code))),
            None => String::new(),
        };
        if policy != "compact" {
            return Err(NotReady::Refused(Refusal::NotCompacted(policy)));
        }
        Ok(())
    }

    /// The topic's partitions, None when it does not exist.
    async fn partitions(&self) -> Result<Option<usize>, TopicError> {
        let (producer, topic) = (self.producer(), self.topic.clone());
        let md = tokio::task::spawn_blocking(move || producer.client().fetch_metadata(Some(&topic), REQUEST_TIMEOUT))
            .await
            .map_err(ClientError::Blocking)?
            .map_err(|e| self.explain("cannot read its metadata", e))?;
        let Some(t) = md.topics().first() else { return Ok(None) };
        match t.error().map(RDKafkaErrorCode::from) {
            None if !t.partitions().is_empty() => Ok(Some(t.partitions().len())),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition) => Ok(None),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => Err(TopicError::DescribeRefused),
            Some(code) => Err(TopicError::Metadata(code)),
            None => Err(TopicError::NoPartitions),
        }
    }

    /// Creates the topic (another replica may just have), and waits until its partition
    /// is known: the number of partitions it has.
    async fn create(&self, admin: &AdminClient<QuietContext>, replication_factor: i32) -> Result<usize, TopicError> {
        let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(replication_factor)).set("cleanup.policy", "compact");
        let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
        let created = admin.create_topics([&topic], &opts).await.map_err(|e| self.explain("cannot create it", e))?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::ClusterAuthorizationFailed)) => {
                    return Err(TopicError::CreateRefused);
                }
                Err((_, code)) => return Err(TopicError::NotCreated(code)),
            }
        }
        tracing::info!(topic = %self.topic, "Created the checkpoint topic");
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            match self.partitions().await {
                Ok(Some(n)) => return Ok(n),
                Err(e) if Instant::now() >= deadline => return Err(e),
                _ if Instant::now() >= deadline => return Err(TopicError::NotShown),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Reads the partition from its beginning to the end it had when reading started.
    pub async fn load(&self, prefix: &str) -> Result<HashMap<String, Vec<u8>>, StoreError> {
        let (config, context, topic, prefix) = (self.reader.clone(), self.context.clone(), self.topic.clone(), format!("{prefix}."));
        tokio::task::spawn_blocking(move || read(&config, &context, &topic, &prefix))
            .await
            .map_err(|e| TopicError::from(ClientError::Blocking(e)))
            .and_then(|read| read)
            .map_err(|source| StoreError::Kafka { topic: self.topic.clone(), source })
    }

    /// Sends the records in order and waits until the brokers acknowledged all of them; a
    /// write that times out leaves a new producer for the next one.
    pub async fn write(&self, records: &Records) -> Result<(), StoreError> {
        let producer = self.producer();
        let producer = &producer;
        let sent = inflight::in_order(records, WINDOW, |(key, value)| async move {
            let delivery = producer.send(&self.topic, key, value.as_deref(), None, Some(0)).map_err(Undelivered::Kafka)?;
            Ok(async move { delivery.await.unwrap_or(Err(Undelivered::Kafka(KafkaError::Canceled))).map(|_| ()) })
        })
        .await;
        let (source, stuck) = match sent {
            Ok(()) => return Ok(()),
            Err(Stop::Stalled) => (TopicError::Unacknowledged(STALL), true),
            Err(Stop::Failed(Undelivered::Kafka(e) | Undelivered::Possibly(e))) => {
                let timed_out = e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut);
                (self.explain("not written", e), timed_out)
            }
            Err(Stop::Failed(unconfirmed)) => (TopicError::Unconfirmed(unconfirmed), false),
        };
        if stuck {
            self.replace_producer().await;
        }
        Err(StoreError::Kafka { topic: self.topic.clone(), source })
    }

    fn producer(&self) -> Producer {
        self.producer.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts a new producer in place of the current one, and purges what the old one still
    /// holds before the next write can send anything.
    async fn replace_producer(&self) {
        match create_producer(&self.config, &self.context) {
            Ok(fresh) => {
                let old = std::mem::replace(&mut *self.producer.lock().unwrap_or_else(|p| p.into_inner()), fresh);
                old.purge(PurgeConfig::default().queue().inflight());
                tracing::warn!(topic = %self.topic, "Checkpoint write timed out; the checkpoint producer was replaced");
            }
            Err(e) => tracing::warn!(topic = %self.topic, error = %e, "Checkpoint write timed out; no new checkpoint producer"),
        }
    }

    /// `e` with its cause, e.g. the refused credentials behind a request that found no broker.
    fn explain(&self, what: &'static str, e: KafkaError) -> TopicError {
        TopicError::Request { what, source: Box::new(ClientError::explained(&self.context, e)) }
    }
}

fn create_producer(config: &ClientConfig, context: &QuietContext) -> Result<Producer, ClientError> {
    Producer::create(config, context).map_err(|e| ClientError::refused("producer", config, e))
}

/// The latest values of the keys that start with `prefix` in partition 0 of `topic`, up to
/// the end it had at the start.
fn read(config: &ClientConfig, context: &QuietContext, topic: &str, prefix: &str) -> Result<HashMap<String, Vec<u8>>, TopicError> {
    let explain = |what, e| TopicError::Request { what, source: Box::new(ClientError::explained(context, e)) };
    let consumer: BaseConsumer<QuietContext> = config.create_with_context(context.clone()).map_err(|e| ClientError::refused("consumer", config, e))?;
    let (low, high) = consumer.fetch_watermarks(topic, 0, REQUEST_TIMEOUT).map_err(|e| explain("cannot read its offsets", e))?;
    let mut latest = HashMap::new();
    if high <= low {
        return Ok(latest);
    }
    let mut from = TopicPartitionList::new();
    let failed = |source| ClientError::Read { topic: topic.to_string(), partition: 0, source };
    from.add_partition_offset(topic, 0, Offset::Beginning).map_err(failed)?;
    consumer.assign(&from).map_err(failed)?;
    loop {
        match consumer.poll(REQUEST_TIMEOUT) {
            Some(Ok(m)) => {
                keep(&mut latest, prefix, m.key(), m.payload());
                if m.offset() + 1 >= high {
                    return Ok(latest);
                }
            }
            // The end, before `high`: compaction removed the last records (expired tombstones).
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(latest),
            Some(Err(e)) => return Err(explain("reading failed", e)),
            None => return Err(ClientError::Silent { topic: topic.to_string(), partition: 0, within: REQUEST_TIMEOUT }.into()),
        }
    }
}

/// Applies one record to `latest`: a value replaces the key's, a tombstone deletes it;
/// keys without `prefix` (other routes' and clusters') are left out.
fn keep(latest: &mut HashMap<String, Vec<u8>>, prefix: &str, key: Option<&[u8]>, value: Option<&[u8]>) {
    let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()).filter(|k| k.starts_with(prefix)) else { return };
    match value {
        Some(v) => latest.insert(key.to_string(), v.to_vec()),
        None => latest.remove(key),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_without_acknowledgement_fails_after_the_bound_and_leaves_a_new_producer() {
        // Nothing listens on the discard port: no broker ever acknowledges.
        let cfg: KafkaConfig = serde_json::from_value(serde_json::json!({"brokers": "127.0.0.1:9"})).unwrap();
        let store = KafkaStore::connect(&cfg, "checkpoints").unwrap();
        let before = store.producer().client().native_ptr();
        let e = store.write(&vec![("c.r.x.w".to_string(), Some(b"1".to_vec()))]).await.unwrap_err();
        assert_eq!(e.to_string(), "checkpoint topic checkpoints: the brokers did not acknowledge a record within 30s");
        assert_ne!(store.producer().client().native_ptr(), before, "replaced");
    }

    #[test]
    fn the_latest_record_of_each_key_under_the_prefix_is_kept_and_tombstones_delete() {
        let mut latest = HashMap::new();
        type Part<'a> = Option<&'a [u8]>;
        let records: [(Part, Part); 7] = [
            (Some(b"c.r.x.w"), Some(b"1")),
            (Some(b"c.r.x.o.a"), Some(b"2")),
            (Some(b"c.r.x.o.b"), Some(b"3")),
            (Some(b"c.r.x.o.a"), None),
            (Some(b"c.r.x.w"), Some(b"4")),
            (Some(b"c.rr.x.w"), Some(b"other route")),
            (None, Some(b"no key")),
        ];
        for (key, value) in records {
            keep(&mut latest, "c.r.", key, value);
        }
        keep(&mut latest, "c.r.", Some(b"c.r.\xff"), Some(b"not UTF-8"));
        assert_eq!(latest, HashMap::from([("c.r.x.w".to_string(), b"4".to_vec()), ("c.r.x.o.b".to_string(), b"3".to_vec())]));
    }
}
