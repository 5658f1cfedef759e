//! The Kafka sink's producer and its send path: one record per event (markers to every
//! partition), resolved on the brokers' acknowledgement.

use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use rdkafka::config::ClientConfig;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{Producer as _, PurgeConfig};
use rdkafka::util::Timeout;

use super::binding::encode;
use super::error::{classify, client_refused};
use super::ledger::Part;
use super::partition;
use super::resend::{Resend, stamp_floor};
use super::transaction::{Enrolment, INIT_TIMEOUT, Settled, Transactions};
use super::waiting::{Outstanding, Tracked};
use crate::broker::kafka::{ClientRole, Delivery, Producer, QuietContext, STATISTICS_INTERVAL_MS, Undelivered, client_config};
use crate::config::{ContentMode, KafkaConfig};
use crate::event::{Envelope, EnvelopeKind};
use crate::model::{ChangeType, Placement};
use crate::sink::{ErrorKind, Failure, SendError, SinkError};
use crate::telemetry::meters::TransactionMeters;

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
    progress: Arc<Outstanding>,
    /// Once the route is fenced (sink::fence): the transactional producer's settings and
    /// its transactions.
    transactional: OnceLock<(ClientConfig, Arc<Transactions>)>,
    /// What retries must not send again: records in doubt (on a fenced route, those of a
    /// transaction in doubt), and the delivered records of an event another of whose
    /// records failed.
    resend: Resend,
}

impl KafkaSink {
    pub fn new(cfg: &KafkaConfig) -> Result<KafkaSink, SinkError> {
        let config = client_config(cfg, ClientRole::Producer)?;
        let context = QuietContext::default();
        let producer = create_producer(&config, &context)?;
        Ok(KafkaSink {
            shared: Arc::new(Shared {
                config,
                context,
                producer: RwLock::new(producer),
                progress: Arc::default(),
                transactional: OnceLock::new(),
                resend: Resend::new(cfg.clone()),
            }),
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

    pub(super) fn progress(&self) -> &Outstanding {
        &self.shared.progress
    }

    fn transactions(&self) -> Option<&Arc<Transactions>> {
        self.shared.transactional.get().map(|(_, t)| t)
    }

    /// Puts a new producer in place of the current one, whose records fail with a purge
    /// error and are sent again by the dispatcher through the new one. A transactional
    /// producer is initialised first, which aborts the old one's open transaction (its
    /// records are then sent again too) and completes one whose commit was in doubt (its
    /// records are looked for in the log before they are sent again).
    pub(super) async fn replace_producer(&self) -> Result<(), SinkError> {
        let Some((config, txns)) = self.shared.transactional.get() else {
            let fresh = create_producer(&self.shared.config, &self.shared.context)?;
            self.install(fresh);
            return Ok(());
        };
        let _exclusive = txns.exclusive().await;
        let fresh = create_producer(config, &self.shared.context)?;
        init_transactions(fresh.clone()).await.map_err(SinkError::Request)?;
        txns.replaced();
        self.install(fresh);
        Ok(())
    }

    fn install(&self, fresh: Producer) {
        let old = std::mem::replace(&mut *self.shared.producer.write().unwrap_or_else(|p| p.into_inner()), fresh);
        old.purge(PurgeConfig::default().queue().inflight());
    }

    /// Claims the route for this leader (sink::fence): a transactional producer with
    /// `transactional_id`, initialised (which fences every earlier producer of that id and
    /// aborts its open transaction), replaces the current one; from then on every record is
    /// sent inside a transaction (kafka::transaction). Retryable while the brokers do not
    /// answer.
    pub async fn fence(&self, transactional_id: &str, route: &str) -> Result<(), SendError> {
        if self.shared.transactional.get().is_some() {
            return Ok(());
        }
        let mut config = self.shared.config.clone();
        // librdkafka requires records to time out within the transaction's timeout.
        config.set("transactional.id", transactional_id).set("message.timeout.ms", "55000").set("transaction.timeout.ms", "60000");
        let fresh = create_producer(&config, &self.shared.context)
            .map_err(|e| SendError::Fatal { kind: ErrorKind::Broker, source: Failure::Transaction(e.to_string()) })?;
        init_transactions(fresh.clone()).await?;
        let txns = Arc::new(Transactions::new(TransactionMeters::new(route)));
        if self.shared.transactional.set((config, txns.clone())).is_err() {
            return Ok(());
        }
        self.install(fresh);
        let sink = self.clone();
        tokio::spawn(Transactions::commit_until_dropped(Arc::downgrade(&txns), move || sink.producer()));
        tracing::info!(transactional_id, "Fenced the route's Kafka producer: an earlier producer of this id can no longer write");
        Ok(())
    }

    /// Sends one event; markers go to every partition of the topic. Resolves when the
    /// broker acknowledged every record (acks=all), with where an object event was stored
    /// (a marker, stored once per partition, has no one place).
    pub async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
        let sent = match Some(self.resend()).filter(|r| r.has_records()) {
            // Boxed: rare, and its state would make every send's future larger.
            Some(resend) => Box::pin(self.send_after_doubts(resend, env)).await,
            None => self.send_records(env, None).await,
        };
        sent.map_err(|e| self.fenced_or(e))
    }

    /// Sends `env` while the ledger holds records (kafka::resend): an object event delivered
    /// before is not sent again.
    async fn send_after_doubts(&self, resend: &Resend, env: &Envelope) -> Result<Option<Placement>, SendError> {
        let known = match env.kind {
            EnvelopeKind::Object(_) => resend.before_send(&env.attributes.id, Part::Object).await?,
            EnvelopeKind::Marker(_) => None,
        };
        self.send_records(env, known).await
    }

    /// A transactional producer that failed for good (a successor fenced it) purges what it
    /// holds: any failure of its records then means the route is lost, not a retry.
    fn fenced_or(&self, e: SendError) -> SendError {
        if !e.is_retryable() || self.transactions().is_none() {
            return e;
        }
        match self.producer().client().fatal_error() {
            Some((_, fatal)) => SendError::Fatal { kind: ErrorKind::Fenced, source: Failure::Transaction(fatal) },
            None => e,
        }
    }

    /// The ledger of what retries must not send again.
    fn resend(&self) -> &Resend {
        &self.shared.resend
    }

    /// Where record `part` of `env` was delivered before, if it was (kafka::resend): the
    /// ledger is read only while it holds anything.
    async fn delivered_before(&self, env: &Envelope, part: Part) -> Result<Option<Placement>, SendError> {
        match self.resend() {
            resend if resend.has_records() => resend.before_send(&env.attributes.id, part).await,
            _ => Ok(None),
        }
    }

    /// A record's report: a failure that leaves open whether the broker wrote the record is
    /// recorded for the retry.
    fn noted(&self, env: &Envelope, part: Part, since_ms: i64, report: Result<Placement, Failed>) -> Result<Placement, SendError> {
        report.map_err(|Failed { error, doubtful }| {
            if doubtful {
                self.resend().record_doubt(&env.attributes.id, part, &env.destination, since_ms);
            }
            error
        })
    }

    /// Sends `env`'s records; an object event `delivered` before is not sent again.
    async fn send_records(&self, env: &Envelope, delivered: Option<Placement>) -> Result<Option<Placement>, SendError> {
        let (payload, headers) = encode(env, self.content_mode);
        let EnvelopeKind::Object(change) = env.kind else {
            // Boxed: markers are few, and their state would make every send's future larger.
            return Box::pin(self.send_marker(env, payload, headers)).await;
        };
        let placed = match delivered {
            Some(placed) => placed,
            None => {
                let since_ms = stamp_floor();
                let d = self.produce(&env.destination, env.key(), Some(&payload[..]), headers, None).await?;
                self.noted(env, Part::Object, since_ms, await_delivery(d).await)?
            }
        };
        if self.tombstones && change == ChangeType::Deleted {
            // Boxed: only a `deleted` with tombstones comes here.
            Box::pin(self.send_tombstone(env, placed)).await?;
        }
        self.resend().forget(&env.attributes.id);
        Ok(Some(placed))
    }

    /// The tombstone after `env`, a `deleted` delivered at `placed`: if it fails, the
    /// retry sends the tombstone only. A tombstone carries no id and is no event, so one
    /// in doubt is simply sent again.
    async fn send_tombstone(&self, env: &Envelope, placed: Placement) -> Result<(), SendError> {
        let sent = match self.produce(&env.destination, env.key(), None, OwnedHeaders::new(), None).await {
            Ok(d) => await_delivery(d).await.map(|_| ()).map_err(|f| f.error),
            Err(e) => Err(e),
        };
        if sent.is_err() {
            self.resend().record_delivered(&env.attributes.id, Part::Object, placed);
        }
        sent
    }

    /// A marker goes to every partition of its topic. When a copy fails, the retry sends
    /// only the copies not delivered.
    async fn send_marker(&self, env: &Envelope, payload: Bytes, headers: OwnedHeaders) -> Result<Option<Placement>, SendError> {
        let partitions = self.partitions(&env.destination).await?;
        // A marker with a state carries each partition's own count and digest.
        let copies: Vec<(i32, Bytes, OwnedHeaders)> = partitions
            .iter()
            .map(|&p| match partition::for_partition(env, p, partitions.len()) {
                Some(copy) => {
                    let (payload, headers) = encode(&copy, self.content_mode);
                    (p, payload, headers)
                }
                None => (p, payload.clone(), headers.clone()),
            })
            .collect();
        // Settled before any copy is sent: an error here leaves nothing in flight.
        let mut skip = Vec::new();
        for &p in &partitions {
            if self.delivered_before(env, Part::Marker(p)).await?.is_some() {
                skip.push(p);
            }
        }
        let mut pending = Vec::with_capacity(copies.len());
        let mut failed = None;
        for (p, payload, headers) in copies {
            if skip.contains(&p) {
                continue;
            }
            let since_ms = stamp_floor();
            match self.produce(&env.destination, env.key(), Some(&payload[..]), headers, Some(p)).await {
                Ok(d) => pending.push((p, since_ms, d)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        // A marker is a barrier: nothing more joins its batches until it is
        // acknowledged, so lingering for more would only delay it.
        self.expedite();
        let mut delivered = Vec::with_capacity(pending.len());
        for (p, since_ms, d) in pending {
            match self.noted(env, Part::Marker(p), since_ms, await_delivery(d).await) {
                Ok(at) => delivered.push((p, at)),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            None => {
                self.resend().forget(&env.attributes.id);
                Ok(None)
            }
            Some(e) => {
                for (p, at) in delivered {
                    self.resend().record_delivered(&env.attributes.id, Part::Marker(p), at);
                }
                Err(e)
            }
        }
    }

    /// Hands one record to the producer, inside the open transaction of a fenced route.
    /// A plain `fn` returning a boxed future for the transactional case: the dispatcher
    /// allocates every send's future, which must stay small.
    fn produce<'a>(&'a self, topic: &'a str, key: &'a str, payload: Option<&'a [u8]>, headers: OwnedHeaders, partition: Option<i32>) -> Produced<'a> {
        match self.transactions() {
            None => Produced::Ready(Some(
                self.producer()
                    .send(topic, key, payload, Some(headers), partition)
                    .map_err(classify)
                    .map(|delivery| Pending { tracked: self.shared.progress.track(delivery), member: None }),
            )),
            Some(txns) => Produced::Enrolling(Box::pin(self.produce_in_transaction(txns, topic, key, payload, headers, partition))),
        }
    }

    async fn produce_in_transaction(
        &self,
        txns: &Arc<Transactions>,
        topic: &str,
        key: &str,
        payload: Option<&[u8]>,
        headers: OwnedHeaders,
        partition: Option<i32>,
    ) -> Result<Pending, SendError> {
        let producer = self.producer();
        let (gate, member) = match txns.enrol(&producer).await {
            Ok(enrolled) => enrolled,
            Err(Ok(e)) => {
                // The transaction cannot take records (it failed): the committer aborts it.
                txns.expedite();
                return Err(classify(e));
            }
            Err(Err(failed)) => return Err(SendError::Fatal { kind: ErrorKind::Fenced, source: Failure::Transaction(failed) }),
        };
        let sent = producer.send(topic, key, payload, Some(headers), partition);
        drop(gate);
        let delivery = sent.map_err(|e| {
            txns.expedite();
            classify(e)
        })?;
        Ok(Pending { tracked: self.shared.progress.track(delivery), member: Some(member) })
    }

    /// Has librdkafka send what it holds at once rather than linger for more records to
    /// batch (`linger.ms`), until nothing is outstanding (at most `EXPEDITE_WAIT`): for a
    /// barrier, behind which nothing more comes until everything before it is acknowledged.
    /// It returns at once; a thread of the blocking pool waits.
    pub fn expedite(&self) {
        if let Some(txns) = self.transactions() {
            txns.expedite();
        }
        let producer = self.producer();
        drop(tokio::task::spawn_blocking(move || producer.expedite(EXPEDITE_WAIT)));
    }

    /// Nothing more comes until a send in flight is acknowledged: the transaction commits
    /// once its records are reported instead of lingering for more.
    pub fn full(&self) {
        if let Some(txns) = self.transactions() {
            txns.full();
        }
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

/// A record handed to the producer, or (on a fenced route) the wait to join the open
/// transaction first; a future of its own, smaller than an `async fn` over it.
enum Produced<'a> {
    Ready(Option<Result<Pending, SendError>>),
    Enrolling(std::pin::Pin<Box<dyn Future<Output = Result<Pending, SendError>> + Send + 'a>>),
}

impl Future for Produced<'_> {
    type Output = Result<Pending, SendError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        match &mut *self {
            Produced::Ready(ready) => std::task::Poll::Ready(ready.take().expect("a Produced polled after it completed")),
            Produced::Enrolling(enrolling) => enrolling.as_mut().poll(cx),
        }
    }
}

/// A record handed to the producer: its delivery report, and its transaction's outcome
/// on a fenced route.
struct Pending {
    tracked: Tracked<Delivery>,
    member: Option<Enrolment>,
}

/// Initialises a transactional producer on a thread of the blocking pool.
async fn init_transactions(producer: Producer) -> Result<(), SendError> {
    tokio::task::spawn_blocking(move || producer.init_transactions(INIT_TIMEOUT))
        .await
        .map_err(|e| SendError::Retryable { kind: ErrorKind::Broker, source: Failure::Blocking(e) })?
        .map_err(classify)
}

/// A record not known to be delivered: why, and whether the broker may have written it.
struct Failed {
    error: SendError,
    doubtful: bool,
}

impl From<SendError> for Failed {
    fn from(error: SendError) -> Failed {
        Failed { error, doubtful: false }
    }
}

/// Where the record was stored, once the broker acknowledged it and, on a fenced route,
/// its transaction committed. On a fenced route the record counts as waiting (kafka::waiting)
/// until its transaction settled: a commit that cannot complete, because the producer lost
/// its brokers, is a stuck producer too (kafka::recover), which is replaced; the records of
/// a commit left in doubt by the replacement are doubtful (kafka::resend).
async fn await_delivery(d: Pending) -> Result<Placement, Failed> {
    let Pending { mut tracked, member } = d;
    let placed = report(&mut tracked.delivery).await?;
    let Some(member) = member else { return Ok(placed) };
    // Boxed, as the transactional produce is.
    let settled = Box::pin(member.settled()).await;
    drop(tracked);
    match settled {
        Settled::Committed => Ok(placed),
        Settled::Aborted(e) => Err(SendError::Retryable { kind: ErrorKind::Broker, source: Failure::Transaction(e) }.into()),
        Settled::InDoubt(e) => Err(Failed { error: SendError::Retryable { kind: ErrorKind::Broker, source: Failure::Transaction(e) }, doubtful: true }),
        Settled::Failed(e) => Err(SendError::Fatal { kind: ErrorKind::Fenced, source: Failure::Transaction(e) }.into()),
    }
}

async fn report(delivery: &mut Delivery) -> Result<Placement, Failed> {
    let (error, doubtful) = match delivery.await {
        Ok(Ok(placed)) => return Ok(placed),
        Ok(Err(Undelivered::Kafka(e))) => (classify(e), false),
        Ok(Err(Undelivered::Possibly(e))) => (classify(e), true),
        Ok(Err(Undelivered::Unconfirmed)) => (SendError::Retryable { kind: ErrorKind::Unconfirmed, source: Failure::Unconfirmed }, true),
        Err(e) => (SendError::Retryable { kind: ErrorKind::Canceled, source: Failure::DeliveryDropped(e) }, true),
    };
    Err(Failed { error, doubtful })
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
