//! The Kafka clients: their settings, the producer and its delivery reports, the readers
//! of deltaship's topics, and the client context they share.

mod config;
mod context;
mod delivery;
mod error;
mod headers;
mod read;

pub use config::{ClientRole, client_config, reader_config};
pub use context::{CauseKind, QuietContext, STATISTICS_INTERVAL_MS, Undelivered};
pub use delivery::{Delivery, Producer};
pub use error::ClientError;
pub use headers::headers;
pub use read::{read_topic, reader, starts_at};
