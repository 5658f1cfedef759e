//! Reads Kafka topics from the beginning to the end they had when reading started.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::decode::{Bad, Binding, Step, decode};
use super::follow::{Follow, PERIOD, Writer};
use super::{Consumer, Position, RebuildError};
use crate::config::{ClientRole, KafkaConfig};
use crate::sink::kafka::headers::headers;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Gives `consumer` every record of `topics`, partition by partition, in offset order;
/// with `connection`, connects with that sink's TLS, SASL and librdkafka settings. With
/// `follow`, then reads every partition on from where it ended until stopped.
/// Offsets a compacted topic no longer holds are not gaps to report: compaction removes
/// records by design (Kafka has no way to tell them from records never written).
pub(super) fn read(
    brokers: &str,
    topics: &[String],
    connection: Option<&KafkaConfig>,
    follow: Option<&Follow>,
    consumer: &mut Consumer,
) -> Result<(), RebuildError> {
    let kafka = connect(brokers, connection, "deltaship-rebuild")?;
    // Where each partition ended: where following goes on.
    let mut ends = TopicPartitionList::new();
    for topic in topics {
        let read = read_topic(&kafka, topic, |_| 0, &mut |p, offset, step| {
            let at = || Position::Kafka { topic: topic.clone(), partition: p, offset };
            consumer.record(at, step)
        })?;
        for (p, high) in read {
            ends.add_partition_offset(topic, p, Offset::Offset(high)).expect("a valid partition");
        }
    }
    if let Some(f) = follow {
        follow_on(&kafka, ends, f, consumer)?;
    }
    Ok(())
}

/// A reader of `brokers` (with `connection`: that sink's TLS, SASL and librdkafka
/// settings) that commits nothing under `group`, reads committed records only and reports
/// the end of each partition.
pub(crate) fn connect(brokers: &str, connection: Option<&KafkaConfig>, group: &str) -> Result<BaseConsumer, RebuildError> {
    let mut config = match connection {
        Some(k) => k.client_config(ClientRole::Consumer).map_err(|e| RebuildError::Source(e.to_string()))?,
        None => ClientConfig::new(),
    };
    // The broker holds a fetch at a partition's end this long (librdkafka's default: 500 ms);
    // reading stops at every partition's end, which each such wait would delay.
    let reader = [("bootstrap.servers", brokers), ("group.id", group), ("enable.auto.commit", "false"), ("fetch.wait.max.ms", "100")];
    for (key, value) in reader {
        // The sink's raw librdkafka options win, as they do over its producer's settings.
        if config.get(key).is_none() {
            config.set(key, value);
        }
    }
    // Not overridable: a fenced route's aborted transactions stay in the log, and reading
    // stops at the partition's end, which transaction markers (never delivered) may occupy.
    config.set("isolation.level", "read_committed").set("enable.partition.eof", "true");
    config.create().map_err(|e| RebuildError::Source(format!("cannot create a Kafka consumer: {e}")))
}

/// Gives `record` (partition, offset, decoded record) every committed record of `topic`
/// from offset `from(partition)` (or the partition's first, if later) to the end each
/// partition had when its reading started (its last stable offset: an open transaction
/// holds it back), partition by partition, in offset order; returns those ends.
/// The end is reached at the partition's EOF too: the last offsets before it may be
/// transaction markers or aborted records, which are never delivered.
pub(crate) fn read_topic(
    kafka: &BaseConsumer,
    topic: &str,
    from: impl Fn(i32) -> i64,
    record: &mut dyn FnMut(i32, i64, Result<Step, Bad>) -> Result<(), RebuildError>,
) -> Result<Vec<(i32, i64)>, RebuildError> {
    let md = kafka.fetch_metadata(Some(topic), TIMEOUT).map_err(|e| RebuildError::Source(format!("no metadata for topic {topic}: {e}")))?;
    let partitions: Vec<i32> = md.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect()).unwrap_or_default();
    if partitions.is_empty() {
        return Err(RebuildError::Source(format!("topic {topic} does not exist")));
    }
    let mut ends = Vec::with_capacity(partitions.len());
    for p in partitions {
        let (low, high) = kafka.fetch_watermarks(topic, p, TIMEOUT).map_err(|e| RebuildError::Source(format!("no offsets for {topic}/{p}: {e}")))?;
        ends.push((p, high));
        let start = from(p).max(low);
        if high <= start {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(start)).expect("a valid partition");
        kafka.assign(&tpl).map_err(|e| RebuildError::Source(e.to_string()))?;
        loop {
            let m = match kafka.poll(TIMEOUT) {
                // Another partition's: one read before, whose EOF or records came late.
                Some(Ok(m)) if m.partition() != p || m.topic() != topic => continue,
                Some(Err(KafkaError::PartitionEOF(eof))) if eof != p => continue,
                Some(Ok(m)) => m,
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(RebuildError::Source(format!("reading {topic}/{p}: {e}"))),
                None => return Err(RebuildError::Source(format!("no record from {topic}/{p} within {TIMEOUT:?}"))),
            };
            let offset = m.offset();
            // Committed after reading started: beyond the end returned (following reads it).
            if offset >= high {
                break;
            }
            record(p, offset, decode(Binding::Kafka, &headers(&m), m.payload(), p))?;
            if offset + 1 >= high {
                break;
            }
        }
    }
    Ok(ends)
}

/// Reads every partition on from `ends` until `f.stop`, writing the state as it changes.
fn follow_on(kafka: &BaseConsumer, ends: TopicPartitionList, f: &Follow, consumer: &mut Consumer) -> Result<(), RebuildError> {
    let mut writer = Writer::new(&f.out);
    writer.maybe_write(consumer, true)?;
    kafka.assign(&ends).map_err(|e| RebuildError::Source(e.to_string()))?;
    while !f.stop.is_cancelled() {
        match kafka.poll(PERIOD) {
            Some(Ok(m)) => {
                let (topic, partition, offset) = (m.topic().to_string(), m.partition(), m.offset());
                let at = || Position::Kafka { topic, partition, offset };
                consumer.record(at, decode(Binding::Kafka, &headers(&m), m.payload(), partition))?;
            }
            // Reached the end of a partition: more may come.
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(RebuildError::Source(format!("following: {e}"))),
        }
        writer.maybe_write(consumer, false)?;
    }
    writer.maybe_write(consumer, true)
}
