//! Finds doubtful records (kafka::ledger) in the log: reads each topic from the first record
//! stamped at or after the earliest doubt's floor (Kafka's time index) to the end, and
//! notes where each wanted event id stands. Blocking: call it on a thread of the blocking
//! pool.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use super::headers::headers;
use super::ledger::{Doubt, Part};
use crate::config::{ClientRole, KafkaConfig};
use crate::model::Placement;

/// Each request of the read; a broker that does not answer fails the read (the retry reads
/// again).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where each of `doubts` was found, by (event id, part): an object event on any partition,
/// a marker's copy on its own. A record absent from the log is not in the answer. An error
/// when a topic cannot be read to its end.
pub fn find(config: &KafkaConfig, doubts: &[(String, Doubt)]) -> Result<HashMap<(String, Part), Placement>, String> {
    let reader = connect(config)?;
    // Per topic: the earliest floor, and the wanted ids.
    let mut topics: BTreeMap<&str, (i64, HashSet<&str>)> = BTreeMap::new();
    for (id, d) in doubts {
        let (since, ids) = topics.entry(&d.topic).or_insert((d.since_ms, HashSet::new()));
        *since = (*since).min(d.since_ms);
        ids.insert(id);
    }
    // Where each wanted id was read: (id, partition).
    let mut read: HashMap<(String, i32), Placement> = HashMap::new();
    for (topic, (since_ms, ids)) in topics {
        let starts = starts(&reader, topic, since_ms)?;
        tracing::debug!(topic, since_ms, ?starts, "Reading the log for doubtful records from these offsets (partition, offset)");
        for (p, start) in starts {
            read_partition(&reader, topic, p, start, &mut |m, offset| {
                if let Some(id) = event_id(m).filter(|id| ids.contains(id.as_str())) {
                    read.insert((id, p), Placement { partition: p, offset });
                }
            })?;
        }
    }
    Ok(doubts
        .iter()
        .filter_map(|(id, d)| {
            let at = match d.part {
                Part::Marker(p) => read.get(&(id.clone(), p)).copied(),
                Part::Object => read.iter().find(|((read_id, _), _)| read_id == id).map(|(_, at)| *at),
            };
            Some(((id.clone(), d.part), at?))
        })
        .collect())
}

/// A reader with the sink's connection settings that commits nothing and reports the end of
/// each partition.
fn connect(config: &KafkaConfig) -> Result<BaseConsumer, String> {
    let mut client = config.client_config(ClientRole::Consumer).map_err(|e| e.to_string())?;
    client
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", "deltaship-lookup")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "100");
    client.create().map_err(|e| format!("cannot create a Kafka consumer: {e}"))
}

/// Per partition of `topic`, the offset of its first record stamped at or after `since_ms`;
/// a partition the broker says has none is left out (nothing to read there).
fn starts(reader: &BaseConsumer, topic: &str, since_ms: i64) -> Result<Vec<(i32, i64)>, String> {
    let md = reader.fetch_metadata(Some(topic), TIMEOUT).map_err(|e| format!("no metadata for topic {topic}: {e}"))?;
    let mut query = TopicPartitionList::new();
    for p in md.topics().iter().flat_map(|t| t.partitions()) {
        query.add_partition_offset(topic, p.id(), Offset::Offset(since_ms)).map_err(|e| e.to_string())?;
    }
    let answer = reader.offsets_for_times(query, TIMEOUT).map_err(|e| format!("cannot find {topic}'s records by time: {e}"))?;
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
fn start(topic: &str, p: i32, error: KafkaResult<()>, offset: Offset) -> Result<Option<i64>, String> {
    error.map_err(|e| format!("cannot find {topic}/{p}'s records by time: {e}"))?;
    match offset {
        Offset::Offset(o) => Ok(Some(o)),
        Offset::End => Ok(None),
        other => Err(format!("cannot find {topic}/{p}'s records by time: the broker answered {other:?}")),
    }
}

/// Gives `record` each record of `topic`/`p` from `start` to the partition's end.
fn read_partition(reader: &BaseConsumer, topic: &str, p: i32, start: i64, record: &mut dyn FnMut(&BorrowedMessage<'_>, u64)) -> Result<(), String> {
    let (_, high) = reader.fetch_watermarks(topic, p, TIMEOUT).map_err(|e| format!("no offsets for {topic}/{p}: {e}"))?;
    if high <= start {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(start)).map_err(|e| e.to_string())?;
    reader.assign(&tpl).map_err(|e| e.to_string())?;
    loop {
        match reader.poll(TIMEOUT) {
            Some(Ok(m)) if m.partition() == p && m.topic() == topic => {
                if let Ok(offset) = u64::try_from(m.offset()) {
                    record(&m, offset);
                }
                if m.offset() + 1 >= high {
                    return Ok(());
                }
            }
            Some(Err(KafkaError::PartitionEOF(eof))) if eof == p => return Ok(()),
            // Another partition's, read before: its records or EOF came late.
            Some(Ok(_) | Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => return Err(format!("reading {topic}/{p}: {e}")),
            None => return Err(format!("no record from {topic}/{p} within {TIMEOUT:?}")),
        }
    }
}

/// A record's event id: its `ce_id` header (binary mode), or the `id` of the structured
/// event in its value.
fn event_id(m: &BorrowedMessage<'_>) -> Option<String> {
    if let Some((_, id)) = headers(m).into_iter().find(|(name, _)| name.eq_ignore_ascii_case(b"ce_id")) {
        return String::from_utf8(id.to_vec()).ok();
    }
    #[derive(serde::Deserialize)]
    struct Structured {
        id: String,
    }
    serde_json::from_slice::<Structured>(m.payload()?).ok().map(|s| s.id)
}

#[cfg(test)]
mod tests {
    use rdkafka::Offset;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::start;

    #[test]
    fn a_partition_answered_with_an_error_fails_the_read_instead_of_reading_as_empty() {
        let error = Err(KafkaError::OffsetFetch(RDKafkaErrorCode::UnknownLeaderEpoch));
        let e = start("t", 3, error, Offset::End).unwrap_err();
        assert!(e.contains("t/3") && e.contains("epoch"), "{e}");
    }

    #[test]
    fn the_time_query_answers_an_offset_or_none_newer_and_nothing_else() {
        assert_eq!(start("t", 0, Ok(()), Offset::Offset(7)), Ok(Some(7)));
        assert_eq!(start("t", 0, Ok(()), Offset::End), Ok(None));
        assert!(start("t", 0, Ok(()), Offset::Invalid).is_err());
    }
}
