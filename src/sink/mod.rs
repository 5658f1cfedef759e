//! The sink stage: publish routed events and report, per event, when the broker has them.

pub mod encode;
mod error;
pub mod fence;
pub mod http;
pub mod kafka;
mod late;
pub mod nats;
pub mod stdout;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::SinkConfig;
use crate::event::Envelope;
use crate::model::Placement;

pub use error::{ErrorKind, Failure, SendError, SinkError};
pub use http::HttpSink;
pub use kafka::KafkaSink;
pub use nats::NatsSink;
pub use stdout::StdoutSink;

/// What the dispatcher needs of a sink: publish one event, resolving on acknowledgement
/// with where the broker stored it, when the sink's log can be read back (Kafka, JetStream).
/// The dispatcher polls the sends of many objects at once; a send's work before its first
/// wait (encoding, the client's enqueue) should be short.
pub trait Publisher: Send + Sync + 'static {
    /// The `sink` metric label.
    fn name(&self) -> &'static str;
    fn send(&self, env: &Envelope) -> impl Future<Output = Result<Option<Placement>, SendError>> + Send;
    /// Asks the sink to send what it has batched at once: a barrier is up, and nothing more
    /// comes until what is in flight is acknowledged. Sinks that do not batch ignore it.
    fn expedite(&self) {}
    /// The dispatcher holds as many events as it may: nothing more comes until a send in
    /// flight is acknowledged. A sink that holds a batch open for more (a Kafka route's
    /// transaction) stops lingering for more and ends it once what it holds is acknowledged;
    /// the others ignore it.
    fn full(&self) {}
}

/// The configured sink. Cloning is cheap (shared handles).
#[derive(Clone)]
pub enum Sink {
    Stdout(StdoutSink),
    Kafka(KafkaSink),
    Nats(Box<NatsSink>),
    Http(HttpSink),
}

impl Publisher for Sink {
    fn name(&self) -> &'static str {
        match self {
            Sink::Stdout(_) => "stdout",
            Sink::Kafka(_) => "kafka",
            Sink::Nats(_) => "nats",
            Sink::Http(_) => "http",
        }
    }

    fn expedite(&self) {
        // Only the Kafka client batches (`linger.ms`); the others send each event at once.
        if let Sink::Kafka(k) = self {
            k.expedite();
        }
    }

    fn full(&self) {
        if let Sink::Kafka(k) = self {
            k.full();
        }
    }

    async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
        match self {
            Sink::Stdout(s) => s.send(env).map(|()| None),
            Sink::Kafka(k) => k.send(env).await,
            // Their sends' futures are 3-4 times the Kafka send's (870 and 770 bytes): boxed,
            // so that the future of every send stays under 1 KB, which the dispatcher
            // allocates per event (`pipeline::dispatch`'s test says why).
            Sink::Nats(n) => Box::pin(n.send(env)).await,
            Sink::Http(h) => Box::pin(h.send(env)).await.map(|()| None),
        }
    }
}

impl Sink {
    pub async fn from_config(cfg: &SinkConfig) -> Result<Sink, SinkError> {
        Ok(match cfg {
            SinkConfig::Stdout {} => Sink::Stdout(StdoutSink::default()),
            SinkConfig::Kafka(k) => Sink::Kafka(KafkaSink::new(k)?),
            SinkConfig::Nats(n) => Sink::Nats(Box::new(NatsSink::connect(n).await?)),
            SinkConfig::Http(h) => Sink::Http(HttpSink::new(h)?),
        })
    }

    /// Makes the destinations ready before anything is sent: creates missing Kafka topics
    /// (when configured) or the JetStream stream (when configured).
    pub async fn prepare(&self, cfg: &SinkConfig, topics: &[String]) -> Result<(), SinkError> {
        match (self, cfg) {
            (Sink::Kafka(_), SinkConfig::Kafka(k)) => kafka::create_topics(k, topics).await,
            (Sink::Nats(n), _) => n.prepare().await,
            _ => Ok(()),
        }
    }

    /// Claims the route for this leader's term (sink::fence), before it ships anything:
    /// Kafka initialises the transactional producer, JetStream publishes the fence record.
    /// Other sinks cannot fence. Retryable errors mean the broker is not reachable yet.
    pub async fn fence(&self, cfg: &SinkConfig, lease: &fence::Lease, route: &str) -> Result<(), SendError> {
        match (self, cfg) {
            (Sink::Kafka(k), _) => k.fence(&fence::transactional_id(lease, route), route).await,
            (Sink::Nats(n), SinkConfig::Nats(c)) => {
                let record = fence::FenceRecord::new(lease, format!("fence-{}", uuid::Uuid::new_v4()));
                n.fence(&c.jetstream.fence_subject_of(&lease.cluster, &lease.namespace, &lease.name), &record).await.map(|_| ())
            }
            _ => Ok(()),
        }
    }

    /// Whether the sink can be reached now (for /readyz).
    pub async fn probe(&self) -> Result<(), SinkError> {
        match self {
            Sink::Stdout(_) => Ok(()),
            Sink::Kafka(k) => k.probe(Duration::from_secs(5)).await.map(|_| ()),
            Sink::Nats(n) => n.probe(),
            Sink::Http(h) => h.probe().await,
        }
    }

    /// Watches over the sink's client until `stop`: a Kafka producer that is stuck is
    /// replaced (kafka::recover); the other clients recover by themselves.
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
    pub async fn flush(&self, timeout: Duration) -> Result<(), SinkError> {
        let flushed = async {
            match self {
                // An HTTP send is done when its answer came: nothing waits in a client.
                Sink::Stdout(_) | Sink::Http(_) => Ok(()),
                Sink::Kafka(k) => k.flush(timeout).await,
                Sink::Nats(n) => n.flush().await,
            }
        };
        tokio::time::timeout(timeout, flushed).await.unwrap_or(Err(SinkError::FlushTimedOut(timeout)))
    }
}
