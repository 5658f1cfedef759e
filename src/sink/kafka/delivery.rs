//! The Kafka producer that deltaship's sinks and checkpoint stores send through: each record
//! sent resolves a future with its delivery report, served by a polling thread of the
//! producer's own.
//!
//! Why not rdkafka's FutureProducer: its thread polls in windows of 100 ms, and rdkafka
//! hands librdkafka each window's remaining time in whole milliseconds, so the last
//! fraction of a millisecond of every window is spent in polls of 0 ms in a busy loop. That
//! is a hundredth of a core per producer, idle or not (measured: 19 ms of CPU a second with
//! a sink and a checkpoint store, 60 us per update at 300 updates/s). This thread polls in
//! windows of POLL_WINDOW, which wake on every report all the same: the same latency, a
//! hundredth of the spin.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Message as _, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use tokio::sync::oneshot;

use super::log::QuietContext;

/// How long one poll of the reports may wait when none comes: also how long a dropped
/// producer's thread may take to notice, and then to purge and close the client.
const POLL_WINDOW: Duration = Duration::from_secs(1);

/// A record's delivery report: delivered (the brokers acknowledged it), or why not.
pub type Delivered = Result<(), KafkaError>;

/// A pending report; it fails with a `RecvError` only if the client went away without one.
pub type Delivery = oneshot::Receiver<Delivered>;

/// A cheap handle: clones share the client, and its thread ends after the last is dropped.
/// It derefs to rdkafka's producer, for metadata, purge and flush.
#[derive(Clone)]
pub struct Producer {
    base: Arc<BaseProducer<QuietContext>>,
    _poller: Arc<Poller>,
}

/// Tells the polling thread to stop when the last handle is dropped.
struct Poller(Arc<AtomicBool>);

impl Drop for Poller {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Producer {
    /// A new client with `config`, and its polling thread. The thread holds the client
    /// until it stops, so the client's last moments (librdkafka purges and flushes a
    /// dropped producer) are spent there, never on an async task.
    pub fn create(config: &ClientConfig, context: &QuietContext) -> Result<Producer, KafkaError> {
        let base: Arc<BaseProducer<QuietContext>> = Arc::new(config.create_with_context(context.clone())?);
        let stop = Arc::new(AtomicBool::new(false));
        let (client, stopped) = (base.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kafka-deliveries".into())
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    client.poll(POLL_WINDOW);
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("cannot start the producer's polling thread: {e}")))?;
        Ok(Producer { base, _poller: Arc::new(Poller(stop)) })
    }

    /// Hands one record to librdkafka: its report comes through the returned future. A
    /// record refused at once (a full queue, a bad topic name) is an error here.
    pub fn send(&self, topic: &str, key: &str, payload: Option<&[u8]>, headers: Option<OwnedHeaders>, partition: Option<i32>) -> Result<Delivery, KafkaError> {
        let (report, delivery) = oneshot::channel();
        let mut record = BaseRecord::<str, [u8], _>::with_opaque_to(topic, Box::new(report)).key(key);
        record.payload = payload;
        record.headers = headers;
        record.partition = partition;
        self.base.send(record).map_err(|(e, _)| e)?;
        Ok(delivery)
    }
}

impl Deref for Producer {
    type Target = BaseProducer<QuietContext>;

    fn deref(&self) -> &Self::Target {
        &self.base
    }
}

/// The reports of every producer made with this context resolve their records' futures.
impl ProducerContext for QuietContext {
    type DeliveryOpaque = Box<oneshot::Sender<Delivered>>;

    fn delivery(&self, result: &DeliveryResult<'_>, report: Self::DeliveryOpaque) {
        // Where each record went, for tracing a record through faults
        // (`RUST_LOG=deltaship::sink::kafka::delivery=trace`).
        match result {
            Ok(m) => {
                tracing::trace!(topic = m.topic(), partition = m.partition(), offset = m.offset(), key = ?m.key().map(String::from_utf8_lossy), "delivered")
            }
            Err((e, m)) => {
                tracing::trace!(topic = m.topic(), partition = m.partition(), key = ?m.key().map(String::from_utf8_lossy), error = %e, "not delivered")
            }
        }
        // The sender is gone only if nobody waits for this record any more.
        let _ = report.send(result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_record_that_cannot_be_delivered_resolves_with_its_error() {
        // Nothing listens on the discard port; the record times out after 100 ms.
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:9").set("message.timeout.ms", "100");
        let producer = Producer::create(&config, &QuietContext::default()).unwrap();
        let delivery = producer.send("t", "k", Some(b"v"), None, None).unwrap();
        let report = tokio::time::timeout(Duration::from_secs(10), delivery).await.expect("reported in time").expect("a report");
        assert_eq!(report.unwrap_err().rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::MessageTimedOut));
    }

    #[test]
    fn the_polling_thread_stops_after_the_last_handle_is_dropped() {
        let producer = Producer::create(&ClientConfig::new(), &QuietContext::default()).unwrap();
        let client = Arc::downgrade(&producer.base);
        drop(producer.clone());
        assert!(client.upgrade().is_some(), "a clone keeps it");
        drop(producer);
        let deadline = std::time::Instant::now() + POLL_WINDOW * 5;
        while client.upgrade().is_some() {
            assert!(std::time::Instant::now() < deadline, "the thread still holds the client");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
