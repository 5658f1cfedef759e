//! The context of every Kafka client of deltaship's: what librdkafka calls back into (its
//! logs, its client errors, the producer's statistics and delivery reports).
//!
//! Logs and client errors come without the flood: while a broker is down librdkafka
//! reports every failed connection attempt. deltaship's own probe logs the state change
//! once; these lines go to DEBUG, and client errors to WARN at most once a minute per
//! error code (the text varies: "0/1 brokers are down", "1/1 brokers are down").
//! Refused credentials and failed TLS go to ERROR (an operator must act), and the latest
//! error is kept to explain why a metadata request found no broker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::bindings as rd;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tokio::sync::oneshot;

use crate::model::Placement;

const REPEAT_AFTER: Duration = Duration::from_secs(60);

/// How often a producer that reports its statistics (`statistics.interval.ms`) does: how
/// fresh what the context knows of its brokers is.
pub const STATISTICS_INTERVAL_MS: &str = "1000";

/// Cloning shares the state: the sink and the checkpoint store keep a clone to read the
/// cause, which outlives the clients they replace.
#[derive(Default, Clone)]
pub struct QuietContext {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    last_warned: Mutex<HashMap<String, Instant>>,
    last_cause: Mutex<Option<Cause>>,
    /// What the producer's statistics say of its brokers (`sink::kafka::recover`).
    brokers: KnownBrokers,
}

/// What kind of client error a cause is: the sink names its `error_kind` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseKind {
    /// SASL refused the credentials.
    Authentication,
    /// The TLS handshake or a certificate failed.
    Tls,
    /// Anything else, e.g. a refused connection.
    Other,
}

impl CauseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Authentication => "authentication",
            CauseKind::Tls => "tls",
            CauseKind::Other => "other",
        }
    }
}

/// A client error that says why the brokers cannot be reached.
#[derive(Debug, Clone)]
pub struct Cause {
    pub kind: CauseKind,
    /// librdkafka's text, e.g. `sasl_ssl://host:9093/bootstrap: SASL authentication
    /// error: ...`; it never holds a secret.
    pub text: String,
    at: Instant,
}

impl QuietContext {
    /// The latest client error of the last `within` (librdkafka retries a connection at
    /// least every 10 s, `reconnect.backoff.max.ms`, so a lasting cause is always recent).
    pub fn recent_cause(&self, within: Duration) -> Option<Cause> {
        let cause = self.state.last_cause.lock().unwrap_or_else(|p| p.into_inner());
        cause.as_ref().filter(|c| c.at.elapsed() < within).cloned()
    }

    /// The brokers the producer knows of, from its statistics.
    pub fn brokers(&self) -> &KnownBrokers {
        &self.state.brokers
    }

    /// Forgets the cause once the brokers answered.
    pub fn clear_cause(&self) {
        *self.state.last_cause.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// `Authentication` when SASL refused the credentials, `Tls` when the TLS handshake or a
/// certificate failed, None otherwise. librdkafka reports a refused client certificate as
/// a transport failure whose text names OpenSSL's error ("SSL routines::sslv3 alert bad
/// certificate"), hence the text; broker names are lowercase (`ssl://`), OpenSSL's are not.
fn failure_kind(code: Option<RDKafkaErrorCode>, text: &str) -> Option<CauseKind> {
    match code {
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => Some(CauseKind::Authentication),
        Some(RDKafkaErrorCode::SSL) => Some(CauseKind::Tls),
        _ if text.contains("SSL") => Some(CauseKind::Tls),
        _ => None,
    }
}

impl ClientContext for QuietContext {
    /// Only the producer asks for statistics (`statistics.interval.ms`), for its brokers.
    fn stats_raw(&self, statistics: &[u8]) {
        self.state.brokers.update(statistics);
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::error!(target: "librdkafka", facility, "{message}")
            }
            _ => tracing::debug!(target: "librdkafka", facility, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        // A reader reached the end of a partition: `reader_config` asks for it
        // (`enable.partition.eof`), and its readers wait for it. No failure.
        if code == Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::debug!(target: "librdkafka", "{error}: {reason}");
            return;
        }
        let text = format!("{error}: {reason}");
        let failure = failure_kind(code, reason);
        // "1/1 brokers are down" follows every failed attempt and would hide its cause.
        if code != Some(RDKafkaErrorCode::AllBrokersDown) {
            *self.state.last_cause.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Cause { kind: failure.unwrap_or(CauseKind::Other), text: reason.to_string(), at: Instant::now() });
        }
        let key = failure.map_or_else(|| format!("{code:?}"), |kind| kind.as_str().to_string());
        let mut warned = self.state.last_warned.lock().unwrap_or_else(|p| p.into_inner());
        match warned.get(&key) {
            Some(at) if at.elapsed() < REPEAT_AFTER => {
                tracing::debug!(target: "librdkafka", error = %text, "Kafka client error (repeated)");
            }
            _ => {
                match failure {
                    Some(CauseKind::Authentication) => {
                        tracing::error!(sink = "kafka", error = %text, "Kafka authentication failed; check the sink's sasl settings (mechanism, username, password)")
                    }
                    Some(_) => {
                        tracing::error!(sink = "kafka", error = %text, "Kafka TLS failed; check the sink's tls settings (ca_file, cert_file, key_file)")
                    }
                    None => tracing::warn!(sink = "kafka", error = %text, "Kafka client error"),
                }
                warned.insert(key, Instant::now());
            }
        }
    }
}

/// The checkpoint store reads its topic with this context too: its logs and its errors'
/// causes as the producer's.
impl rdkafka::consumer::ConsumerContext for QuietContext {}

/// A record's delivery report: delivered (the brokers acknowledged it) at its partition and
/// offset, or why not.
pub type Delivered = Result<Placement, Undelivered>;

/// Why a record is not known to be delivered.
#[derive(Debug, thiserror::Error)]
pub enum Undelivered {
    /// librdkafka failed the record before the broker could write it.
    #[error(transparent)]
    Kafka(KafkaError),
    /// librdkafka failed the record after sending it: the broker may have written it
    /// (librdkafka's `POSSIBLY_PERSISTED`, e.g. a request in flight when its producer was
    /// purged).
    #[error("{0} (after it was sent: the broker may have written it)")]
    Possibly(KafkaError),
    /// librdkafka reported the record delivered without the offset the broker gives every
    /// record it writes. The idempotent producer does so for the records of a batch that
    /// failed when a later batch of the same producer succeeds, taking that success as
    /// proof the earlier batch was written (an "implicit ack"). It is no proof: a broker
    /// with no state for the producer on that partition (a new producer, a restarted
    /// broker) accepts the later batch without the earlier one, and the records are lost.
    #[error("reported delivered without an offset (acknowledged only by the success of a later batch, which does not prove the broker wrote it)")]
    Unconfirmed,
}

/// The reports of every producer made with this context resolve their records' futures.
impl ProducerContext for QuietContext {
    type DeliveryOpaque = Box<oneshot::Sender<Delivered>>;

    fn delivery(&self, result: &DeliveryResult<'_>, report: Self::DeliveryOpaque) {
        // Where each record went, for tracing a record through faults
        // (`RUST_LOG=deltaship::broker::kafka::context=trace`).
        let (outcome, m) = match result {
            // Every record the broker writes has an offset (deltaship's producers require
            // acknowledgements: `acks` is never 0).
            Ok(m) => match u64::try_from(m.offset()) {
                Ok(offset) => (Ok(Placement { partition: m.partition(), offset }), m),
                Err(_) => (Err(Undelivered::Unconfirmed), m),
            },
            Err((e, m)) if possibly_persisted(m) => (Err(Undelivered::Possibly(e.clone())), m),
            Err((e, m)) => (Err(Undelivered::Kafka(e.clone())), m),
        };
        let what = match &outcome {
            Ok(_) => "delivered",
            Err(Undelivered::Unconfirmed) => "unconfirmed",
            Err(Undelivered::Possibly(_)) => "possibly delivered",
            Err(Undelivered::Kafka(_)) => "not delivered",
        };
        let error = outcome.as_ref().err().map(tracing::field::display);
        tracing::trace!(topic = m.topic(), partition = m.partition(), offset = m.offset(), key = ?m.key().map(String::from_utf8_lossy), error, "{what}");
        // The sender is gone only if nobody waits for this record any more.
        let _ = report.send(outcome);
    }
}

/// Whether librdkafka says a failed record may have been written: it was sent, and no
/// answer (or an answer that leaves it open) came back.
#[allow(unsafe_code)]
fn possibly_persisted(m: &rdkafka::message::BorrowedMessage<'_>) -> bool {
    // SAFETY: `m.ptr()` is the message of this delivery report, valid while `m` is.
    let status = unsafe { rd::rd_kafka_message_status(m.ptr()) };
    status == rd::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED
}

/// Whether the producer knows of any broker (configured or learned), and since when it
/// knows of none, from the `brokers` of its statistics.
#[derive(Debug)]
pub struct KnownBrokers {
    origin: Instant,
    /// Ms since `origin` when the statistics first showed no broker; u64::MAX while they
    /// show one (or before the first report).
    none_since_ms: AtomicU64,
}

impl Default for KnownBrokers {
    fn default() -> Self {
        KnownBrokers { origin: Instant::now(), none_since_ms: AtomicU64::new(u64::MAX) }
    }
}

/// The part of librdkafka's statistics JSON read here.
#[derive(serde::Deserialize)]
struct Statistics {
    #[serde(default)]
    brokers: std::collections::HashMap<String, Broker>,
}

#[derive(serde::Deserialize)]
struct Broker {
    /// `learned`, `configured`, `internal` or `logical`.
    source: String,
}

impl KnownBrokers {
    /// Takes one statistics report; a report that does not parse changes nothing.
    fn update(&self, statistics: &[u8]) {
        let Ok(stats) = serde_json::from_slice::<Statistics>(statistics) else { return };
        let any = stats.brokers.values().any(|b| matches!(b.source.as_str(), "learned" | "configured"));
        if any {
            self.none_since_ms.store(u64::MAX, Ordering::Release);
        } else {
            let now = self.origin.elapsed().as_millis() as u64;
            let _ = self.none_since_ms.compare_exchange(u64::MAX, now, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The producer has known of no broker for at least `after`.
    pub fn none_for(&self, after: Duration) -> bool {
        let since = self.none_since_ms.load(Ordering::Acquire);
        since != u64::MAX && (self.origin.elapsed().as_millis() as u64).saturating_sub(since) >= after.as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_credentials_and_tls_failures_are_told_apart_from_other_errors() {
        use RDKafkaErrorCode as C;
        let sasl = "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
        assert_eq!(failure_kind(Some(C::Authentication), sasl), Some(CauseKind::Authentication));
        let alert = "ssl://127.0.0.1:9093/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate";
        assert_eq!(failure_kind(Some(C::BrokerTransportFailure), alert), Some(CauseKind::Tls));
        assert_eq!(failure_kind(Some(C::SSL), "ssl://h:1/bootstrap: SSL handshake failed"), Some(CauseKind::Tls));
        let refused = "ssl://127.0.0.1:9093/bootstrap: Connect to ipv4#127.0.0.1:9093 failed: Connection refused";
        assert_eq!(failure_kind(Some(C::BrokerTransportFailure), refused), None);
    }

    #[test]
    fn known_brokers_follow_the_statistics_learned_or_configured_ones_only() {
        let b = KnownBrokers::default();
        assert!(!b.none_for(Duration::ZERO), "no report yet");
        b.update(br#"{"brokers": {"127.0.0.1:9092/1": {"source": "learned", "state": "UP"}}}"#);
        assert!(!b.none_for(Duration::ZERO));
        b.update(br#"{"name": "p", "brokers": {":0/internal": {"source": "internal"}}}"#);
        assert!(b.none_for(Duration::ZERO) && !b.none_for(Duration::from_secs(60)), "none since this report");
        b.update(b"not json");
        assert!(b.none_for(Duration::ZERO), "an unreadable report changes nothing");
        b.update(br#"{"brokers": {"h:1/bootstrap": {"source": "configured"}}}"#);
        assert!(!b.none_for(Duration::ZERO));
    }

    #[test]
    fn the_latest_cause_is_kept_except_all_brokers_down_and_cleared_on_success() {
        let ctx = QuietContext::default();
        assert!(ctx.recent_cause(REPEAT_AFTER).is_none());
        ctx.error(KafkaError::Global(RDKafkaErrorCode::Authentication), "h:1/bootstrap: SASL authentication error: Authentication failed");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        let cause = ctx.recent_cause(REPEAT_AFTER).expect("a cause");
        assert_eq!(cause.kind, CauseKind::Authentication);
        assert!(cause.text.contains("SASL authentication error"), "{cause:?}");
        assert!(ctx.recent_cause(Duration::ZERO).is_none(), "too old");
        ctx.clear_cause();
        assert!(ctx.recent_cause(REPEAT_AFTER).is_none());
    }

    #[test]
    fn the_end_of_a_partition_is_neither_a_cause_nor_a_warning() {
        let ctx = QuietContext::default();
        ctx.error(KafkaError::Global(RDKafkaErrorCode::PartitionEOF), "Fetch from broker 1 reached end of partition at offset 0");
        assert!(ctx.recent_cause(REPEAT_AFTER).is_none(), "the end of a partition is no cause");
        assert!(ctx.state.last_warned.lock().unwrap().is_empty(), "nor warned of");
    }
}
