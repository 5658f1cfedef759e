//! The CloudEvents Kafka protocol binding: a record's value and headers.

use bytes::Bytes;
use rdkafka::message::{Header, OwnedHeaders};

use crate::config::ContentMode;
use crate::event::Envelope;
use crate::sink::encode::{STRUCTURED_CONTENT_TYPE, binary_attributes, data_content_type, structured_bytes};

/// The record value and headers of `env` in `mode`, per the CloudEvents Kafka binding.
pub fn encode(env: &Envelope, mode: ContentMode) -> (Bytes, OwnedHeaders) {
    match mode {
        ContentMode::Binary => {
            let mut headers =
                OwnedHeaders::new_with_capacity(env.event.iter().count()).insert(Header { key: "content-type", value: Some(data_content_type(&env.event)) });
            // One buffer for every header's name: librdkafka copies it.
            let mut key = String::with_capacity(32);
            for (name, value) in binary_attributes(&env.event).filter(|(name, _)| *name != "datacontenttype") {
                key.clear();
                key.push_str("ce_");
                key.push_str(name);
                headers = headers.insert(Header { key: &key, value: Some(value.as_ref()) });
            }
            (env.data.clone(), headers)
        }
        ContentMode::Structured => {
            let headers = OwnedHeaders::new_with_capacity(1).insert(Header { key: "content-type", value: Some(STRUCTURED_CONTENT_TYPE) });
            (structured_bytes(&env.event, &env.data).into(), headers)
        }
    }
}
