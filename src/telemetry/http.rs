//! The HTTP server: /metrics (Prometheus text), /healthz (alive), /readyz (ready).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

use super::Health;
use super::listener::Bounded;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot install the metrics recorder: {0}")]
    Recorder(String),
    #[error("cannot listen on {addr} (http.listen): {source}; choose a free address")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

#[derive(Clone)]
struct AppState {
    metrics: PrometheusHandle,
    health: Arc<Health>,
}

/// Installs the metrics recorder, before anything is counted: metrics recorded earlier
/// (the API requests of start-up, say) would be lost.
pub fn install_recorder() -> Result<PrometheusHandle, HttpError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(super::metrics::PUBLISH_LATENCY.into()), &super::metrics::LATENCY_BUCKETS)
        .map_err(|e| HttpError::Recorder(e.to_string()))?
        .set_buckets_for_metric(Matcher::Full(super::metrics::EVENT_LAG.into()), &super::metrics::LAG_BUCKETS)
        .map_err(|e| HttpError::Recorder(e.to_string()))?
        .install_recorder()
        .map_err(|e| HttpError::Recorder(e.to_string()))?;
    super::metrics::describe();
    super::meters::build_info();
    Ok(handle)
}

/// Serves `metrics` (from `install_recorder`) and health until `stop` is cancelled, with at
/// most `max_connections` connections, each closed when a request does not arrive within
/// `request_timeout` (see `Bounded`). Binding happens before this returns, so a taken port
/// is a start-up error.
pub async fn serve(
    addr: SocketAddr,
    max_connections: usize,
    request_timeout: Duration,
    metrics: PrometheusHandle,
    health: Arc<Health>,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, HttpError> {
    let upkeep = metrics.clone();
    let upkeep_stop = stop.clone();
    // The exporter needs periodic upkeep to drain histogram buffers.
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => upkeep.run_upkeep(),
                _ = upkeep_stop.cancelled() => return,
            }
        }
    });
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AppState>| async move {
                let mut text = s.metrics.render();
                text.push_str(&super::process::render());
                text
            }),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health });
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| HttpError::Bind { addr, source })?;
    tracing::info!(%addr, max_connections, request_timeout_secs = request_timeout.as_secs(), "Serving /metrics, /healthz and /readyz");
    let listener = Bounded::new(listener, max_connections, request_timeout);
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
        if let Err(e) = served {
            tracing::error!(error = %e, "HTTP server failed");
        }
    }))
}

async fn healthz(State(s): State<AppState>) -> (StatusCode, String) {
    match s.health.liveness() {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {why}\n")),
    }
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    match s.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}
