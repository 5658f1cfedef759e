//! The Kafka sink: CloudEvents Kafka binding over an idempotent rdkafka producer.

mod admin;
mod binding;
mod error;
mod log;
mod producer;
mod recover;

pub use admin::create_topics;
pub use binding::encode;
pub use producer::KafkaSink;
