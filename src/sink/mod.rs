//! The sink stage: publish routed events and report, per event, when the broker has them.

pub mod encode;
pub mod kafka;
mod kafka_log;
mod kafka_recover;
pub mod nats;
pub mod stdout;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::config::{Secret, SinkConfig};
use crate::event::Envelope;

pub use kafka::KafkaSink;
pub use nats::NatsSink;
pub use stdout::StdoutSink;

#[derive(Debug, Clone, thiserror::Error)]
pub enum SendError {
    /// Worth retrying (broker unavailable, timeouts, full queues): retried with backoff.
    #[error("{kind}: {message}")]
    Retryable { kind: &'static str, message: String },
    /// The sink refuses this event because of its size.
    #[error("event too large: {message}")]
    TooLarge { message: String },
    /// Retrying cannot help (authorization, invalid topic, configuration).
    #[error("{kind}: {message}")]
    Fatal { kind: &'static str, message: String },
}

impl SendError {
    /// The `error_kind` metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            SendError::Retryable { kind, .. } | SendError::Fatal { kind, .. } => kind,
            SendError::TooLarge { .. } => "too_large",
        }
    }
}

/// Reads a sink's secret file at start-up; a failure is fatal and names the key and the
/// file, never the content.
pub(crate) fn read_secret(key: &str, file: &std::path::Path) -> Result<Secret, SendError> {
    Secret::from_file(key, file).map_err(|e| SendError::Fatal { kind: "config", message: e.to_string() })
}

/// What the dispatcher needs of a sink: publish one event, resolving on acknowledgement.
pub trait Publisher: Clone + Send + Sync + 'static {
    /// The `sink` metric label.
    fn name(&self) -> &'static str;
    fn send(&self, env: Arc<Envelope>) -> BoxFuture<'static, Result<(), SendError>>;
}

/// The configured sink. Cloning is cheap (shared handles).
#[derive(Clone)]
pub enum Sink {
    Stdout(StdoutSink),
    Kafka(KafkaSink),
    Nats(Box<NatsSink>),
}

impl Publisher for Sink {
    fn name(&self) -> &'static str {
        match self {
            Sink::Stdout(_) => "stdout",
            Sink::Kafka(_) => "kafka",
            Sink::Nats(_) => "nats",
        }
    }

    fn send(&self, env: Arc<Envelope>) -> BoxFuture<'static, Result<(), SendError>> {
        let sink = self.clone();
        Box::pin(async move {
            match &sink {
                Sink::Stdout(s) => s.send(&env),
                Sink::Kafka(k) => k.send(&env).await,
                Sink::Nats(n) => n.send(&env).await,
            }
        })
    }
}

impl Sink {
    pub async fn from_config(cfg: &SinkConfig) -> Result<Sink, SendError> {
        Ok(match cfg {
            SinkConfig::Stdout {} => Sink::Stdout(StdoutSink::default()),
            SinkConfig::Kafka(k) => Sink::Kafka(KafkaSink::new(k)?),
            SinkConfig::Nats(n) => Sink::Nats(Box::new(NatsSink::connect(n).await?)),
        })
    }

    /// Makes the destinations ready before anything is sent: creates missing Kafka topics
    /// (when configured) or the JetStream stream (when configured).
    pub async fn prepare(&self, cfg: &SinkConfig, topics: &[String]) -> Result<(), SendError> {
        match (self, cfg) {
            (Sink::Kafka(_), SinkConfig::Kafka(k)) => kafka::create_topics(k, topics).await,
            (Sink::Nats(n), _) => n.prepare().await,
            _ => Ok(()),
        }
    }

    /// Whether the sink can be reached now (for /readyz).
    pub async fn probe(&self) -> Result<(), SendError> {
        match self {
            Sink::Stdout(_) => Ok(()),
            Sink::Kafka(k) => k.probe(Duration::from_secs(5)).await.map(|_| ()),
            Sink::Nats(n) => n.probe(),
        }
    }

    /// Watches over the sink's client until `stop`: a Kafka producer that is stuck is
    /// replaced (kafka_recover); the other clients recover by themselves.
    pub async fn supervise(self, route: String, stop: CancellationToken) {
        if let Sink::Kafka(k) = self {
            k.supervise(route, stop).await;
        }
    }

    /// Drops what is queued and not yet sent (a deposed leader must stop publishing).
    pub fn purge(&self) {
        if let Sink::Kafka(k) = self {
            k.purge();
        }
    }

    /// Waits until what was sent is on its way, at most `timeout` (a disconnected client
    /// would otherwise wait for its server forever).
    pub async fn flush(&self, timeout: Duration) -> Result<(), SendError> {
        let flushed = async {
            match self {
                Sink::Stdout(_) => Ok(()),
                Sink::Kafka(k) => k.flush(timeout).await,
                Sink::Nats(n) => n.flush().await,
            }
        };
        tokio::time::timeout(timeout, flushed).await.unwrap_or_else(|_| {
            Err(SendError::Retryable {
                kind: "flush",
                message: format!("not flushed within {timeout:?}"),
            })
        })
    }
}
