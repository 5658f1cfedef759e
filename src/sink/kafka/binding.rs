//! The CloudEvents Kafka protocol binding: a record's value and headers.

use bytes::Bytes;
use rdkafka::message::{Header, OwnedHeaders};

use crate::config::ContentMode;
use crate::event::Envelope;
use crate::sink::encode::{STRUCTURED_CONTENT_TYPE, binary_attributes, data_content_type, structured_bytes};

/// The record value and headers of `env` in `mode`, per the CloudEvents Kafka binding.
pub fn encode(env: &Envelope, mode: ContentMode) -> (Bytes, OwnedHeaders) {
    let (payload, content_type, attrs): (_, &str, Vec<(String, String)>) = match mode {
        ContentMode::Binary => (
            env.data.clone(),
            data_content_type(&env.event),
            binary_attributes(&env.event).filter(|(name, _)| *name != "datacontenttype").map(|(name, value)| (format!("ce_{name}"), value)).collect(),
        ),
        ContentMode::Structured => (structured_bytes(&env.event, &env.data).into(), STRUCTURED_CONTENT_TYPE, Vec::new()),
    };
    let mut headers = OwnedHeaders::new_with_capacity(attrs.len() + 1).insert(Header { key: "content-type", value: Some(content_type) });
    for (k, v) in &attrs {
        headers = headers.insert(Header { key: k, value: Some(v) });
    }
    (payload, headers)
}
