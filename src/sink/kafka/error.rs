//! librdkafka's errors classified: retryable or not, and their `error_kind`.

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::broker::kafka::{CauseKind, ClientError, QuietContext};
use crate::sink::{ErrorKind, Failure, SendError, SinkError};

/// Retryable unless retrying cannot help (the broker or the config refuses the record).
pub(super) fn classify(e: KafkaError) -> SendError {
    use RDKafkaErrorCode as C;
    let (kind, retryable) = match e.rdkafka_error_code() {
        Some(C::MessageSizeTooLarge | C::InvalidMessageSize) => return SendError::TooLarge { source: Failure::Kafka(Box::new(e)) },
        Some(C::TopicAuthorizationFailed | C::ClusterAuthorizationFailed) => (ErrorKind::Authorization, false),
        Some(C::SaslAuthenticationFailed | C::Authentication) => (ErrorKind::Authentication, false),
        Some(C::InvalidTopic) => (ErrorKind::Topic, false),
        // The topic does not exist and the broker does not create it: create it or set
        // sink.create_topics.
        Some(C::UnknownTopic | C::UnknownTopicOrPartition) => (ErrorKind::UnknownTopic, false),
        Some(C::QueueFull) => (ErrorKind::QueueFull, true),
        // The producer was replaced (kafka::recover) or purged: sent again through the
        // current one.
        Some(C::PurgeQueue | C::PurgeInflight) => (ErrorKind::Purged, true),
        Some(C::MessageTimedOut | C::RequestTimedOut) => (ErrorKind::Timeout, true),
        // A successor initialised the route's transactional id (sink::fence).
        Some(C::ProducerFenced | C::InvalidProducerEpoch | C::Fenced) => (ErrorKind::Fenced, false),
        Some(C::TransactionalIdAuthorizationFailed) => (ErrorKind::Authorization, false),
        _ => (ErrorKind::Broker, true),
    };
    let source = Failure::Kafka(Box::new(e));
    if retryable { SendError::Retryable { kind, source } } else { SendError::Fatal { kind, source } }
}

/// `classify(e)`, naming the client's latest connection error when `e` only says that no
/// broker answered: a metadata request fails or times out on transport while SASL refuses
/// the credentials or the TLS handshake fails on every connection attempt. Stays
/// retryable: librdkafka keeps retrying, and the cause can go away without a restart (a
/// SCRAM user created or a broker certificate replaced after start-up).
pub fn explain(ctx: &QuietContext, e: KafkaError) -> SendError {
    match classify(e) {
        SendError::Retryable { kind, source: Failure::Kafka(source) } => match ClientError::explained(ctx, *source) {
            ClientError::Request(e) => SendError::Retryable { kind, source: Failure::Kafka(Box::new(e)) },
            explained => {
                let kind = match explained.cause() {
                    Some(CauseKind::Authentication) => ErrorKind::Authentication,
                    Some(CauseKind::Tls) => ErrorKind::Tls,
                    _ => kind,
                };
                SendError::Retryable { kind, source: Failure::KafkaClient(Box::new(explained)) }
            }
        },
        other => other,
    }
}

/// The error of a client that cannot be created with `config`, with the values of secret
/// options masked: librdkafka echoes the value of an option it refuses.
pub fn client_refused(client: &'static str, config: &ClientConfig, e: KafkaError) -> SinkError {
    SinkError::KafkaClient(Box::new(ClientError::refused(client, config, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_the_record_are_fatal_and_transient_errors_retryable_each_with_its_kind() {
        use RDKafkaErrorCode as C;
        let cases = [
            (C::MessageSizeTooLarge, ErrorKind::TooLarge, false),
            (C::TopicAuthorizationFailed, ErrorKind::Authorization, false),
            (C::ClusterAuthorizationFailed, ErrorKind::Authorization, false),
            (C::SaslAuthenticationFailed, ErrorKind::Authentication, false),
            (C::InvalidTopic, ErrorKind::Topic, false),
            (C::UnknownTopicOrPartition, ErrorKind::UnknownTopic, false),
            (C::QueueFull, ErrorKind::QueueFull, true),
            (C::PurgeInflight, ErrorKind::Purged, true),
            (C::MessageTimedOut, ErrorKind::Timeout, true),
            (C::ProducerFenced, ErrorKind::Fenced, false),
            (C::Fenced, ErrorKind::Fenced, false),
            (C::TransactionalIdAuthorizationFailed, ErrorKind::Authorization, false),
            (C::NotLeaderForPartition, ErrorKind::Broker, true),
            (C::BrokerTransportFailure, ErrorKind::Broker, true),
        ];
        for (code, kind, retryable) in cases {
            let e = classify(KafkaError::MessageProduction(code));
            assert_eq!((e.kind(), e.is_retryable()), (kind, retryable), "{code:?}: {e}");
        }
    }

    #[test]
    fn a_failed_metadata_request_takes_the_kind_of_the_latest_connection_error() {
        use rdkafka::ClientContext;
        let ctx = QuietContext::default();
        let timeout = || KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(explain(&ctx, timeout()).kind(), ErrorKind::Broker);
        ctx.error(KafkaError::Global(RDKafkaErrorCode::Authentication), "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed");
        let e = explain(&ctx, timeout());
        assert!(matches!(e, SendError::Retryable { kind: ErrorKind::Authentication, .. }), "{e:?}");
        assert!(e.to_string().contains("SASL authentication error"), "{e}");
        ctx.error(
            KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure),
            "ssl://h:1/bootstrap: Receive failed: SSL routines::sslv3 alert bad certificate",
        );
        let e = explain(&ctx, timeout());
        assert!(matches!(e, SendError::Retryable { kind: ErrorKind::Tls, .. }) && e.to_string().contains("TLS failed"), "{e}");
        ctx.error(KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "h:1/bootstrap: Connect to ipv4#h:1 failed: Connection refused");
        let e = explain(&ctx, timeout());
        assert!(matches!(e, SendError::Retryable { kind: ErrorKind::Broker, .. }) && e.to_string().contains("Connection refused"), "{e}");
        // A refusal of the record itself is not explained away.
        let refused = explain(&ctx, KafkaError::MetadataFetch(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert!(matches!(refused, SendError::Fatal { kind: ErrorKind::Authorization, .. }), "{refused:?}");
    }
}
