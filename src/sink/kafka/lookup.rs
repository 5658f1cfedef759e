//! Finds doubtful records (kafka::ledger) in the log: reads each topic from the first record
//! stamped at or after the earliest doubt's floor (Kafka's time index) to the end, and
//! notes where each wanted event id stands. Blocking: call it on a thread of the blocking
//! pool.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::message::{BorrowedMessage, Message as _};

use super::ledger::{Doubt, Part};
use crate::broker::kafka::{ClientError, headers, read_topic, reader, reader_config, starts_at};
use crate::config::KafkaConfig;
use crate::model::Placement;

/// Each request of the read; a broker that does not answer fails the read (the retry reads
/// again).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where each of `doubts` was found, by (event id, part): an object event on any partition,
/// a marker's copy on its own. A record absent from the log is not in the answer. An error
/// when a topic cannot be read to its end.
pub fn find(config: &KafkaConfig, doubts: &[(String, Doubt)]) -> Result<HashMap<(String, Part), Placement>, ClientError> {
    // A reader with the sink's connection settings that commits nothing.
    let reader = reader(&reader_config(&config.brokers, Some(config), "deltaship-lookup")?)?;
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
        let starts: HashMap<i32, i64> = starts_at(&reader, topic, since_ms, TIMEOUT)?.into_iter().collect();
        tracing::debug!(topic, since_ms, ?starts, "Reading the log for doubtful records from these offsets (partition, offset)");
        if starts.is_empty() {
            continue;
        }
        read_topic::<ClientError>(&reader, topic, TIMEOUT, |p| starts.get(&p).copied().unwrap_or(i64::MAX), &mut |p, offset, m| {
            if let (Some(id), Ok(offset)) = (event_id(m).filter(|id| ids.contains(id.as_str())), u64::try_from(offset)) {
                read.insert((id, p), Placement { partition: p, offset });
            }
            Ok(())
        })?;
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
