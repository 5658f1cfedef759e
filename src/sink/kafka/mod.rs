//! The Kafka sink: CloudEvents Kafka binding over an idempotent rdkafka producer.

mod admin;
mod binding;
mod error;
mod ledger;
mod lookup;
mod partition;
mod producer;
mod recover;
mod resend;
mod transaction;
mod waiting;

pub use admin::create_topics;
pub use binding::encode;
pub use partition::partition_of;
pub use producer::KafkaSink;
