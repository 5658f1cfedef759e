//! The Kafka sink: CloudEvents Kafka binding over an idempotent rdkafka producer.

mod admin;
mod binding;
mod delivery;
mod error;
pub mod headers;
mod ledger;
mod log;
mod lookup;
mod partition;
mod producer;
mod recover;
mod resend;
mod transaction;

pub use admin::create_topics;
pub use binding::encode;
pub use delivery::{Producer, Undelivered};
pub use error::{client_refused, explain};
pub use log::QuietContext;
pub use partition::partition_of;
pub use producer::KafkaSink;
