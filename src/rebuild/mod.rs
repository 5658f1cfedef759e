//! `deltaship rebuild`: the reference consumer. Reads a Kafka topic or a JetStream stream
//! from the start, follows the consumer protocol, and writes the rebuilt state.

mod consumer;
pub mod decode;
mod error;
mod follow;
pub(crate) mod kafka;
pub(crate) mod nats;
mod position;
pub mod protocol;
mod recorded;
mod repeats;
pub mod step;

use serde_json::Value;

use consumer::Consumer;
pub use consumer::Skipped;
pub use error::RebuildError;
pub use follow::Follow;
pub use position::Position;
use protocol::ConsumerState;

/// Where to read from.
pub enum Source {
    /// `connection`: a Kafka sink's config whose TLS, SASL and librdkafka settings the
    /// reader uses (`rebuild --config`).
    Kafka { brokers: String, topics: Vec<String>, connection: Option<Box<crate::config::KafkaConfig>> },
    /// `connection`: a NATS sink's config whose credentials and TLS the reader uses (its
    /// `url` replaced by this one).
    Nats { url: String, stream: String, connection: Option<Box<crate::config::NatsConfig>> },
    /// A recorded stream: Kafka records or JetStream messages as JSON lines (the consumer
    /// test vectors' format, vectors/README.md).
    Recorded { file: std::path::PathBuf },
}

/// What `rebuild` made of the source.
pub struct Rebuilt {
    /// The state document, `skipped` and `mismatches` included.
    pub document: Value,
    pub skipped: Vec<Skipped>,
    /// Markers whose count and digest matched the state held, and those that did not.
    pub verified: u64,
    pub mismatched: u64,
}

/// Reads the whole source and returns the rebuilt state as a JSON document:
/// `{"resources": {"<apiVersion>/<Kind>": {"<namespace>/<name>": object}}, "summary": {...},
/// "skipped": [{position, "reason", "problem"}], "mismatches": [{"syncId", "cluster",
/// "resource", "namespace", "partition", "expected", "held"}]}`. Each marker whose count and
/// digest do not match the state held is also reported on stderr as it is read
/// (`state mismatch at marker ...`).
/// With `cluster`, only that cluster's events are applied (a topic or stream may carry
/// several clusters; without it their objects of the same key would overwrite each other).
/// Bad records are skipped and listed, or with `strict` end the rebuild with an error.
/// With `follow`, reading goes on after the end until `follow.stop`, the state written to
/// `follow.out` as it changes (a recorded stream has no more to follow).
pub async fn rebuild(source: Source, cluster: Option<String>, strict: bool, follow: Option<Follow>) -> Result<Rebuilt, RebuildError> {
    let mut consumer = Consumer::new(ConsumerState::new(cluster), strict);
    match source {
        Source::Kafka { brokers, topics, connection } => {
            // The Kafka reader blocks; keep it off the async threads.
            consumer =
                tokio::task::spawn_blocking(move || kafka::read(&brokers, &topics, connection.as_deref(), follow.as_ref(), &mut consumer).map(|_| consumer))
                    .await
                    .map_err(RebuildError::Blocking)??;
        }
        Source::Nats { url, stream, connection } => nats::read(&url, &stream, connection.as_deref(), follow.as_ref(), &mut consumer).await?,
        Source::Recorded { file } => recorded::read(&file, &mut consumer)?,
    }
    let document = consumer.document();
    let (verified, mismatched) = (consumer.state.summary.verified, consumer.state.summary.mismatched);
    Ok(Rebuilt { document, skipped: consumer.skipped, verified, mismatched })
}
