//! Where `rebuild` read a record: a Kafka partition and offset, or a stream sequence.

use std::fmt;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Position {
    Kafka { topic: String, partition: i32, offset: i64 },
    Nats { stream: String, sequence: u64 },
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Kafka { topic, partition, offset } => write!(f, "{topic}/{partition}@{offset}"),
            Position::Nats { stream, sequence } => write!(f, "{stream}#{sequence}"),
        }
    }
}
