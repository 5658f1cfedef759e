//! A route's sink made ready: its destinations prepared and claimed, with retries while the
//! brokers cannot be reached, and its reachability probed for /readyz.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, SinkConfig};
use crate::sink::{Publisher, Sink, SinkError};
use crate::telemetry::RouteHealth;

use super::error::RunError;
use super::retry::RetryPolicy;

/// How often the sink's reachability is probed for /readyz: often until it is reachable
/// (a client connecting in the background becomes ready within a second or two), then
/// less often.
const PROBE_UNTIL_REACHABLE: Duration = Duration::from_secs(1);
const PROBE_WHILE_REACHABLE: Duration = Duration::from_secs(10);

/// The configuration key of route `i`'s sink, for errors: `sink` without `routes`, else
/// `routes[i].sink (name)`.
pub fn sink_key(config: &Config, i: usize) -> String {
    match config.routes.get(i) {
        Some(route) => format!("routes[{i}].sink ({})", route.name),
        None => "sink".into(),
    }
}

/// What a route's delivery task needs to prepare its sink.
pub struct SinkSetup {
    pub sink: Sink,
    pub config: SinkConfig,
    /// The sink's configuration key, for logs and errors.
    pub at: String,
    pub topics: Vec<String>,
    pub retry: RetryPolicy,
}

impl SinkSetup {
    /// Prepares the sink's destinations (topics, stream), retrying while the brokers
    /// cannot be reached: an unreachable broker keeps the route not ready, never crashes
    /// the bridge. False when stopped before the sink was ready.
    pub async fn prepare(&self, stop: &CancellationToken) -> Result<bool, RunError> {
        self.retrying(stop, "Cannot prepare the sink yet; retrying with backoff", || self.sink.prepare(&self.config, &self.topics)).await
    }

    /// Prepares the route's destinations and claims them for this leader's term
    /// (sink::fence), retrying while the brokers cannot be reached. False when stopped first.
    pub async fn claim(&self, lease: &crate::sink::fence::Lease, route: &str, stop: &CancellationToken) -> Result<bool, RunError> {
        if !self.prepare(stop).await? {
            return Ok(false);
        }
        let fence = || async { self.sink.fence(&self.config, lease, route).await.map_err(SinkError::Request) };
        self.retrying(stop, "Cannot fence the route yet; retrying with backoff (nothing is shipped before)", fence).await
    }

    /// `attempt` until it succeeds (true), fails for good (the error), or `stop` (false);
    /// retryable failures wait the retry policy's backoff, the first logged as `warning`.
    async fn retrying<F: Future<Output = Result<(), SinkError>>>(
        &self,
        stop: &CancellationToken,
        warning: &str,
        attempt: impl Fn() -> F,
    ) -> Result<bool, RunError> {
        let mut failures = 0;
        loop {
            match attempt().await {
                Ok(()) => return Ok(true),
                Err(e) if e.is_retryable() => {
                    if failures == 0 {
                        tracing::warn!(sink = self.sink.name(), at = %self.at, error = %e, "{warning}");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(self.retry.delay(failures)) => {}
                        _ = stop.cancelled() => return Ok(false),
                    }
                    failures += 1;
                }
                Err(source) => return Err(RunError::Sink { at: self.at.clone(), source }),
            }
        }
    }
}

/// Probes the sink at once (/readyz waits for it), then periodically; logs once per change
/// of state.
pub async fn probe_sink(sink: Sink, health: RouteHealth, stop: CancellationToken) {
    let mut next = Duration::ZERO;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(next) => {}
        }
        let result = sink.probe().await;
        next = if result.is_ok() { PROBE_WHILE_REACHABLE } else { PROBE_UNTIL_REACHABLE };
        if health.set_sink_connected(result.is_ok()) {
            match result {
                Ok(()) => tracing::info!(sink = sink.name(), route = health.name(), "Sink reachable"),
                Err(e) => tracing::warn!(sink = sink.name(), route = health.name(), error = %e, "Sink unreachable; retrying"),
            }
        }
    }
}
