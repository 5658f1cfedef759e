//! The CloudEvents Kafka protocol binding: a record's value and headers.

use bytes::Bytes;
use rdkafka::message::{Header, OwnedHeaders};

use crate::config::ContentMode;
use crate::event::{Attributes, Envelope};
use crate::sink::encode::{STRUCTURED_CONTENT_TYPE, structured_bytes};

/// The record value and headers of `env` in `mode`, per the CloudEvents Kafka binding.
pub fn encode(env: &Envelope, mode: ContentMode) -> (Bytes, OwnedHeaders) {
    match mode {
        ContentMode::Binary => {
            let mut headers = OwnedHeaders::new_with_capacity(Attributes::MOST);
            // One buffer for every header's name: librdkafka copies it.
            let mut key = String::with_capacity(32);
            for (name, value) in env.attributes.pairs() {
                let name = if name == "datacontenttype" {
                    "content-type"
                } else {
                    key.clear();
                    key.push_str("ce_");
                    key.push_str(name);
                    &key
                };
                headers = headers.insert(Header { key: name, value: Some(value) });
            }
            (env.data.clone(), headers)
        }
        ContentMode::Structured => {
            let headers = OwnedHeaders::new_with_capacity(1).insert(Header { key: "content-type", value: Some(STRUCTURED_CONTENT_TYPE) });
            (structured_bytes(&env.attributes.to_event(), &env.data).into(), headers)
        }
    }
}
