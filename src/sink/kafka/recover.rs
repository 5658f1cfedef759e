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
//! for STUCK_AFTER. On a fenced route a record waits until its transaction settled, so a
//! commit that cannot complete (its producer lost the coordinator) triggers it too: the new
//! producer's initialisation aborts the transaction, and its records are sent again.

use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

use super::KafkaSink;
use crate::broker::kafka::QuietContext;
use crate::telemetry::meters::RecoveryMeters;

/// How long records may wait without any delivery report, and the brokers must have
/// answered a fresh client, before the producer counts as stuck: longer than librdkafka's
/// longest reconnect backoff (`reconnect.backoff.max.ms`, 10 s), so that a producer that
/// is merely reconnecting after an outage is left alone.
pub const STUCK_AFTER: Duration = Duration::from_secs(15);
/// How often a route with waiting records is checked: as often as the producer reports its
/// statistics (`broker::kafka::STATISTICS_INTERVAL_MS`).
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long the producer must have had no broker before that alone counts as stuck: two
/// statistics reports, so a broker being replaced by its learned self is not mistaken for
/// one lost.
const BROKERLESS_AFTER: Duration = Duration::from_secs(2);
/// How long a fresh client may take to get the brokers' metadata.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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
