//! Where a route keeps its checkpoint: beside its events. Kafka routes in a compacted
//! topic on the route's brokers, NATS routes in a JetStream key-value bucket, stdout routes
//! in a file. Every store holds the latest value per key and is written in order.

mod error;
mod file;
mod inflight;
mod kafka;
mod nats;

use std::collections::HashMap;

use super::progress::Records;
use crate::config::{ResumeConfig, SinkConfig};

pub use error::{Refusal, StoreError};
pub use file::FileStore;
pub use kafka::KafkaStore;
pub use nats::NatsStore;

pub enum Store {
    Kafka(KafkaStore),
    Nats(NatsStore),
    File(FileStore),
}

impl Store {
    /// Whether a route whose sink is `sink` keeps a checkpoint: Kafka and NATS always (in
    /// their topic and bucket), stdout and HTTP only in `resume.directory`.
    pub fn kept(sink: &SinkConfig, resume: &ResumeConfig) -> bool {
        !matches!(sink, SinkConfig::Stdout {} | SinkConfig::Http(_)) || resume.directory.is_some()
    }

    /// The store of the route `route` whose sink is `sink`; `None` when that route keeps
    /// no checkpoint (stdout or HTTP without `resume.directory`).
    pub async fn open(sink: &SinkConfig, resume: &ResumeConfig, route: &str) -> Result<Option<Store>, StoreError> {
        Ok(Some(match sink {
            SinkConfig::Kafka(k) => Store::Kafka(KafkaStore::open(k, &resume.kafka_topic).await?),
            SinkConfig::Nats(n) => Store::Nats(NatsStore::open(n, &resume.nats_bucket).await?),
            SinkConfig::Stdout {} | SinkConfig::Http(_) => match &resume.directory {
                Some(dir) => Store::File(FileStore::open(dir, route)?),
                None => return Ok(None),
            },
        }))
    }

    /// The latest value of every key that starts with `prefix` followed by `.`.
    pub async fn load(&self, prefix: &str) -> Result<HashMap<String, Vec<u8>>, StoreError> {
        match self {
            Store::Kafka(s) => s.load(prefix).await,
            Store::Nats(s) => s.load(prefix).await,
            Store::File(s) => s.load(prefix),
        }
    }

    /// Writes `records` in order (a `None` value deletes its key) and returns once the
    /// store holds all of them.
    pub async fn write(&self, records: &Records) -> Result<(), StoreError> {
        match self {
            Store::Kafka(s) => s.write(records).await,
            Store::Nats(s) => s.write(records).await,
            Store::File(s) => s.write(records),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_and_http_keep_a_checkpoint_only_in_a_directory_and_brokers_always() {
        let sink = |v: serde_json::Value| serde_json::from_value::<SinkConfig>(v).unwrap();
        let (kafka, nats) =
            (sink(serde_json::json!({"type": "kafka", "brokers": "b:9092"})), sink(serde_json::json!({"type": "nats", "url": "nats://n:4222"})));
        let (stdout, http) = (sink(serde_json::json!({"type": "stdout"})), sink(serde_json::json!({"type": "http", "url": "http://h/events"})));
        let mut resume = ResumeConfig::default();
        assert_eq!([&kafka, &nats, &stdout, &http].map(|s| Store::kept(s, &resume)), [true, true, false, false]);
        resume.directory = Some("/var/lib/deltaship".into());
        assert_eq!([&kafka, &nats, &stdout, &http].map(|s| Store::kept(s, &resume)), [true, true, true, true]);
    }
}
