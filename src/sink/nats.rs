//! The NATS sink: CloudEvents over JetStream (each publish acked by the stream and
//! deduplicated by event id) or core NATS (at most once).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_nats::header::IntoHeaderName;
use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage, stream};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;

use super::encode::{STRUCTURED_CONTENT_TYPE, percent_encode, structured_bytes};
use super::fence::FenceRecord;
use super::{ErrorKind, Failure, SendError, SinkError};
use crate::broker::nats::{self, is_stream_not_found};
use crate::config::{ContentMode, JetStreamConfig, NatsConfig, NatsMode, Storage};
use crate::event::Envelope;
use crate::model::Placement;

#[derive(Clone)]
pub struct NatsSink {
    client: async_nats::Client,
    jetstream: Option<jetstream::Context>,
    stream: JetStreamConfig,
    content_mode: ContentMode,
    /// This leader's fence, once claimed (`fence`): every later publish expects it.
    fence: Arc<OnceLock<Fence>>,
}

/// The fence record of this leader's term: where it is, and its stream sequence.
#[derive(Debug)]
struct Fence {
    subject: String,
    sequence: u64,
}

/// The header naming the subject whose last sequence `Nats-Expected-Last-Subject-Sequence`
/// is checked against (NATS server 2.11 and later).
const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

impl NatsSink {
    /// Connects in the background: an unreachable server is retried without end (the sink
    /// is then not ready), never a start-up failure. Credentials and TLS files are read now.
    pub async fn connect(cfg: &NatsConfig) -> Result<NatsSink, SinkError> {
        let client = nats::client(cfg).await.map_err(SinkError::NatsClient)?;
        let jetstream = match cfg.mode {
            NatsMode::Jetstream => Some(jetstream::ContextBuilder::new().timeout(Duration::from_secs(cfg.jetstream.ack_timeout_secs)).build(client.clone())),
            NatsMode::Core => None,
        };
        Ok(NatsSink { client, jetstream, stream: cfg.jetstream.clone(), content_mode: cfg.content_mode, fence: Arc::default() })
    }

    /// JetStream mode: whether the configured stream exists (None in core mode).
    pub async fn stream_exists(&self) -> Result<Option<bool>, SinkError> {
        let Some(js) = &self.jetstream else { return Ok(None) };
        match js.get_stream(&self.stream.stream).await {
            Ok(_) => Ok(Some(true)),
            Err(e) if is_stream_not_found(&e) => Ok(Some(false)),
            Err(source) => Err(SinkError::StreamLookup { stream: self.stream.stream.clone(), source }),
        }
    }

    /// JetStream mode: finds the stream, or creates it when configured to. A missing
    /// stream with creation off is fatal; an unreachable server is retryable.
    pub async fn prepare(&self) -> Result<(), SinkError> {
        let (Some(js), Some(false)) = (&self.jetstream, self.stream_exists().await?) else {
            return Ok(());
        };
        let s = &self.stream;
        if !s.create {
            return Err(SinkError::StreamNotFound { stream: s.stream.clone() });
        }
        let config = stream::Config {
            name: s.stream.clone(),
            subjects: s.subjects.clone(),
            storage: match s.storage {
                Storage::File => stream::StorageType::File,
                Storage::Memory => stream::StorageType::Memory,
            },
            num_replicas: s.replicas,
            duplicate_window: Duration::from_secs(s.duplicate_window_secs),
            // NATS: -1 is unlimited.
            max_messages_per_subject: if s.max_msgs_per_subject == 0 { -1 } else { s.max_msgs_per_subject },
            ..Default::default()
        };
        js.get_or_create_stream(config).await.map_err(|source| {
            let stream = s.stream.clone();
            match source.kind() {
                // The server refused the stream (e.g. its subjects overlap another stream's):
                // retrying cannot help.
                jetstream::context::CreateStreamErrorKind::JetStream(_) => SinkError::StreamRefused { stream, source },
                _ => SinkError::StreamNotCreated { stream, source },
            }
        })?;
        tracing::info!(stream = %s.stream, "Created the JetStream stream");
        Ok(())
    }

    /// JetStream mode: publishes `record` on `subject` and makes every later publish expect
    /// it to be the last message there, so that once a successor published its own, the
    /// stream refuses this replica's publishes (`ErrorKind::Fenced`). Returns the record's
    /// stream sequence (None in core mode, which cannot fence). A retry after a timeout
    /// sends the same id, which the duplicate window answers with the first copy's sequence.
    pub async fn fence(&self, subject: &str, record: &FenceRecord) -> Result<Option<u64>, SendError> {
        let Some(js) = &self.jetstream else { return Ok(None) };
        let mut headers = HeaderMap::new();
        for (name, value) in &record.headers {
            headers.insert(*name, value.as_str());
        }
        let message = PublishMessage::build().payload(record.data.clone()).headers(headers).message_id(record.id.as_str());
        let ack = js.send_publish(subject.to_string(), message).await.map_err(classify)?.await.map_err(classify)?;
        let fence = Fence { subject: subject.to_string(), sequence: ack.sequence };
        tracing::info!(subject = %fence.subject, sequence = fence.sequence, stream = %ack.stream, "Fenced the stream: a replica that led before cannot publish to it any more");
        let sequence = fence.sequence;
        // One term per process: a replica that loses its lease stops.
        let _ = self.fence.set(fence);
        Ok(Some(sequence))
    }

    /// Publishes one event to its subject; in JetStream mode resolves when the stream
    /// stored it (or already had its id: a redelivery), with its stream sequence.
    pub async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
        let (payload, headers) = encode(env, self.content_mode);
        let subject = env.destination.to_string();
        match &self.jetstream {
            Some(js) => {
                let mut message = PublishMessage::build().payload(payload).headers(headers).message_id(env.attributes.id.as_str());
                if let Some(fence) = self.fence.get() {
                    message = message.expected_last_subject_sequence(fence.sequence).header(EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT, fence.subject.as_str());
                }
                let ack = js.send_publish(subject, message).await.map_err(classify)?;
                let ack = ack.await.map_err(classify)?;
                Ok(Some(Placement { partition: 0, offset: ack.sequence }))
            }
            None => {
                self.client
                    .publish_with_headers(subject, headers, payload)
                    .await
                    .map_err(|e| SendError::Retryable { kind: ErrorKind::Publish, source: Failure::NatsPublish(e) })?;
                self.client.flush().await.map_err(|e| SendError::Retryable { kind: ErrorKind::Flush, source: Failure::NatsFlush(e) })?;
                Ok(None)
            }
        }
    }

    /// Connected to a server now.
    pub fn probe(&self) -> Result<(), SinkError> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(SinkError::NatsDisconnected(state)),
        }
    }

    pub async fn flush(&self) -> Result<(), SinkError> {
        self.client.flush().await.map_err(|e| SinkError::Request(SendError::Retryable { kind: ErrorKind::Flush, source: Failure::NatsFlush(e) }))
    }
}

/// The payload and headers of `env` in `mode`, per the CloudEvents NATS binding.
pub fn encode(env: &Envelope, mode: ContentMode) -> (Bytes, HeaderMap) {
    let mut headers = HeaderMap::new();
    let payload = match mode {
        ContentMode::Binary => {
            for (name, value) in env.attributes.pairs() {
                let value = match percent_encode(value) {
                    Cow::Borrowed(text) => HeaderValue::from(text),
                    Cow::Owned(text) => HeaderValue::from(text),
                };
                headers.insert(header_name(name), value);
            }
            env.data.clone()
        }
        ContentMode::Structured => {
            headers.insert("Content-Type", STRUCTURED_CONTENT_TYPE);
            structured_bytes(&env.attributes.to_event(), &env.data).into()
        }
    };
    (payload, headers)
}

/// The header of each attribute `Attributes::pairs` yields, without an allocation or a
/// validation per event (`ce-` and the attribute's name).
macro_rules! header_names {
    ($($attribute:literal),+ $(,)?) => {
        fn header_name(attribute: &str) -> HeaderName {
            match attribute {
                $($attribute => HeaderName::from_static(concat!("ce-", $attribute)),)+
                other => format!("ce-{other}").into_header_name(),
            }
        }

        #[cfg(test)]
        const BUILT_IN: &[&str] = &[$($attribute),+];
    };
}

header_names!(
    "specversion",
    "id",
    "type",
    "source",
    "subject",
    "time",
    "datacontenttype",
    "dataschema",
    "cluster",
    "apiversion",
    "kind",
    "name",
    "namespace",
    "uid",
    "resourceversion",
    "syncid",
    "partitionkey",
    "truncated",
);

/// JetStream publish failures are retried with the same `Nats-Msg-Id`, so a message that
/// was stored but whose ack was lost is dropped by the stream as a duplicate. "No stream"
/// is retried too: after a server restart JetStream answers only once its streams loaded.
fn classify(e: jetstream::context::PublishError) -> SendError {
    let kind = match e.kind() {
        PublishErrorKind::MaxPayloadExceeded => return SendError::TooLarge { source: Failure::JetStream(e) },
        PublishErrorKind::TimedOut => ErrorKind::Timeout,
        PublishErrorKind::StreamNotFound => ErrorKind::NoStream,
        // Only the fence sets an expected last sequence: a successor fenced this replica.
        PublishErrorKind::WrongLastSequence => return SendError::Fatal { kind: ErrorKind::Fenced, source: Failure::JetStream(e) },
        _ => ErrorKind::Publish,
    };
    SendError::Retryable { kind, source: Failure::JetStream(e) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EnvelopeKind;
    use crate::event::fixtures::configmap_event;
    use crate::model::{ChangeType, ObjectRef};

    /// An event that sets every attribute and extension there is, one value needing
    /// percent-encoding.
    fn every_attribute() -> Envelope {
        let mut env = configmap_event("ns/a", "1", EnvelopeKind::Object(ChangeType::Updated));
        let attributes = &mut env.attributes;
        attributes.subject = Some("ns/a \u{20AC}".into());
        attributes.dataschema = Some(url::Url::parse("https://schemas.example.com/reference.schema.json").unwrap());
        attributes.object = Some(ObjectRef { namespace: Some("ns".into()), name: "a".into(), uid: "u1".into(), resource_version: "2".into() });
        attributes.syncid = Some("s1".into());
        attributes.truncated = true;
        env
    }

    #[test]
    fn binary_mode_writes_each_attribute_as_a_ce_header_with_its_value_percent_encoded() {
        let env = every_attribute();
        let (payload, headers) = encode(&env, ContentMode::Binary);
        assert_eq!(payload, env.data);
        assert_eq!(headers.len(), env.attributes.pairs().count());
        for (name, value) in env.attributes.pairs() {
            let header = headers.get(format!("ce-{name}").as_str()).map(HeaderValue::as_str);
            assert_eq!(header, Some(percent_encode(value).as_ref()), "{name}");
        }
        assert_eq!(headers.get("ce-subject").map(HeaderValue::as_str), Some("ns/a%20%E2%82%AC"));
    }

    #[test]
    fn every_attribute_has_its_header_name_built_in() {
        // A name missing from `header_names!` still gets its header, but pays an
        // allocation per event: the list must name every attribute there is.
        for (name, _) in every_attribute().attributes.pairs() {
            assert!(BUILT_IN.contains(&name), "{name} is not in header_names!");
            assert_eq!(header_name(name).to_string(), format!("ce-{name}"));
        }
        assert_eq!(header_name("other").to_string(), "ce-other");
    }
}
