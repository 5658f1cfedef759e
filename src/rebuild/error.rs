//! Why `rebuild` (or the resume's read of a log) stopped.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::context::{GetStreamError, RequestError};

use super::position::Position;
use super::step::Bad;
use crate::broker::kafka::ClientError;
use crate::broker::nats::ConnectError;

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The Kafka topic cannot be read.
    #[error("{0}")]
    Kafka(#[from] ClientError),
    /// Following the Kafka topics failed.
    #[error("following: {0}")]
    Following(#[source] rdkafka::error::KafkaError),
    /// `--nats` names credentials in the URL, which the NATS client does not send.
    #[error("--nats `{url}` holds credentials before a host, which the NATS client never sends; give them with --config (a NATS sink's `auth`)")]
    CredentialsInUrl { url: String },
    /// The NATS client cannot start (`url` masked).
    #[error("cannot connect to {url}: {source}")]
    NatsConnect {
        url: String,
        #[source]
        source: ConnectError,
    },
    /// The JetStream stream cannot be looked up.
    #[error("stream {stream}: {source}")]
    StreamLookup {
        stream: String,
        #[source]
        source: GetStreamError,
    },
    /// The JetStream stream's info cannot be read.
    #[error("stream {stream}: {source}")]
    StreamInfo {
        stream: String,
        #[source]
        source: RequestError,
    },
    /// Following: the server said nothing about the stream for `within`.
    #[error("following {stream}: no answer about the stream for {within:?}: {source}")]
    Unanswered {
        stream: String,
        within: Duration,
        #[source]
        source: RequestError,
    },
    /// Reading the stream at `sequence` failed for `within`, retries included.
    #[error("reading {stream}#{sequence} failed for {within:?}: {source}")]
    ReadFailed {
        stream: String,
        sequence: u64,
        within: Duration,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The stream read from a checkpoint went (`how`) while it was read.
    #[error("stream {stream} {how}")]
    StreamEnded { stream: String, how: &'static str },
    /// A recorded stream cannot be read.
    #[error("cannot read {}: {source}", .file.display())]
    Recording {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line of a recorded stream is neither a Kafka record nor a JetStream message.
    #[error("{}:{line}: not a recorded Kafka record or JetStream message: {source}", .file.display())]
    RecordedLine {
        file: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    /// The state file of `--follow` cannot be written.
    #[error("cannot write {}: {source}", .out.display())]
    StateFile {
        out: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The task of the blocking Kafka reader failed.
    #[error("{0}")]
    Blocking(#[source] tokio::task::JoinError),
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
