//! Reads a JetStream stream, every sequence from its first message to the last it had
//! when reading started.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::RequestError, stream::RawMessageErrorKind};

use super::decode::{Bad, Binding, Reason, decode};
use super::{Consumer, Position, RebuildError};
use crate::config::NatsConfig;
use crate::sink::NatsSink;

/// How long a read is retried through a server restart or a network cut before the
/// rebuild fails.
const RETRY_FOR: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Gives `consumer` every message of `stream` in stream order, fetched one sequence
/// number at a time: a read that fails (the server restarting, the connection lost) is
/// retried for the same sequence, and a sequence the stream holds no message for is
/// reported as `missing`, so no message is ever skipped silently. With `connection`,
/// connects to `url` with that sink's credentials and TLS.
pub async fn read(url: &str, stream: &str, connection: Option<&NatsConfig>, consumer: &mut Consumer) -> Result<(), RebuildError> {
    let refused = |e: &dyn std::fmt::Display| RebuildError::Source(format!("cannot connect to {url}: {e}"));
    let client = match connection {
        Some(sink) => NatsSink::client(&NatsConfig { url: url.to_string(), ..sink.clone() }).await.map_err(|e| refused(&e))?,
        None => async_nats::connect(url).await.map_err(|e| refused(&e))?,
    };
    let js = jetstream::new(client);
    let mut s = js.get_stream(stream).await.map_err(|e| RebuildError::Source(format!("stream {stream}: {e}")))?;
    let info = s.info().await.map_err(|e| RebuildError::Source(e.to_string()))?.clone();
    let (first, last) = (info.state.first_sequence.max(1), info.state.last_sequence);
    let mut seq = first;
    let mut failing_since: Option<Instant> = None;
    let mut backoff = Duration::from_millis(100);
    while seq <= last {
        let at = || Position::Nats { stream: stream.to_string(), sequence: seq };
        match s.get_raw_message(seq).await {
            Ok(m) => {
                let headers: Vec<(&[u8], &[u8])> = m
                    .headers
                    .iter()
                    .flat_map(|(name, values)| values.iter().map(move |v| (AsRef::<str>::as_ref(name).as_bytes(), v.as_str().as_bytes())))
                    .collect();
                consumer.record(at, decode(Binding::Nats, &headers, Some(&m.payload), 0))?;
            }
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {
                consumer.skip(at(), Bad::new(Reason::Missing, "the stream holds no message at this sequence (deleted, or removed by its limits)"))?;
            }
            // The answer came but is not a message the client can read (its headers).
            Err(e) if e.kind() == RawMessageErrorKind::Other && !is_request_failure(&e) => {
                consumer.skip(at(), Bad::new(Reason::WrongType, format!("the message cannot be read: {e}")))?;
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= RETRY_FOR {
                    return Err(RebuildError::Source(format!("reading {stream}#{seq} failed for {RETRY_FOR:?}: {e}")));
                }
                consumer.state.summary.retried_reads += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        }
        failing_since = None;
        backoff = Duration::from_millis(100);
        seq += 1;
    }
    Ok(())
}

/// Whether the request itself failed (timed out, no responders while the server restarts,
/// the connection lost): worth retrying, unlike an answer that cannot be read.
fn is_request_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<RequestError>())
}
