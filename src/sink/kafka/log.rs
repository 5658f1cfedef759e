//! librdkafka's logs and client errors, without the flood: while a broker is down it
//! reports every failed connection attempt. deltaship's own probe logs the state change
//! once; these lines go to DEBUG, and client errors to WARN at most once a minute per
//! error code (the text varies: "0/1 brokers are down", "1/1 brokers are down").
//! Refused credentials and failed TLS go to ERROR (an operator must act), and the latest
//! error is kept to explain why a metadata request found no broker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::recover::KnownBrokers;
use crate::sink::ErrorKind;

const REPEAT_AFTER: Duration = Duration::from_secs(60);

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
    /// What the producer's statistics say of its brokers (kafka::recover).
    brokers: KnownBrokers,
}

/// A client error that says why the brokers cannot be reached.
#[derive(Debug, Clone)]
pub struct Cause {
    /// `Authentication`, `Tls` or `Broker` (anything else, e.g. a refused connection).
    pub kind: ErrorKind,
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
pub fn failure_kind(code: Option<RDKafkaErrorCode>, text: &str) -> Option<ErrorKind> {
    match code {
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => Some(ErrorKind::Authentication),
        Some(RDKafkaErrorCode::SSL) => Some(ErrorKind::Tls),
        _ if text.contains("SSL") => Some(ErrorKind::Tls),
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
        let text = format!("{error}: {reason}");
        let failure = failure_kind(code, reason);
        // "1/1 brokers are down" follows every failed attempt and would hide its cause.
        if code != Some(RDKafkaErrorCode::AllBrokersDown) {
            *self.state.last_cause.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Cause { kind: failure.unwrap_or(ErrorKind::Broker), text: reason.to_string(), at: Instant::now() });
        }
        let key = failure.map_or_else(|| format!("{code:?}"), |kind| kind.as_str().to_string());
        let mut warned = self.state.last_warned.lock().unwrap_or_else(|p| p.into_inner());
        match warned.get(&key) {
            Some(at) if at.elapsed() < REPEAT_AFTER => {
                tracing::debug!(target: "librdkafka", error = %text, "Kafka client error (repeated)");
            }
            _ => {
                match failure {
                    Some(ErrorKind::Authentication) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_credentials_and_tls_failures_are_told_apart_from_other_errors() {
        use RDKafkaErrorCode as C;
        let sasl = "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
        assert_eq!(failure_kind(Some(C::Authentication), sasl), Some(ErrorKind::Authentication));
        let alert = "ssl://127.0.0.1:9093/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate";
        assert_eq!(failure_kind(Some(C::BrokerTransportFailure), alert), Some(ErrorKind::Tls));
        assert_eq!(failure_kind(Some(C::SSL), "ssl://h:1/bootstrap: SSL handshake failed"), Some(ErrorKind::Tls));
        let refused = "ssl://127.0.0.1:9093/bootstrap: Connect to ipv4#127.0.0.1:9093 failed: Connection refused";
        assert_eq!(failure_kind(Some(C::BrokerTransportFailure), refused), None);
    }

    #[test]
    fn the_latest_cause_is_kept_except_all_brokers_down_and_cleared_on_success() {
        let ctx = QuietContext::default();
        assert!(ctx.recent_cause(REPEAT_AFTER).is_none());
        ctx.error(KafkaError::Global(RDKafkaErrorCode::Authentication), "h:1/bootstrap: SASL authentication error: Authentication failed");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        let cause = ctx.recent_cause(REPEAT_AFTER).expect("a cause");
        assert_eq!(cause.kind, ErrorKind::Authentication);
        assert!(cause.text.contains("SASL authentication error"), "{cause:?}");
        assert!(ctx.recent_cause(Duration::ZERO).is_none(), "too old");
        ctx.clear_cause();
        assert!(ctx.recent_cause(REPEAT_AFTER).is_none());
    }
}
