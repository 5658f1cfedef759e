//! The sink stage's errors: how a send failed (by a bounded kind), and what failed while
//! building, preparing, probing or flushing a sink.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::context::{CreateStreamError, GetStreamError, PublishError as JetStreamPublishError};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::broker::kafka::{ClientError, Undelivered};
use crate::broker::nats::ConnectError;
use crate::config::SecretFileError;

/// The bounded `error_kind` label of `deltaship_sink_errors_total`, also named in the
/// message of each failed send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The sink refuses the event because of its size.
    TooLarge,
    /// The broker refuses the producer the topic or the cluster.
    Authorization,
    /// The brokers refuse the credentials.
    Authentication,
    /// The TLS handshake or a certificate failed (an HTTP server's certificate that cannot
    /// be verified, a Kafka broker's handshake).
    Tls,
    /// The topic name is invalid.
    Topic,
    /// The topic does not exist and the broker does not create it.
    UnknownTopic,
    /// librdkafka's queue is full.
    QueueFull,
    /// The record was purged from a replaced producer, to be sent again.
    Purged,
    /// No acknowledgement in time.
    Timeout,
    /// Any other broker or transport error.
    Broker,
    /// The partitions of a topic (for a marker) or the brokers are unknown.
    Metadata,
    /// The producer dropped the delivery report.
    Canceled,
    /// The producer reported a record delivered without proof that the broker wrote it.
    Unconfirmed,
    /// A JetStream publish found no stream (it may still be loading after a restart).
    NoStream,
    /// Any other NATS publish error.
    Publish,
    /// The client did not flush.
    Flush,
    /// Writing to stdout failed.
    Io,
    /// The HTTP server is unreachable (refused, reset, name not found).
    Connect,
    /// The HTTP server answered 408, 429 or 5xx.
    Unavailable,
    /// The HTTP server refused the event with another 3xx or 4xx.
    Rejected,
    /// The broker refused a deposed leader's record: a successor claimed the route
    /// (sink::fence).
    Fenced,
}

impl ErrorKind {
    /// Every kind: the label values a dashboard can expect.
    pub const ALL: [ErrorKind; 21] = [
        ErrorKind::TooLarge,
        ErrorKind::Authorization,
        ErrorKind::Authentication,
        ErrorKind::Tls,
        ErrorKind::Topic,
        ErrorKind::UnknownTopic,
        ErrorKind::QueueFull,
        ErrorKind::Purged,
        ErrorKind::Timeout,
        ErrorKind::Broker,
        ErrorKind::Metadata,
        ErrorKind::Canceled,
        ErrorKind::Unconfirmed,
        ErrorKind::NoStream,
        ErrorKind::Publish,
        ErrorKind::Flush,
        ErrorKind::Io,
        ErrorKind::Connect,
        ErrorKind::Unavailable,
        ErrorKind::Rejected,
        ErrorKind::Fenced,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Authorization => "authorization",
            ErrorKind::Authentication => "authentication",
            ErrorKind::Tls => "tls",
            ErrorKind::Topic => "topic",
            ErrorKind::UnknownTopic => "unknown_topic",
            ErrorKind::QueueFull => "queue_full",
            ErrorKind::Purged => "purged",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Broker => "broker",
            ErrorKind::Metadata => "metadata",
            ErrorKind::Canceled => "canceled",
            ErrorKind::Unconfirmed => "unconfirmed",
            ErrorKind::NoStream => "no_stream",
            ErrorKind::Publish => "publish",
            ErrorKind::Flush => "flush",
            ErrorKind::Io => "io",
            ErrorKind::Connect => "connect",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Rejected => "rejected",
            ErrorKind::Fenced => "fenced",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a send (or a request of the sink's client) failed, which decides what the
/// dispatcher does with the event.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth retrying (broker unavailable, timeouts, full queues): retried with backoff.
    #[error("{kind}: {source}")]
    Retryable {
        kind: ErrorKind,
        #[source]
        source: Failure,
    },
    /// The sink refuses this event because of its size.
    #[error("event too large: {source}")]
    TooLarge {
        #[source]
        source: Failure,
    },
    /// Retrying cannot help (authorization, invalid topic, configuration).
    #[error("{kind}: {source}")]
    Fatal {
        kind: ErrorKind,
        #[source]
        source: Failure,
    },
    /// The sink refused this event and its policy is to skip such events (the HTTP sink's
    /// `on_client_error = "skip"`): dropped and counted.
    #[error("rejected: {source}")]
    Rejected {
        #[source]
        source: Failure,
    },
}

impl SendError {
    /// The `error_kind` metric label.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SendError::Retryable { kind, .. } | SendError::Fatal { kind, .. } => *kind,
            SendError::TooLarge { .. } => ErrorKind::TooLarge,
            SendError::Rejected { .. } => ErrorKind::Rejected,
        }
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, SendError::Retryable { .. })
    }
}

/// What a send, or a request of the sink's client, failed on. librdkafka's errors are
/// boxed: they are large, and every event's outcome carries a `Result` of this.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// librdkafka failed or refused a record or a request.
    #[error("{0}")]
    Kafka(#[source] Box<KafkaError>),
    /// A request of the Kafka client failed, with the client's latest connection error
    /// that says why.
    #[error("{0}")]
    KafkaClient(#[source] Box<ClientError>),
    /// The metadata of a marker's topic lists no partition.
    #[error("the topic has no partitions yet")]
    NoPartitions,
    /// librdkafka reported a record delivered without an offset: sent again.
    #[error("{}", Undelivered::Unconfirmed)]
    Unconfirmed,
    /// The log could not be read for a record whose delivery was in doubt (kafka::resend):
    /// nothing in doubt is sent until it can.
    #[error("cannot tell whether an earlier attempt was written: {0}")]
    Lookup(#[source] Box<ClientError>),
    /// The producer went away without reporting on a record.
    #[error("the producer dropped the delivery report")]
    DeliveryDropped(#[source] tokio::sync::oneshot::error::RecvError),
    /// A Kafka transaction did not commit (sink::fence), or its producer cannot send any
    /// more; with what librdkafka said.
    #[error("the Kafka transaction failed: {0}")]
    Transaction(String),
    /// The task of a blocking librdkafka call failed.
    #[error("{0}")]
    Blocking(#[source] tokio::task::JoinError),
    /// JetStream did not store a message.
    #[error("{0}")]
    JetStream(#[source] JetStreamPublishError),
    /// Core NATS did not take a message.
    #[error("{0}")]
    NatsPublish(#[source] async_nats::PublishError),
    /// The NATS client did not flush.
    #[error("{0}")]
    NatsFlush(#[source] async_nats::client::FlushError),
    /// Writing to stdout failed.
    #[error("writing to stdout failed: {0}")]
    Stdout(#[source] std::io::Error),
    /// The HTTP server answered with a status that is not a success.
    #[error("the server answered {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    HttpStatus {
        status: u16,
        /// What its `Retry-After` asked for.
        retry_after: Option<Duration>,
        /// The start of the answer's body.
        body: String,
    },
    /// The HTTP request failed before an answer (connection, TLS). Shown with its causes:
    /// the client's own text names only the step ("client error (Connect)").
    #[error("{}", causes(.0))]
    HttpTransport(#[source] hyper_util::client::legacy::Error),
    /// The sink's credential cannot be an `Authorization` header (the value is not shown).
    #[error("the credential holds characters a header cannot carry (not shown)")]
    HttpCredentialHeader(#[source] http::header::InvalidHeaderValue),
    /// An attribute of the event cannot be a header of the binary mode (`ce-` and its name,
    /// with its value percent-encoded).
    #[error("{header}: {source}")]
    HttpHeader {
        header: String,
        #[source]
        source: http::Error,
    },
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    HttpTimeout(Duration),
    /// The HTTPS server's certificate cannot be verified (`url` masked): no retry can
    /// help, the certificate or the sink's settings must change.
    #[error("the certificate of the HTTPS server at {url} cannot be verified: {problem}; fix: {fix}")]
    HttpCertificate { url: String, problem: String, fix: String },
    /// A credential file of the sink could not be read.
    #[error("{0}")]
    Credential(#[source] SecretFileError),
}

/// An error with its causes, each after a colon ("client error (Connect): tcp connect error:
/// Connection refused").
pub(super) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

impl Failure {
    /// How long the sink asked to wait before the next attempt (HTTP `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::HttpStatus { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What failed while building, preparing, probing or flushing a sink. The messages start
/// with what failed, as the sink errors of earlier releases did (`config: ...`).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A secret file of the sink cannot be read.
    #[error("config: {0}")]
    SecretFile(#[from] SecretFileError),
    /// librdkafka refuses the client's settings (boxed: it is large).
    #[error("config: {0}")]
    KafkaClient(#[source] Box<ClientError>),
    /// A topic cannot be created (not: it exists already).
    #[error("create_topic: cannot create topic {topic}: {source}")]
    TopicNotCreated {
        topic: String,
        #[source]
        source: RDKafkaErrorCode,
    },
    /// The NATS client cannot start (the credentials, the URL, the TLS files).
    #[error("config: {0}")]
    NatsClient(#[source] ConnectError),
    /// The NATS connection is down.
    #[error("disconnected: NATS connection is {0}")]
    NatsDisconnected(async_nats::connection::State),
    /// The JetStream stream cannot be looked up (the server is unreachable).
    #[error("jetstream: cannot look up stream {stream}: {source}")]
    StreamLookup {
        stream: String,
        #[source]
        source: GetStreamError,
    },
    /// The JetStream stream does not exist and creating it is off.
    #[error("stream_not_found: JetStream stream {stream} does not exist; create it or set sink.jetstream.create = true")]
    StreamNotFound { stream: String },
    /// The server refuses the stream (e.g. its subjects overlap another stream's).
    #[error("create_stream: cannot create stream {stream}: {source}; fix sink.jetstream (stream name, subjects) or the existing streams")]
    StreamRefused {
        stream: String,
        #[source]
        source: CreateStreamError,
    },
    /// The stream cannot be created now (the server is unreachable).
    #[error("jetstream: cannot create stream {stream}: {source}")]
    StreamNotCreated {
        stream: String,
        #[source]
        source: CreateStreamError,
    },
    /// The HTTP sink's TLS files cannot be used.
    #[error("config: {key}: cannot use {}: {reason}", file.display())]
    HttpTls { key: &'static str, file: PathBuf, reason: String },
    /// The HTTP sink's URL is missing or invalid (checked at start-up already).
    #[error("config: sink.url: {0}")]
    HttpUrl(String),
    /// `K_CE_OVERRIDES` is refused (checked at start-up already).
    #[error("config: K_CE_OVERRIDES: {0}")]
    CeOverrides(String),
    /// The HTTP server cannot be reached.
    #[error("the HTTP server at {address} is unreachable: {reason}")]
    HttpUnreachable { address: String, reason: String },
    /// What was sent is not on its way within the flush timeout.
    #[error("flush: not flushed within {0:?}")]
    FlushTimedOut(Duration),
    /// A request of the sink's client failed, classified as a send is.
    #[error(transparent)]
    Request(#[from] SendError),
}

impl SinkError {
    /// Whether trying again later may succeed (the server is unreachable now).
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::NatsDisconnected(_)
            | SinkError::StreamLookup { .. }
            | SinkError::StreamNotCreated { .. }
            | SinkError::FlushTimedOut(_)
            | SinkError::HttpUnreachable { .. } => true,
            SinkError::Request(e) => e.is_retryable(),
            SinkError::SecretFile(_)
            | SinkError::KafkaClient(_)
            | SinkError::TopicNotCreated { .. }
            | SinkError::NatsClient(_)
            | SinkError::StreamNotFound { .. }
            | SinkError::StreamRefused { .. }
            | SinkError::HttpTls { .. }
            | SinkError::HttpUrl(_)
            | SinkError::CeOverrides(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_have_distinct_snake_case_labels() {
        let labels: std::collections::HashSet<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), ErrorKind::ALL.len());
        assert!(labels.iter().all(|l| l.chars().all(|c| c.is_ascii_lowercase() || c == '_')), "{labels:?}");
    }

    #[test]
    fn the_readme_lists_every_error_kind_of_failed_sends() {
        let readme = include_str!("../../README.md");
        let row = readme.lines().find(|l| l.starts_with("| `deltaship_sink_errors_total`")).expect("the metric's row");
        let listed: Vec<&str> = row.split('`').skip(3).step_by(2).collect();
        assert_eq!(listed, ErrorKind::ALL.map(ErrorKind::as_str), "{row}");
    }

    #[test]
    fn a_send_error_says_its_kind_then_what_failed_and_keeps_the_cause() {
        use std::error::Error;
        let e = SendError::Fatal {
            kind: ErrorKind::Authorization,
            source: Failure::Kafka(Box::new(KafkaError::MessageProduction(RDKafkaErrorCode::TopicAuthorizationFailed))),
        };
        assert!(e.to_string().starts_with("authorization: Message production error: TopicAuthorizationFailed"), "{e}");
        let kafka = e.source().and_then(|f| f.source()).and_then(|k| k.downcast_ref::<Box<KafkaError>>());
        assert_eq!(kafka.and_then(|k| k.rdkafka_error_code()), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
        let big = SendError::TooLarge { source: Failure::NoPartitions };
        assert_eq!(big.kind(), ErrorKind::TooLarge);
        assert!(!big.is_retryable() && SinkError::Request(big).to_string().starts_with("event too large: "));
    }
}
