//! Stuck-producer recovery for the Kafka sink: a producer that holds records and reports
//! nothing while the brokers answer a fresh client is replaced, and its records are sent
//! again through the new one (same events, same ids, in lane order).
//!
//! Why: librdkafka (2.10 and later) forgets every broker that a Metadata response does not
//! list. A broker that is starting (KRaft, still fenced) answers with the requested topics
//! and an empty broker list, so after a restart of a single broker the producer can be
//! left with no broker at all; its re-bootstrap races with that clean-up or never starts
//! (its timer starts only when a metadata request is sent, which needs a broker). The
//! producer then neither delivers nor fails, for good.
//!
//! Two triggers: the producer's statistics say it has no broker left while records wait
//! and a new client reaches the brokers (that state, at once); or, whatever the cause,
//! records waited STUCK_AFTER without any report while the brokers answered a new client
//! for STUCK_AFTER.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

use super::KafkaSink;
use super::log::QuietContext;
use crate::telemetry::meters::RecoveryMeters;

/// How long records may wait without any delivery report, and the brokers must have
/// answered a fresh client, before the producer counts as stuck: longer than librdkafka's
/// longest reconnect backoff (`reconnect.backoff.max.ms`, 10 s), so that a producer that
/// is merely reconnecting after an outage is left alone.
pub const STUCK_AFTER: Duration = Duration::from_secs(15);
/// How often a route with waiting records is checked, and how often the producer reports
/// its statistics (`statistics.interval.ms`).
const CHECK_EVERY: Duration = Duration::from_secs(1);
pub const STATISTICS_INTERVAL_MS: &str = "1000";
/// How long the producer must have had no broker before that alone counts as stuck: two
/// statistics reports, so a broker being replaced by its learned self is not mistaken for
/// one lost.
const BROKERLESS_AFTER: Duration = Duration::from_secs(2);
/// How long a fresh client may take to get the brokers' metadata.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Records handed to the producer and not yet reported on, and when the last report
/// (delivered or failed) came.
#[derive(Debug)]
pub struct Outstanding {
    origin: Instant,
    waiting: AtomicUsize,
    last_report_ms: AtomicU64,
}

impl Default for Outstanding {
    fn default() -> Self {
        Outstanding { origin: Instant::now(), waiting: AtomicUsize::new(0), last_report_ms: AtomicU64::new(0) }
    }
}

impl Outstanding {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Records are waiting and none was reported on for `after`.
    pub fn stalled(&self, after: Duration) -> bool {
        let quiet = self.now_ms().saturating_sub(self.last_report_ms.load(Ordering::Acquire));
        self.waiting.load(Ordering::Acquire) > 0 && quiet >= after.as_millis() as u64
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// A record handed to the producer: `Tracked` reports on it when its delivery resolves
    /// or is dropped. The first record after a quiet time starts the clock.
    pub fn track<F>(self: &Arc<Self>, delivery: F) -> Tracked<F> {
        if self.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            self.last_report_ms.store(self.now_ms(), Ordering::Release);
        }
        Tracked { delivery, _report: Report(self.clone()) }
    }
}

/// A delivery and its place in `Outstanding`.
pub struct Tracked<F> {
    pub delivery: F,
    _report: Report,
}

struct Report(Arc<Outstanding>);

impl Drop for Report {
    fn drop(&mut self) {
        self.0.last_report_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
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
    pub fn update(&self, statistics: &[u8]) {
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

impl KafkaSink {
    /// Replaces the producer whenever it is stuck (see the module's header) until `stop`.
    /// `route` names the route in logs and metrics.
    pub async fn supervise(self, route: String, stop: CancellationToken) {
        let meters = RecoveryMeters::new(&route);
        // Since when the brokers have answered a fresh client while records waited.
        let mut answering_since: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
            let brokerless = self.progress().waiting() > 0 && self.context().brokers().none_for(BROKERLESS_AFTER);
            if !(brokerless || self.progress().stalled(STUCK_AFTER)) || !self.brokers_answer().await {
                answering_since = None;
                continue;
            }
            let since = *answering_since.get_or_insert_with(Instant::now);
            if !brokerless && since.elapsed() < STUCK_AFTER {
                continue;
            }
            answering_since = None;
            let waiting = self.progress().waiting();
            match self.replace_producer().await {
                Ok(()) => {
                    meters.recovered();
                    let cause = if brokerless { "the producer has no broker left" } else { "the producer reported nothing" };
                    tracing::warn!(
                        route = %route,
                        waiting,
                        cause,
                        "Kafka producer stuck while the brokers answer a new client; replaced it and sending its events again (same ids, in order)"
                    );
                }
                Err(e) => tracing::error!(route = %route, error = %e, "Kafka producer is stuck and a new one cannot be created; retrying"),
            }
        }
    }

    /// Whether a new client with the sink's settings gets the brokers' metadata now.
    async fn brokers_answer(&self) -> bool {
        let Ok(client) = self.client_config().create_with_context::<QuietContext, AdminClient<QuietContext>>(self.context().clone()) else {
            return false;
        };
        tokio::task::spawn_blocking(move || client.inner().fetch_metadata(None, Timeout::After(PROBE_TIMEOUT)).is_ok_and(|md| !md.brokers().is_empty()))
            .await
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn progress_stalls_only_while_records_wait_without_a_report() {
        let p = Arc::new(Outstanding::default());
        assert!(!p.stalled(Duration::ZERO), "nothing waits");
        let tracked = p.track(());
        assert_eq!(p.waiting(), 1);
        assert!(p.stalled(Duration::ZERO));
        assert!(!p.stalled(Duration::from_secs(60)), "the clock starts with the first waiting record");
        drop(tracked);
        assert_eq!(p.waiting(), 0, "a dropped delivery counts as reported");
        assert!(!p.stalled(Duration::ZERO));
    }
}
