//! Reads Kafka topics from the beginning to the end they had when reading started.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

use super::RebuildError;
use super::protocol::Received;
use crate::config::KafkaConfig;
use crate::sink::kafka::connection_settings;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Calls `each` with every event of `topics`, partition by partition, in offset order;
/// with `connection`, connects with that sink's TLS, SASL and librdkafka settings.
pub fn read(
    brokers: &str,
    topics: &[String],
    connection: Option<&KafkaConfig>,
    mut each: impl FnMut(Received) -> Result<(), RebuildError>,
) -> Result<(), RebuildError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", "deltaship-rebuild")
        .set("enable.auto.commit", "false");
    if let Some(k) = connection {
        connection_settings(&mut config, k).map_err(|e| RebuildError::Source(e.to_string()))?;
    }
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| RebuildError::Source(format!("cannot create a Kafka consumer: {e}")))?;
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| RebuildError::Source(format!("no metadata for topic {topic}: {e}")))?;
        let partitions: Vec<i32> = md.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect()).unwrap_or_default();
        if partitions.is_empty() {
            return Err(RebuildError::Source(format!("topic {topic} does not exist")));
        }
        for p in partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, TIMEOUT)
                .map_err(|e| RebuildError::Source(format!("no offsets for {topic}/{p}: {e}")))?;
            if high <= low {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, p, Offset::Beginning).expect("a valid partition");
            consumer.assign(&tpl).map_err(|e| RebuildError::Source(e.to_string()))?;
            loop {
                let m = match consumer.poll(TIMEOUT) {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => return Err(RebuildError::Source(format!("reading {topic}/{p}: {e}"))),
                    None => return Err(RebuildError::Source(format!("no record from {topic}/{p} within {TIMEOUT:?}"))),
                };
                let offset = m.offset();
                if let Some(event) = decode(&m)? {
                    each(event)?;
                }
                if offset + 1 >= high {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Binary mode (`ce_` headers, value = data) or structured mode (value = the event);
/// None for a tombstone.
fn decode(m: &rdkafka::message::BorrowedMessage<'_>) -> Result<Option<Received>, RebuildError> {
    let Some(value) = m.payload() else { return Ok(None) };
    let mut headers = std::collections::HashMap::new();
    if let Some(h) = m.headers() {
        for h in h.iter() {
            headers.insert(h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned());
        }
    }
    let bad = |problem: String| RebuildError::Source(format!("record {}/{}@{}: {problem}", m.topic(), m.partition(), m.offset()));
    let structured = headers.get("content-type").is_some_and(|c| c.starts_with("application/cloudevents+json"));
    if structured {
        let event: Value = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
        return Ok(Some(super::from_structured(event, m.partition()).map_err(bad)?));
    }
    let get = |name: &str| headers.get(&format!("ce_{name}")).cloned();
    Ok(Some(Received {
        id: get("id").ok_or_else(|| bad("no ce_id header".into()))?,
        ty: get("type").ok_or_else(|| bad("no ce_type header".into()))?,
        cluster: get("cluster").unwrap_or_default(),
        apiversion: get("apiversion").unwrap_or_default(),
        kind: get("kind").unwrap_or_default(),
        subject: get("subject"),
        datacontenttype: headers.get("content-type").cloned(),
        data: Some(serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?),
        partition: m.partition(),
    }))
}
