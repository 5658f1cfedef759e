//! Reading deltaship's topics back (rebuild, the resume's tail, the lookup of doubtful
//! records): partition by partition, in offset order, to the end each partition had when
//! its reading started. Blocking: call it on a thread of the blocking pool.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use super::error::ClientError;

/// A reader with `config` (`config::reader_config`).
pub fn reader(config: &ClientConfig) -> Result<BaseConsumer, ClientError> {
    config.create().map_err(|e| ClientError::refused("consumer", config, e))
}

/// Gives `record` (partition, offset, record) every committed record of `topic` from
/// offset `from(partition)` (or the partition's first, if later) to the end each partition
/// had when its reading started (its last stable offset: an open transaction holds it
/// back), partition by partition, in offset order; returns those ends. Each request, and
/// the wait for the next record, is bounded by `within`.
/// The end is reached at the partition's EOF too: the last offsets before it may be
/// transaction markers or aborted records, which are never delivered.
pub fn read_topic<E: From<ClientError>>(
    reader: &BaseConsumer,
    topic: &str,
    within: Duration,
    from: impl Fn(i32) -> i64,
    record: &mut dyn FnMut(i32, i64, &BorrowedMessage<'_>) -> Result<(), E>,
) -> Result<Vec<(i32, i64)>, E> {
    let partitions = partitions(reader, topic, within)?;
    if partitions.is_empty() {
        return Err(ClientError::NoTopic { topic: topic.to_string() }.into());
    }
    let mut ends = Vec::with_capacity(partitions.len());
    for p in partitions {
        let (low, high) =
            reader.fetch_watermarks(topic, p, within).map_err(|source| ClientError::Offsets { topic: topic.to_string(), partition: p, source })?;
        ends.push((p, high));
        let start = from(p).max(low);
        if high <= start {
            continue;
        }
        let failed = |source| ClientError::Read { topic: topic.to_string(), partition: p, source };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(start)).map_err(failed)?;
        reader.assign(&tpl).map_err(failed)?;
        loop {
            let m = match reader.poll(within) {
                // Another partition's: one read before, whose EOF or records came late.
                Some(Ok(m)) if m.partition() != p || m.topic() != topic => continue,
                Some(Err(KafkaError::PartitionEOF(eof))) if eof != p => continue,
                Some(Ok(m)) => m,
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(failed(e).into()),
                None => return Err(ClientError::Silent { topic: topic.to_string(), partition: p, within }.into()),
            };
            let offset = m.offset();
            // Committed after reading started: beyond the end returned (following reads it).
            if offset >= high {
                break;
            }
            record(p, offset, &m)?;
            if offset + 1 >= high {
                break;
            }
        }
    }
    Ok(ends)
}

/// The partitions of `topic` (none when it does not exist).
fn partitions(reader: &BaseConsumer, topic: &str, within: Duration) -> Result<Vec<i32>, ClientError> {
    let md = reader.fetch_metadata(Some(topic), within).map_err(|source| ClientError::Metadata { topic: topic.to_string(), source })?;
    Ok(md.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect()).unwrap_or_default())
}

/// Per partition of `topic`, the offset of its first record stamped at or after `since_ms`
/// (Kafka's time index); a partition the broker says has none is left out (nothing to read
/// there).
pub fn starts_at(reader: &BaseConsumer, topic: &str, since_ms: i64, within: Duration) -> Result<Vec<(i32, i64)>, ClientError> {
    let mut query = TopicPartitionList::new();
    for p in partitions(reader, topic, within)? {
        query.add_partition_offset(topic, p, Offset::Offset(since_ms)).map_err(|source| ClientError::ByTime {
            topic: topic.to_string(),
            partition: p,
            source,
        })?;
    }
    let answer = reader.offsets_for_times(query, within).map_err(|source| ClientError::TimeQuery { topic: topic.to_string(), source })?;
    let mut starts = Vec::new();
    for e in answer.elements() {
        if let Some(start) = start(topic, e.partition(), e.error(), e.offset())? {
            starts.push((e.partition(), start));
        }
    }
    Ok(starts)
}

/// Where to start reading partition `p` from the broker's answer to the time query: its
/// offset, or none when the broker says no record is that recent. An error (a broker just
/// restarted may answer "leader epoch is newer than broker epoch" for one partition), or any
/// other answer, fails the read: taken for "none", it would send a written record again.
fn start(topic: &str, p: i32, error: Result<(), KafkaError>, offset: Offset) -> Result<Option<i64>, ClientError> {
    error.map_err(|source| ClientError::ByTime { topic: topic.to_string(), partition: p, source })?;
    match offset {
        Offset::Offset(o) => Ok(Some(o)),
        Offset::End => Ok(None),
        answer => Err(ClientError::ByTimeAnswered { topic: topic.to_string(), partition: p, answer }),
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::Offset;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::start;

    #[test]
    fn a_partition_answered_with_an_error_fails_the_read_instead_of_reading_as_empty() {
        let error = Err(KafkaError::OffsetFetch(RDKafkaErrorCode::UnknownLeaderEpoch));
        let e = start("t", 3, error, Offset::End).unwrap_err().to_string();
        assert!(e.contains("t/3") && e.contains("epoch"), "{e}");
    }

    #[test]
    fn the_time_query_answers_an_offset_or_none_newer_and_nothing_else() {
        assert_eq!(start("t", 0, Ok(()), Offset::Offset(7)).ok(), Some(Some(7)));
        assert_eq!(start("t", 0, Ok(()), Offset::End).ok(), Some(None));
        assert!(start("t", 0, Ok(()), Offset::Invalid).is_err());
    }
}
