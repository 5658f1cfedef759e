//! Recorded streams: Kafka records and JetStream messages saved as JSON lines (the
//! consumer test vectors' `kafka.jsonl` and `nats.jsonl`, vectors/README.md), read as the
//! brokers would give them.

use std::path::Path;

use serde::Deserialize;

use super::consumer::Consumer;
use super::decode::{Binding, decode};
use super::error::RebuildError;
use super::position::Position;

/// One line: a Kafka record (it has a `topic`) or a JetStream message (a `stream`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Line {
    Kafka { topic: String, partition: i32, offset: i64, headers: Vec<(String, String)>, value: Option<String> },
    Nats { stream: String, sequence: u64, headers: Vec<(String, String)>, data: String },
}

/// Gives `consumer` every record of `file`, in the file's order.
pub fn read(file: &Path, consumer: &mut Consumer) -> Result<(), RebuildError> {
    let text = std::fs::read_to_string(file).map_err(|source| RebuildError::Recording { file: file.to_path_buf(), source })?;
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line: Line = serde_json::from_str(line).map_err(|source| RebuildError::RecordedLine { file: file.to_path_buf(), line: n + 1, source })?;
        let pairs = |headers: &[(String, String)]| -> Vec<(Vec<u8>, Vec<u8>)> {
            headers.iter().map(|(k, v)| (k.clone().into_bytes(), v.clone().into_bytes())).collect()
        };
        match line {
            Line::Kafka { topic, partition, offset, headers, value } => {
                let headers = pairs(&headers);
                let borrowed: Vec<(&[u8], &[u8])> = headers.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
                let at = || Position::Kafka { topic: topic.clone(), partition, offset };
                consumer.record(at, decode(Binding::Kafka, &borrowed, value.as_deref().map(str::as_bytes), partition))?;
            }
            Line::Nats { stream, sequence, headers, data } => {
                let headers = pairs(&headers);
                let borrowed: Vec<(&[u8], &[u8])> = headers.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
                let at = || Position::Nats { stream: stream.clone(), sequence };
                consumer.record(at, decode(Binding::Nats, &borrowed, Some(data.as_bytes()), 0))?;
            }
        }
    }
    Ok(())
}
