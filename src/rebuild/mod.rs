//! `deltaship rebuild`: the reference consumer. Reads a Kafka topic or a JetStream stream
//! from the start, follows the consumer protocol, and writes the rebuilt state.

pub mod decode;
mod follow;
pub(crate) mod kafka;
pub(crate) mod nats;
pub mod protocol;
mod recorded;
mod repeats;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use decode::{Bad, Step};
pub use follow::Follow;
use protocol::ConsumerState;

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("{0}")]
    Source(String),
    /// A bad record under `--strict`.
    #[error("record {at}: {bad}")]
    BadRecord { at: Position, bad: Bad },
    /// The JetStream stream was deleted (`how`: and perhaps created again) while it was
    /// read: no later message can come, and a stream created anew is not the one read.
    #[error(
        "JetStream stream {stream} at {url} {how} while rebuild read it (read up to #{read}); fix: check that --stream names the bridge's stream (its sink.jetstream.stream), and once the stream holds the bridge's events again, run rebuild from the start"
    )]
    StreamGone { stream: String, url: String, how: &'static str, read: u64 },
}

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

/// Where a record was read: a Kafka partition and offset, or a stream sequence.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Position {
    Kafka { topic: String, partition: i32, offset: i64 },
    Nats { stream: String, sequence: u64 },
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Kafka { topic, partition, offset } => write!(f, "{topic}/{partition}@{offset}"),
            Position::Nats { stream, sequence } => write!(f, "{stream}#{sequence}"),
        }
    }
}

/// A record skipped as bad: where, why, what exactly.
#[derive(Debug, Serialize)]
pub struct Skipped {
    #[serde(flatten)]
    pub at: Position,
    pub reason: decode::Reason,
    pub problem: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record {}: {}: {}", self.at, self.reason, self.problem)
    }
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

/// The protocol's state and what was skipped on the way.
struct Consumer {
    state: ConsumerState,
    /// Stop at the first bad record instead of skipping it.
    strict: bool,
    skipped: Vec<Skipped>,
    /// Whether a record was applied since the state was last written (`--follow`).
    changed: bool,
    /// How many of the state's mismatches were reported on stderr.
    reported: usize,
}

impl Consumer {
    /// One record read at `at`: applied, or, when bad, skipped and recorded (an error
    /// under `strict`).
    fn record(&mut self, at: impl FnOnce() -> Position, step: Result<Step, Bad>) -> Result<(), RebuildError> {
        self.changed = true;
        let applied = match step.and_then(|s| self.state.step(s)) {
            Ok(()) => Ok(()),
            Err(bad) => self.skip(at(), bad),
        };
        // Reported as found: `--follow` may run for days.
        for check in &self.state.mismatches[self.reported..] {
            eprintln!("state mismatch at {check}");
        }
        self.reported = self.state.mismatches.len();
        applied
    }

    /// The state document, with what was skipped.
    fn document(&mut self) -> Value {
        let mut document = self.state.document();
        document["skipped"] = serde_json::to_value(&self.skipped).expect("skipped records serialize");
        document
    }

    fn skip(&mut self, at: Position, bad: Bad) -> Result<(), RebuildError> {
        if self.strict {
            return Err(RebuildError::BadRecord { at, bad });
        }
        *self.state.summary.skipped.entry(bad.reason).or_default() += 1;
        self.skipped.push(Skipped { at, reason: bad.reason, problem: bad.problem });
        Ok(())
    }
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
    let mut consumer = Consumer { state: ConsumerState::new(cluster), strict, skipped: Vec::new(), changed: false, reported: 0 };
    match source {
        Source::Kafka { brokers, topics, connection } => {
            // The Kafka reader blocks; keep it off the async threads.
            consumer =
                tokio::task::spawn_blocking(move || kafka::read(&brokers, &topics, connection.as_deref(), follow.as_ref(), &mut consumer).map(|_| consumer))
                    .await
                    .map_err(|e| RebuildError::Source(e.to_string()))??;
        }
        Source::Nats { url, stream, connection } => nats::read(&url, &stream, connection.as_deref(), follow.as_ref(), &mut consumer).await?,
        Source::Recorded { file } => recorded::read(&file, &mut consumer)?,
    }
    let document = consumer.document();
    let (verified, mismatched) = (consumer.state.summary.verified, consumer.state.summary.mismatched);
    Ok(Rebuilt { document, skipped: consumer.skipped, verified, mismatched })
}
