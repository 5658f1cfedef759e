//! Why a checkpoint store could not be opened, read or written.

use std::time::Duration;

use rdkafka::types::RDKafkaErrorCode;

use crate::broker::kafka::{ClientError, Undelivered};
use crate::broker::nats::ConnectError;

/// What `open` says when the Kafka topic is missing and deltaship may not create it.
const CREATE_FIX: &str = "create it with one partition and cleanup.policy=compact, set sink.create_topics to let deltaship create it, \
                          name an existing compacted topic in resume.kafka_topic, or set resume.enabled = false";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("checkpoint file {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint topic {topic}: {source}")]
    Kafka {
        topic: String,
        #[source]
        source: TopicError,
    },
    #[error("checkpoint bucket {bucket}: {source}")]
    Nats {
        bucket: String,
        #[source]
        source: BucketError,
    },
    /// The store exists in a shape deltaship cannot use, or may not be created: retrying
    /// does not help.
    #[error("checkpoint {store} cannot be used: {reason}")]
    Refused { store: String, reason: Refusal },
}

impl StoreError {
    /// Whether retrying cannot help (the store must be fixed first).
    pub fn is_permanent(&self) -> bool {
        matches!(self, StoreError::Refused { .. })
    }
}

/// What failed on a checkpoint topic. The client's errors are boxed: they are large, and
/// a store's every write returns a `Result` of this.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// A client cannot be made, or a read of the topic failed.
    #[error("{0}")]
    Client(#[source] Box<ClientError>),
    /// A request about the topic failed: `what` it was for.
    #[error("{what}: {source}")]
    Request {
        what: &'static str,
        #[source]
        source: Box<ClientError>,
    },
    #[error("not authorized to describe the topic (the user needs Describe on it)")]
    DescribeRefused,
    #[error("cannot read its metadata: {0}")]
    Metadata(RDKafkaErrorCode),
    #[error("cannot read its configuration: {0} (the user needs DescribeConfigs on the topic)")]
    Configuration(RDKafkaErrorCode),
    #[error("the topic has no partitions yet")]
    NoPartitions,
    #[error("not authorized to create the topic (the user needs Create on it): {CREATE_FIX}")]
    CreateRefused,
    #[error("cannot create it: {0}")]
    NotCreated(RDKafkaErrorCode),
    #[error("created, but its metadata did not show it in time")]
    NotShown,
    #[error("the brokers did not acknowledge a record within {0:?}")]
    Unacknowledged(Duration),
    /// A record was reported delivered without proof that the broker wrote it.
    #[error("not written: {0}")]
    Unconfirmed(#[source] Undelivered),
}

impl From<ClientError> for TopicError {
    fn from(e: ClientError) -> TopicError {
        TopicError::Client(Box::new(e))
    }
}

/// What failed on a checkpoint bucket.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("{0}")]
    Connect(#[from] ConnectError),
    /// The bucket cannot be created now (the server did not answer in time).
    #[error("cannot create the bucket: {0}")]
    CreateTimedOut(#[source] async_nats::jetstream::context::CreateKeyValueError),
    /// The server refuses to create the bucket.
    #[error("cannot create the bucket: {source}; create it (history 1), allow the user to create the stream KV_{bucket}, or set resume.enabled = false")]
    CreateRefused {
        bucket: String,
        #[source]
        source: async_nats::jetstream::context::CreateKeyValueError,
    },
    #[error("cannot look up the bucket: {0}")]
    Lookup(#[source] async_nats::jetstream::context::KeyValueError),
    /// Reading the bucket failed: `what` was being done.
    #[error("{what}: {source}")]
    Read {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("reading ended early")]
    Ended,
    #[error("no value within {within:?} while {pending} were pending")]
    Silent { within: Duration, pending: u64 },
    #[error("the server did not acknowledge a value within {0:?}")]
    Unacknowledged(Duration),
    #[error("not written: {0}")]
    NotWritten(#[source] async_nats::jetstream::context::PublishError),
}

/// Why a store is refused for good.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the topic does not exist and sink.create_topics is not set: {CREATE_FIX}")]
    NoTopic,
    #[error(
        "the topic has {0} partitions; a checkpoint topic needs exactly one (its records are read back in order): name another topic in resume.kafka_topic, or delete this one"
    )]
    Partitions(usize),
    #[error(
        "the topic's cleanup.policy is `{0}`; a checkpoint topic must be compacted (cleanup.policy=compact) to keep the latest record of every key: alter the topic, or name another topic in resume.kafka_topic"
    )]
    NotCompacted(String),
    #[error("a stream of that name exists and is not a key-value bucket: name another bucket in resume.nats_bucket")]
    NotABucket,
    #[error("it is a symbolic link; checkpoints are written only to the file itself: replace the link by a regular file (or remove it)")]
    SymbolicLink,
    #[error("it keeps no checkpoint")]
    NoCheckpoint,
}
