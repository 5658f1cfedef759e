//! The brokers' clients that the sink, the checkpoint stores and rebuild share: Kafka's
//! settings, producer, readers and client context, and the NATS client.

pub mod kafka;
pub mod nats;
