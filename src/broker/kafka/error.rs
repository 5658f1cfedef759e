//! What a Kafka client of deltaship's failed on: its settings, a request, the read of a
//! topic. The sink, the checkpoint store and rebuild each say what they were doing.

use std::time::Duration;

use rdkafka::Offset;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use super::context::{CauseKind, QuietContext};
use crate::config::{SecretFileError, mask_secrets_in};

/// How old a client error may be to explain a failed request: a minute, the interval of
/// the client error log lines.
const RECENT_CAUSE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A secret file of the connection settings cannot be read.
    #[error("{0}")]
    Settings(#[from] SecretFileError),
    /// librdkafka refuses the client's settings. The text has the values of secret options
    /// masked; librdkafka's error is not kept, as it may echo a secret value.
    #[error("cannot create the Kafka {client}: {masked}")]
    Refused { client: &'static str, masked: String },
    /// librdkafka failed a request, and no recent client error says why.
    #[error("{0}")]
    Request(#[source] KafkaError),
    /// A request found no broker; `cause` is the client's latest connection error.
    #[error("{source}; the client reports: {cause}")]
    Unreachable {
        #[source]
        source: Box<KafkaError>,
        cause: String,
    },
    /// A request found no broker while SASL refused the credentials.
    #[error("{cause}; the brokers refused the credentials: check the sink's sasl settings (mechanism, username, password)")]
    CredentialsRefused {
        #[source]
        source: Box<KafkaError>,
        cause: String,
    },
    /// A request found no broker while the TLS handshake failed.
    #[error(
        "{cause}; TLS failed: check the sink's tls settings (ca_file must hold the brokers' CA; cert_file and key_file a client certificate the brokers trust)"
    )]
    TlsFailed {
        #[source]
        source: Box<KafkaError>,
        cause: String,
    },
    /// The task of a blocking client call failed.
    #[error("{0}")]
    Blocking(#[source] tokio::task::JoinError),
    /// The metadata of a topic cannot be read.
    #[error("no metadata for topic {topic}: {source}")]
    Metadata {
        topic: String,
        #[source]
        source: KafkaError,
    },
    /// The metadata of a topic lists no partition.
    #[error("topic {topic} does not exist")]
    NoTopic { topic: String },
    /// A partition's first and next offsets cannot be read.
    #[error("no offsets for {topic}/{partition}: {source}")]
    Offsets {
        topic: String,
        partition: i32,
        #[source]
        source: KafkaError,
    },
    /// The brokers cannot say where a topic's records of a time start.
    #[error("cannot find {topic}'s records by time: {source}")]
    TimeQuery {
        topic: String,
        #[source]
        source: KafkaError,
    },
    /// The broker cannot say where a partition's records of a time start.
    #[error("cannot find {topic}/{partition}'s records by time: {source}")]
    ByTime {
        topic: String,
        partition: i32,
        #[source]
        source: KafkaError,
    },
    /// The broker answered the time query of a partition with no offset.
    #[error("cannot find {topic}/{partition}'s records by time: the broker answered {answer:?}")]
    ByTimeAnswered { topic: String, partition: i32, answer: Offset },
    /// The reader cannot be pointed at a partition, or reading it failed.
    #[error("reading {topic}/{partition}: {source}")]
    Read {
        topic: String,
        partition: i32,
        #[source]
        source: KafkaError,
    },
    /// A partition not read to its end gave no record for `within`.
    #[error("no record from {topic}/{partition} within {within:?}")]
    Silent { topic: String, partition: i32, within: Duration },
}

impl ClientError {
    /// The error of a client that cannot be created with `config`, with the values of
    /// secret options masked: librdkafka echoes the value of an option it refuses.
    pub fn refused(client: &'static str, config: &ClientConfig, e: KafkaError) -> ClientError {
        ClientError::Refused { client, masked: mask_secrets_in(&e.to_string(), config.config_map()) }
    }

    /// `e`, naming the client's latest connection error when there is a recent one: a
    /// request fails or times out on transport while SASL refuses the credentials or the
    /// TLS handshake fails on every connection attempt.
    pub fn explained(ctx: &QuietContext, e: KafkaError) -> ClientError {
        let Some(cause) = ctx.recent_cause(RECENT_CAUSE) else { return ClientError::Request(e) };
        let (source, cause_text) = (Box::new(e), cause.text);
        match cause.kind {
            CauseKind::Authentication => ClientError::CredentialsRefused { source, cause: cause_text },
            CauseKind::Tls => ClientError::TlsFailed { source, cause: cause_text },
            CauseKind::Other => ClientError::Unreachable { source, cause: cause_text },
        }
    }

    /// What the connection error that explains this one says is wrong, if one does.
    pub fn cause(&self) -> Option<CauseKind> {
        match self {
            ClientError::CredentialsRefused { .. } => Some(CauseKind::Authentication),
            ClientError::TlsFailed { .. } => Some(CauseKind::Tls),
            ClientError::Unreachable { .. } => Some(CauseKind::Other),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::ClientContext;
    use rdkafka::error::RDKafkaErrorCode;

    use super::*;

    #[test]
    fn a_failed_request_names_the_latest_connection_error() {
        let ctx = QuietContext::default();
        let timeout = || KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure);
        assert!(matches!(ClientError::explained(&ctx, timeout()), ClientError::Request(_)));
        ctx.error(KafkaError::Global(RDKafkaErrorCode::Authentication), "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed");
        let e = ClientError::explained(&ctx, timeout());
        assert_eq!(e.cause(), Some(CauseKind::Authentication));
        assert!(e.to_string().contains("SASL authentication error") && e.to_string().contains("refused the credentials"), "{e}");
        ctx.error(
            KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure),
            "ssl://h:1/bootstrap: Receive failed: SSL routines::sslv3 alert bad certificate",
        );
        let e = ClientError::explained(&ctx, timeout());
        assert!(e.cause() == Some(CauseKind::Tls) && e.to_string().contains("TLS failed"), "{e}");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "h:1/bootstrap: Connect to ipv4#h:1 failed: Connection refused");
        let e = ClientError::explained(&ctx, timeout());
        assert!(e.cause() == Some(CauseKind::Other) && e.to_string().contains("Connection refused"), "{e}");
        let kept = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<Box<KafkaError>>());
        assert_eq!(kept.and_then(|k| k.rdkafka_error_code()), Some(RDKafkaErrorCode::BrokerTransportFailure), "the request's error is the source");
    }
}
