//! The Kafka producer that deltaship's sinks and checkpoint stores send through: each record
//! sent resolves a future with its delivery report.
//!
//! The reports are served on the Tokio runtime, by a task woken by librdkafka itself: the
//! client's report queue calls back (`rd_kafka_queue_cb_event_enable`) when something is
//! put on it while empty; the callback only wakes the task, which then polls the queue
//! without waiting until it is empty. A report thus costs one wake-up of the runtime. A
//! polling thread would cost a second one (librdkafka wakes the thread, the thread wakes the
//! runtime), and at a few hundred updates a second each wake-up of a sleeping thread costs
//! more CPU than the record itself (BENCHMARKS.md).

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use tokio::sync::{Notify, oneshot};

use super::context::{Delivered, QuietContext};

/// How many polls of the report queue the task makes before it lets other tasks run (a poll
/// takes at most one event, and returns at once when there is none).
const SERVE_AT_ONCE: usize = 64;

/// A pending report; it fails with a `RecvError` only if the client went away without one.
pub type Delivery = oneshot::Receiver<Delivered>;

/// A cheap handle: clones share the client, and its reports task ends after the last is
/// dropped. It derefs to rdkafka's producer, for metadata, purge and flush.
#[derive(Clone)]
pub struct Producer {
    /// Declared (so dropped) before `_stop`, which holds what the client calls back into.
    base: Arc<BaseProducer<QuietContext>>,
    _stop: Arc<StopOnDrop>,
}

/// What librdkafka's queue callback and the reports task share.
#[derive(Default)]
struct Signal {
    /// Something was put on the report queue, or the last handle was dropped.
    ready: Notify,
    stopped: AtomicBool,
}

/// Tells the reports task to stop when the last handle is dropped.
struct StopOnDrop(Arc<Signal>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::Release);
        self.0.ready.notify_one();
    }
}

/// The client's report queue (librdkafka's main queue), with the callback set on it.
struct ReportQueue(*mut rd::rd_kafka_queue_t);

// SAFETY: a librdkafka queue handle may be used from any thread, by several at once
// (librdkafka locks the queue); this one is only asked its length, and destroyed once.
#[allow(unsafe_code)]
unsafe impl Send for ReportQueue {}
#[allow(unsafe_code)]
unsafe impl Sync for ReportQueue {}

#[allow(unsafe_code)]
impl ReportQueue {
    /// Points the queue of `client` at `signal`: librdkafka calls `wake` on its own threads
    /// when it puts an event on the queue while empty. `signal` must outlive the client
    /// (`Closing`; a `Producer` drops its client before its `StopOnDrop`).
    fn watch(client: &BaseProducer<QuietContext>, signal: &Arc<Signal>) -> ReportQueue {
        /// Called with the queue locked: it must not call librdkafka, only wake the task.
        unsafe extern "C" fn wake(_rk: *mut rd::rd_kafka_t, opaque: *mut std::ffi::c_void) {
            // SAFETY: `opaque` is the `Signal` of `watch`, alive until the client is destroyed.
            let signal = unsafe { &*(opaque as *const Signal) };
            signal.ready.notify_one();
        }
        // SAFETY: the client is valid; the handle holds a reference to its main queue until
        // `Drop`. Every holder of the client also holds the `Signal` and drops the client
        // (whose destruction ends the callers of `wake`) first: `Closing` and `Producer`, by
        // the order of their fields.
        unsafe {
            let queue = rd::rd_kafka_queue_get_main(client.client().native_ptr());
            rd::rd_kafka_queue_cb_event_enable(queue, Some(wake), Arc::as_ptr(signal) as *mut std::ffi::c_void);
            ReportQueue(queue)
        }
    }

    /// How many events wait on the queue.
    fn len(&self) -> usize {
        // SAFETY: the handle is valid until `Drop`.
        unsafe { rd::rd_kafka_queue_length(self.0) }
    }
}

#[allow(unsafe_code)]
impl Drop for ReportQueue {
    fn drop(&mut self) {
        // SAFETY: the handle is valid and dropped once; the callback stays set on the queue
        // itself until the client is destroyed.
        unsafe { rd::rd_kafka_queue_destroy(self.0) }
    }
}

/// What the reports task owns. Dropped (the task ended, or the runtime went away), it hands
/// the client to a thread of its own: librdkafka purges and flushes a dropped producer, which
/// may block, and that must not happen on the runtime.
struct Served(Option<Closing>);

/// Dropped in the order of its fields: the client's threads call back into `signal` until
/// the client is destroyed.
struct Closing {
    queue: ReportQueue,
    client: Arc<BaseProducer<QuietContext>>,
    signal: Arc<Signal>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let closing = self.0.take();
        // Without a thread to be had, the closure (and the client) is dropped here.
        let _ = std::thread::Builder::new().name("kafka-close".into()).spawn(move || drop(closing));
    }
}

impl Producer {
    /// A new client with `config`, and the task that serves its reports, on the current
    /// Tokio runtime (outside one, an error).
    pub fn create(config: &ClientConfig, context: &QuietContext) -> Result<Producer, KafkaError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| KafkaError::ClientCreation("a Kafka producer serves its delivery reports on a Tokio runtime, and none is running".into()))?;
        let base: Arc<BaseProducer<QuietContext>> = Arc::new(config.create_with_context(context.clone())?);
        let signal = Arc::new(Signal::default());
        let queue = ReportQueue::watch(&base, &signal);
        runtime.spawn(serve(Served(Some(Closing { queue, client: base.clone(), signal: signal.clone() }))));
        Ok(Producer { base, _stop: Arc::new(StopOnDrop(signal)) })
    }

    /// Has librdkafka send the records it holds at once instead of after `linger.ms`, until
    /// none is outstanding or `wait` has passed. It blocks the calling thread: call it on a
    /// thread of the blocking pool. The reports task serves the reports meanwhile.
    pub fn expedite(&self, wait: Duration) {
        let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: the client is valid while `self` holds it. librdkafka's flush treats
        // `linger.ms` as passed for as long as it waits. rdkafka's producer takes its
        // reports as events, so flush only waits for the count of outstanding records to
        // reach zero and serves nothing itself. Running out of time is no error here.
        #[allow(unsafe_code)]
        unsafe {
            rd::rd_kafka_flush(self.base.client().native_ptr(), wait_ms);
        }
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

/// Serves the client's report queue each time librdkafka puts something there, until the last
/// handle is dropped. librdkafka calls back only when the queue goes from empty to not empty,
/// so each wake-up serves until the queue is empty; `Notify` keeps a wake-up that comes while
/// the task is not waiting.
async fn serve(served: Served) {
    let Some(c) = &served.0 else { return };
    loop {
        let mut served = 0;
        loop {
            let queued = c.queue.len().min(SERVE_AT_ONCE);
            if queued == 0 {
                break;
            }
            for _ in 0..queued {
                c.client.poll(Duration::ZERO);
            }
            served += queued;
            if served >= SERVE_AT_ONCE {
                served = 0;
                tokio::task::yield_now().await;
            }
        }
        if c.signal.stopped.load(Ordering::Acquire) {
            return;
        }
        c.signal.ready.notified().await;
    }
}

impl Deref for Producer {
    type Target = BaseProducer<QuietContext>;

    fn deref(&self) -> &Self::Target {
        &self.base
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::Undelivered;
    use super::*;

    #[tokio::test]
    async fn a_record_that_cannot_be_delivered_resolves_with_its_error() {
        // Nothing listens on the discard port; the record times out after 100 ms.
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:9").set("message.timeout.ms", "100");
        let producer = Producer::create(&config, &QuietContext::default()).unwrap();
        let delivery = producer.send("t", "k", Some(b"v"), None, None).unwrap();
        let report = tokio::time::timeout(Duration::from_secs(10), delivery).await.expect("reported in time").expect("a report");
        match report {
            Err(Undelivered::Kafka(e)) => assert_eq!(e.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::MessageTimedOut)),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    /// librdkafka calls back only when its report queue goes from empty to not empty: reports
    /// that arrive while the task serves must be served in the same wake-up, or they wait
    /// for ever. Thousands in flight at once make sure some do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn every_report_resolves_with_thousands_in_flight() {
        let mock = rdkafka::mocking::MockCluster::new(1).expect("a mock cluster");
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers()).set("linger.ms", "0");
        let producer = Producer::create(&config, &QuietContext::default()).unwrap();
        let deliveries: Vec<Delivery> = (0..5000).map(|i| producer.send("t", &i.to_string(), Some(b"v"), None, None).unwrap()).collect();
        for (i, d) in deliveries.into_iter().enumerate() {
            let report = tokio::time::timeout(Duration::from_secs(30), d).await.unwrap_or_else(|_| panic!("record {i}: no report"));
            assert!(matches!(report, Ok(Ok(_))), "record {i}: {report:?}");
        }
    }

    #[tokio::test]
    async fn the_reports_task_lets_the_client_go_after_the_last_handle_is_dropped() {
        let producer = Producer::create(&ClientConfig::new(), &QuietContext::default()).unwrap();
        let client = Arc::downgrade(&producer.base);
        drop(producer.clone());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(client.upgrade().is_some(), "a clone keeps it");
        drop(producer);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while client.upgrade().is_some() {
            assert!(std::time::Instant::now() < deadline, "the task still holds the client");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn a_producer_outside_a_runtime_is_refused_with_the_reason() {
        let e = Producer::create(&ClientConfig::new(), &QuietContext::default()).err().expect("refused");
        assert!(e.to_string().contains("Tokio runtime"), "{e}");
    }
}
