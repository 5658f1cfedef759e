//! The logs at start-up: where a watch's log (its Kafka topic, its JetStream stream) ends,
//! which a fresh checkpoint records as its reach, and, for a watch resuming from a
//! checkpoint, the events the log stored after it (`checkpoint::learn` applies them).

use std::collections::BTreeMap;

use crate::checkpoint::Logged;
use crate::config::{NatsMode, SinkConfig};
use crate::plan::Output;
use crate::rebuild::RebuildError;
use crate::rebuild::step::{Bad, Body, ChangeKind, Step};
use crate::rebuild::{kafka, nats};

/// The log the route's events of a watch go to, when the sink's log can be read back: the
/// topic (Kafka), the stream (NATS JetStream).
pub fn log_of(sink: &SinkConfig, output: &Output) -> Option<String> {
    match sink {
        SinkConfig::Kafka(_) => Some(output.address.marker_destination().to_string()),
        SinkConfig::Nats(n) if n.mode == NatsMode::Jetstream => Some(n.jetstream.stream.clone()),
        _ => None,
    }
}

/// A log read from given places to its end.
#[derive(Debug, Default)]
pub struct Read {
    /// The object events, in log order per partition.
    pub events: Vec<Logged>,
    /// Per partition, the offset (or sequence) after the last one read.
    pub ends: BTreeMap<i32, u64>,
}

/// Reads `log` of `sink` from `from` to its end; a partition `from` does not name is read
/// from its first record. Records that do not decode are not events of the bridge's and
/// are passed over.
pub async fn read(sink: &SinkConfig, log: &str, from: &BTreeMap<i32, u64>) -> Result<Read, RebuildError> {
    let from = from.clone();
    read_with(sink, log, move |p| from.get(&p).copied().unwrap_or(0)).await
}

/// Where `log` ends now, per partition.
pub async fn ends(sink: &SinkConfig, log: &str) -> Result<BTreeMap<i32, u64>, RebuildError> {
    Ok(read_with(sink, log, |_| u64::MAX).await?.ends)
}

async fn read_with(sink: &SinkConfig, log: &str, from: impl Fn(i32) -> u64 + Send + 'static) -> Result<Read, RebuildError> {
    let mut read = Read::default();
    match sink {
        SinkConfig::Kafka(k) => {
            let (k, topic) = (k.clone(), log.to_string());
            // The Kafka reader blocks; keep it off the async threads.
            read = tokio::task::spawn_blocking(move || {
                let reader = kafka::connect(&k.brokers, Some(&k), "deltaship-tail")?;
                let from = |p| i64::try_from(from(p)).unwrap_or(i64::MAX);
                let ends = kafka::read_decoded(&reader, &topic, from, &mut |_, _, step| {
                    keep(&mut read.events, step);
                    Ok(())
                })?;
                read.ends = ends.into_iter().map(|(p, high)| (p, u64::try_from(high).unwrap_or(0))).collect();
                Ok::<_, RebuildError>(read)
            })
            .await
            .map_err(RebuildError::Blocking)??;
        }
        SinkConfig::Nats(n) => {
            let end = nats::read_from(n, log, from(0), &mut |_, step| {
                keep(&mut read.events, step);
                Ok(())
            })
            .await?;
            read.ends.insert(0, end);
        }
        _ => {}
    }
    Ok(read)
}

/// Keeps an object event's extensions; its data, markers and records that are not the
/// bridge's events are dropped.
fn keep(events: &mut Vec<Logged>, step: Result<Step, Bad>) {
    if let Ok(Step::Event(e)) = step
        && let Body::Object { change, resource, key, uid, resource_version, .. } = e.body
    {
        events.push(Logged { cluster: e.cluster, resource, key, uid, resource_version, deleted: change == ChangeKind::Deleted });
    }
}
