//! `deltaship rebuild`: the reference consumer. Reads a Kafka topic or a JetStream stream
//! from the start, follows the consumer protocol, and writes the rebuilt state.

mod kafka;
mod nats;
pub mod protocol;

use serde_json::Value;

use protocol::{ProtocolError, Received, State};

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("{0}")]
    Source(String),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// Where to read from.
pub enum Source {
    /// `connection`: a Kafka sink's config whose TLS, SASL and librdkafka settings the
    /// reader uses (`rebuild --config`).
    Kafka {
        brokers: String,
        topics: Vec<String>,
        connection: Option<Box<crate::config::KafkaConfig>>,
    },
    Nats { url: String, stream: String },
}

/// Reads the whole source and returns the rebuilt state as a JSON document:
/// `{"resources": {"<apiVersion>/<Kind>": {"<namespace>/<name>": object}}, "summary": {...}}`.
/// With `cluster`, only that cluster's events are applied (a topic or stream may carry
/// several clusters; without it their objects of the same key would overwrite each other).
pub async fn rebuild(source: Source, cluster: Option<String>) -> Result<Value, RebuildError> {
    let mut state = State::new(cluster.clone());
    match source {
        Source::Kafka { brokers, topics, connection } => {
            // The Kafka reader blocks; keep it off the async threads.
            state = tokio::task::spawn_blocking(move || {
                let mut state = State::new(cluster);
                kafka::read(&brokers, &topics, connection.as_deref(), |e| state.apply(e).map_err(Into::into)).map(|_| state)
            })
            .await
            .map_err(|e| RebuildError::Source(e.to_string()))??;
        }
        Source::Nats { url, stream } => nats::read(&url, &stream, |e| state.apply(e).map_err(Into::into)).await?,
    }
    Ok(state.document())
}

/// A structured-mode event (the whole CloudEvent as JSON).
fn from_structured(event: Value, partition: i32) -> Result<Received, String> {
    let text = |name: &str| event.get(name).and_then(Value::as_str).map(str::to_string);
    Ok(Received {
        id: text("id").ok_or("no id")?,
        ty: text("type").ok_or("no type")?,
        cluster: text("cluster").unwrap_or_default(),
        apiversion: text("apiversion").unwrap_or_default(),
        kind: text("kind").unwrap_or_default(),
        subject: text("subject"),
        datacontenttype: text("datacontenttype"),
        data: event.get("data").cloned(),
        partition,
    })
}
