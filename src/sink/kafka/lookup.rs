//! Finds doubtful records (kafka::ledger) in the log: reads each topic from the first record
//! stamped at or after the earliest doubt's floor (Kafka's time index) to the end, and
//! notes where each wanted event id stands. Blocking: call it on a thread of the blocking
//! pool.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::consumer::Consumer as _;
use rdkafka::{Offset, TopicPartitionList};

use super::ledger::{Doubt, Part};
use crate::config::KafkaConfig;
use crate::model::Placement;
use crate::rebuild::decode::Step;
use crate::rebuild::kafka;
use crate::rebuild::protocol::Body;

/// Each request of the read; a broker that does not answer fails the read (the retry reads again).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where each of `doubts` was found, by (event id, part); a record absent from the log is
/// not in the answer. An error when a topic cannot be read to its end.
pub fn find(config: &KafkaConfig, doubts: &[(String, Doubt)]) -> Result<HashMap<(String, Part), Placement>, String> {
    let reader = kafka::connect(&config.brokers, Some(config), "deltaship-lookup").map_err(|e| e.to_string())?;
    // Per topic: the earliest floor, and the wanted ids.
    let mut topics: BTreeMap<&str, (i64, HashSet<&str>)> = BTreeMap::new();
    for (id, d) in doubts {
        let (since, ids) = topics.entry(&d.topic).or_insert((d.since_ms, HashSet::new()));
        *since = (*since).min(d.since_ms);
        ids.insert(id);
    }
    let mut found = HashMap::new();
    for (topic, (since_ms, ids)) in topics {
        let starts = starts(&reader, topic, since_ms)?;
        kafka::read_topic(&reader, topic, |p| starts.get(&p).copied().unwrap_or(i64::MAX), &mut |p, offset, step| {
            if let Ok(Step::Event(e)) = step
                && ids.contains(e.id.as_str())
                && let Ok(offset) = u64::try_from(offset)
            {
                let part = match e.body {
                    Body::Marker { .. } => Part::Marker(p),
                    Body::Object { .. } => Part::Object,
                };
                found.insert((e.id, part), Placement { partition: p, offset });
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(found)
}

/// Per partition of `topic`, the offset of its first record stamped at or after `since_ms`;
/// a partition without one is left out (nothing to read there).
fn starts(reader: &rdkafka::consumer::BaseConsumer, topic: &str, since_ms: i64) -> Result<HashMap<i32, i64>, String> {
    let md = reader.fetch_metadata(Some(topic), TIMEOUT).map_err(|e| format!("no metadata for topic {topic}: {e}"))?;
    let mut query = TopicPartitionList::new();
    for p in md.topics().iter().flat_map(|t| t.partitions()) {
        query.add_partition_offset(topic, p.id(), Offset::Offset(since_ms)).map_err(|e| e.to_string())?;
    }
    let answer = reader.offsets_for_times(query, TIMEOUT).map_err(|e| format!("cannot find {topic}'s records by time: {e}"))?;
    Ok(answer
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect())
}
