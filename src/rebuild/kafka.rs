//! Reads Kafka topics from the beginning to the end they had when reading started.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::consumer::Consumer;
use super::decode::{Binding, decode};
use super::error::RebuildError;
use super::follow::{Follow, PERIOD, Writer};
use super::position::Position;
use super::step::{Bad, Step};
use crate::broker::kafka::{ClientError, headers, read_topic, reader, reader_config};
use crate::config::KafkaConfig;

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
        let read = read_decoded(&kafka, topic, |_| 0, &mut |p, offset, step| {
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
/// settings) that commits nothing under `group`.
pub(crate) fn connect(brokers: &str, connection: Option<&KafkaConfig>, group: &str) -> Result<BaseConsumer, RebuildError> {
    let config = reader_config(brokers, connection, group).map_err(ClientError::from)?;
    Ok(reader(&config)?)
}

/// Gives `record` (partition, offset, decoded record) every committed record of `topic`
/// from offset `from(partition)` to the end each partition had when its reading started
/// (`broker::kafka::read_topic`); returns those ends.
pub(crate) fn read_decoded(
    kafka: &BaseConsumer,
    topic: &str,
    from: impl Fn(i32) -> i64,
    record: &mut dyn FnMut(i32, i64, Result<Step, Bad>) -> Result<(), RebuildError>,
) -> Result<Vec<(i32, i64)>, RebuildError> {
    read_topic(kafka, topic, TIMEOUT, from, &mut |p, offset, m| record(p, offset, decode(Binding::Kafka, &headers(m), m.payload(), p)))
}

/// Reads every partition on from `ends` until `f.stop`, writing the state as it changes.
fn follow_on(kafka: &BaseConsumer, ends: TopicPartitionList, f: &Follow, consumer: &mut Consumer) -> Result<(), RebuildError> {
    let mut writer = Writer::new(&f.out);
    writer.maybe_write(consumer, true)?;
    kafka.assign(&ends).map_err(RebuildError::Following)?;
    while !f.stop.is_cancelled() {
        match kafka.poll(PERIOD) {
            Some(Ok(m)) => {
                let (topic, partition, offset) = (m.topic().to_string(), m.partition(), m.offset());
                let at = || Position::Kafka { topic, partition, offset };
                consumer.record(at, decode(Binding::Kafka, &headers(&m), m.payload(), partition))?;
            }
            // Reached the end of a partition: more may come.
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(RebuildError::Following(e)),
        }
        writer.maybe_write(consumer, false)?;
    }
    writer.maybe_write(consumer, true)
}
