//! Reads a JetStream stream, every sequence from its first message to the last it had
//! when reading started: in batches through an ephemeral consumer, one sequence at a time
//! where a batch comes back empty.

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::stream::{Info, Stream};
use async_nats::jetstream::{self, context::RequestError, stream::RawMessageErrorKind};
use futures::StreamExt;

use super::consumer::Consumer;
use super::decode::{Binding, decode};
use super::error::RebuildError;
use super::follow::{Follow, PERIOD, Writer};
use super::position::Position;
use super::step::{Bad, Reason, Step};
use crate::broker::nats::{ConnectError, client, is_stream_not_found};
use crate::config::{NatsConfig, has_userinfo, mask_urls};

/// How long a read (or, following, a look at the stream) is retried through a server
/// restart or a network cut before the rebuild fails.
const RETRY_FOR: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Messages asked for at once: one request per batch instead of one per message.
const BATCH: usize = 500;
/// How long the server holds a batch request open. The client ends the batch a few seconds
/// after this even when the server's closing answer was lost (a restart mid-batch), so a
/// read never waits for an answer that cannot come.
const BATCH_EXPIRES: Duration = Duration::from_secs(5);
/// The server removes the reader's consumer this long after its last request (a reader
/// that died leaves nothing behind for long).
const INACTIVE: Duration = Duration::from_secs(30);

/// Why a read stopped: the source failed (retried), or the rebuild did (`--strict`).
enum Failed {
    Read(Box<dyn std::error::Error + Send + Sync>),
    Rebuild(RebuildError),
}

/// A failed read of the stream, whatever the client's error.
fn read_failed(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Failed {
    Failed::Read(e.into())
}

/// Messages a consumer delivered to a connection that was lost: read again.
#[derive(Debug, thiserror::Error)]
#[error("messages from #{from} on were delivered to a lost connection")]
struct DeliveredToLostConnection {
    from: u64,
}

/// What the server says of the stream now.
enum Lookup {
    /// It is there: its last sequence.
    Last(u64),
    /// It is not the stream being read any more: how it went.
    Gone(&'static str),
    /// No answer (the server restarting, the connection lost): worth retrying.
    Failed(RequestError),
}

/// Gives `consumer` every message of `stream` in stream order, in batches. A read that
/// fails (the server restarting, the connection lost) is retried from the first sequence
/// not yet given for up to `RETRY_FOR`, and a sequence the stream holds no message for is
/// reported as `missing`, so no message is ever skipped silently. A stream deleted (or
/// deleted and created again) meanwhile ends the read with `StreamGone`. With
/// `connection`, connects to `url` with that sink's credentials and TLS. With `follow`,
/// then reads on as the stream grows until stopped.
pub(super) async fn read(
    url: &str,
    stream: &str,
    connection: Option<&NatsConfig>,
    follow: Option<&Follow>,
    consumer: &mut Consumer,
) -> Result<(), RebuildError> {
    let shown = mask_urls(url);
    if has_userinfo(url) {
        return Err(RebuildError::CredentialsInUrl { url: shown.to_string() });
    }
    let refused = |source| RebuildError::NatsConnect { url: shown.to_string(), source };
    let client = match connection {
        Some(sink) => client(&NatsConfig { url: url.to_string(), ..sink.clone() }).await.map_err(refused)?,
        None => async_nats::connect(url).await.map_err(|e| refused(ConnectError::Connect(e)))?,
    };
    let (mut s, info) = open(client, stream).await?;
    let (first, mut last) = (info.state.first_sequence.max(1), info.state.last_sequence);
    let gone = |how, seq: u64| RebuildError::StreamGone { stream: stream.to_string(), url: shown.to_string(), how, read: seq - 1 };
    let mut writer = follow.map(|f| Writer::new(&f.out));
    let mut seq = first;
    let mut reader: Option<PullConsumer> = None;
    let mut retried = 0;
    loop {
        let name = &info.config.name;
        let record = &mut |sequence, step| consumer.record(|| Position::Nats { stream: name.clone(), sequence }, step);
        read_to(&mut s, &info, &mut seq, last, &mut reader, &mut retried, record).await.map_err(|e| match e {
            Ended::Gone(how) => gone(how, seq),
            Ended::Failed(e) => e,
        })?;
        consumer.state.summary.retried_reads = retried;
        let (Some(f), Some(w)) = (follow, writer.as_mut()) else { break };
        w.maybe_write(consumer, true)?;
        // A batch may have taken messages past `last` without giving them: the next read
        // starts a consumer of its own at `seq`.
        if let Some(r) = reader.take() {
            let _ = s.delete_consumer(&r.cached_info().name).await;
        }
        let mut failing_since: Option<Instant> = None;
        loop {
            tokio::select! {
                () = f.stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(PERIOD) => {}
            }
            match look_up(&mut s, &info).await {
                Lookup::Last(now) => {
                    last = now;
                    break;
                }
                Lookup::Gone(how) => return Err(gone(how, seq)),
                Lookup::Failed(e) => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= RETRY_FOR {
                        return Err(RebuildError::Unanswered { stream: stream.to_string(), within: RETRY_FOR, source: e });
                    }
                    tracing::debug!(error = %e, "following: the stream's info is not available; trying again");
                }
            }
        }
    }
    // A consumer left behind goes at its inactivity threshold; deleting it is a courtesy.
    if let Some(r) = reader {
        let _ = s.delete_consumer(&r.cached_info().name).await;
    }
    Ok(())
}

/// Gives `record` the message of each sequence of `stream` from `from` (or its first, if
/// later) to the last it holds now, a missing one as a bad record; returns the sequence
/// after that last. `connection` connects with that sink's credentials and TLS.
pub(crate) async fn read_from(
    connection: &NatsConfig,
    stream: &str,
    from: u64,
    record: &mut dyn FnMut(u64, Result<Step, Bad>) -> Result<(), RebuildError>,
) -> Result<u64, RebuildError> {
    let client = client(connection).await.map_err(|source| RebuildError::NatsConnect { url: mask_urls(&connection.url).to_string(), source })?;
    let (mut s, info) = open(client, stream).await?;
    let last = info.state.last_sequence;
    let mut seq = from.max(info.state.first_sequence.max(1));
    let mut reader = None;
    read_to(&mut s, &info, &mut seq, last, &mut reader, &mut 0, record).await.map_err(|e| match e {
        Ended::Gone(how) => RebuildError::StreamEnded { stream: stream.to_string(), how },
        Ended::Failed(e) => e,
    })?;
    if let Some(r) = reader {
        let _ = s.delete_consumer(&r.cached_info().name).await;
    }
    Ok(last + 1)
}

/// `stream` on the servers of `client`, and what they say of it now.
async fn open(client: async_nats::Client, stream: &str) -> Result<(Stream, Info), RebuildError> {
    let js = jetstream::new(client);
    let mut s = js.get_stream(stream).await.map_err(|source| RebuildError::StreamLookup { stream: stream.to_string(), source })?;
    let info = s.info().await.map_err(|source| RebuildError::StreamInfo { stream: stream.to_string(), source })?.clone();
    Ok((s, info))
}

/// Why reading up to a sequence stopped early.
enum Ended {
    /// The stream is not the one being read any more: how it went.
    Gone(&'static str),
    Failed(RebuildError),
}

/// What a read message is given to: its sequence and the decoded record.
type Record<'a> = dyn FnMut(u64, Result<Step, Bad>) -> Result<(), RebuildError> + 'a;

/// Gives `record` every message from `*seq` to `last` in stream order, in batches. A read
/// that fails (the server restarting, the connection lost) is retried from the first
/// sequence not yet given for up to `RETRY_FOR` (counted in `retried`), and a sequence the
/// stream holds no message for is given as `missing`, so no message is ever skipped
/// silently. A stream deleted (or deleted and created again) meanwhile ends the read.
async fn read_to(
    s: &mut Stream,
    info: &Info,
    seq: &mut u64,
    last: u64,
    reader: &mut Option<PullConsumer>,
    retried: &mut u64,
    record: &mut Record<'_>,
) -> Result<(), Ended> {
    let mut failing_since: Option<Instant> = None;
    let mut backoff = Duration::from_millis(100);
    while *seq <= last {
        let read = match read_batch(s, reader, seq, last, record).await {
            // Nothing after `seq` for now: that sequence is asked for by itself (it may
            // hold no message), and the next batch starts after it.
            Ok(0) => {
                *reader = None;
                read_one(s, *seq, record).await.map(|()| *seq += 1)
            }
            Ok(_) => Ok(()),
            Err(failed) => Err(failed),
        };
        match read {
            Ok(()) => {
                failing_since = None;
                backoff = Duration::from_millis(100);
            }
            Err(Failed::Rebuild(e)) => return Err(Ended::Failed(e)),
            Err(Failed::Read(e)) => {
                *reader = None;
                // A read fails on a stream that was deleted too: that one cannot come back.
                if let Lookup::Gone(how) = look_up(s, info).await {
                    return Err(Ended::Gone(how));
                }
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= RETRY_FOR {
                    let stream = info.config.name.clone();
                    return Err(Ended::Failed(RebuildError::ReadFailed { stream, sequence: *seq, within: RETRY_FOR, source: e }));
                }
                *retried += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    Ok(())
}

/// Asks the server about `stream`: a stream deleted since `read` describes it answers
/// "stream not found" (JetStream error 10059); one deleted and created again has another
/// creation time.
async fn look_up(stream: &mut Stream, read: &Info) -> Lookup {
    match stream.info().await {
        Ok(now) if now.created != read.created => Lookup::Gone("was deleted and created again (its creation time changed)"),
        Ok(now) => Lookup::Last(now.state.last_sequence),
        Err(e) if is_stream_not_found(&e) => Lookup::Gone("was deleted (the server answers: stream not found, JetStream error 10059)"),
        Err(e) => Lookup::Failed(e),
    }
}

/// Gives `consumer` up to a batch of messages from `*seq` on, through `reader` (made at
/// `*seq` when there is none), moving `*seq` past each; how many it gave.
async fn read_batch(stream: &Stream, reader: &mut Option<PullConsumer>, seq: &mut u64, last: u64, record: &mut Record<'_>) -> Result<usize, Failed> {
    let r = match reader {
        Some(r) => r,
        None => reader.insert(
            stream
                .create_consumer(pull::Config {
                    deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: *seq },
                    ack_policy: AckPolicy::None,
                    inactive_threshold: INACTIVE,
                    ..Default::default()
                })
                .await
                .map_err(read_failed)?,
        ),
    };
    let mut messages = r.fetch().max_messages(BATCH).expires(BATCH_EXPIRES).messages().await.map_err(read_failed)?;
    let mut given = 0;
    while let Some(m) = messages.next().await {
        let m = m.map_err(read_failed)?;
        let sequence = m.info().map_err(read_failed)?.stream_sequence;
        if sequence < *seq {
            // Given already: a consumer the server restored after a restart may deliver
            // again from where it last saved its state.
            continue;
        }
        // The consumer delivers every message the stream holds, in order, so a sequence it
        // passed over holds none (deleted, or removed by the stream's limits), unless its
        // delivery went to a connection that was lost: the stream itself says which.
        if sequence > *seq && holds_before(stream, *seq, sequence.min(last + 1)).await? {
            return Err(read_failed(DeliveredToLostConnection { from: *seq }));
        }
        while *seq < sequence.min(last + 1) {
            record(*seq, Err(missing())).map_err(Failed::Rebuild)?;
            *seq += 1;
        }
        if sequence > last {
            // Published after the read started: not part of this rebuild.
            return Ok(given);
        }
        record(sequence, decode(Binding::Nats, &header_pairs(m.headers.as_ref()), Some(&m.payload), 0)).map_err(Failed::Rebuild)?;
        *seq = sequence + 1;
        given += 1;
    }
    Ok(given)
}

/// Gives `consumer` the message at `seq` alone (or reports it missing) and moves on.
async fn read_one(stream: &Stream, seq: u64, record: &mut Record<'_>) -> Result<(), Failed> {
    match stream.get_raw_message(seq).await {
        Ok(m) => record(seq, decode(Binding::Nats, &header_pairs(Some(&m.headers)), Some(&m.payload), 0)),
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => record(seq, Err(missing())),
        // The answer came but is not a message the client can read (its headers).
        Err(e) if e.kind() == RawMessageErrorKind::Other && !is_request_failure(&e) => {
            record(seq, Err(Bad::new(Reason::WrongType, format!("the message cannot be read: {e}"))))
        }
        Err(e) => return Err(read_failed(e)),
    }
    .map_err(Failed::Rebuild)
}

/// Whether the stream holds a message from `seq` up to, not including, `end`. A message the
/// client cannot read is left to the consumer's word.
async fn holds_before(stream: &Stream, seq: u64, end: u64) -> Result<bool, Failed> {
    match stream.raw_message_builder().sequence(seq).next_by_subject(">").send().await {
        Ok(m) => Ok(m.sequence < end),
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(false),
        Err(e) if e.kind() == RawMessageErrorKind::Other && !is_request_failure(&e) => Ok(false),
        Err(e) => Err(read_failed(e)),
    }
}

fn missing() -> Bad {
    Bad::new(Reason::Missing, "the stream holds no message at this sequence (deleted, or removed by its limits)")
}

fn header_pairs(headers: Option<&HeaderMap>) -> Vec<(&[u8], &[u8])> {
    headers
        .into_iter()
        .flat_map(|h| h.iter())
        .flat_map(|(name, values)| values.iter().map(move |v| (AsRef::<str>::as_ref(name).as_bytes(), v.as_str().as_bytes())))
        .collect()
}

/// Whether the request itself failed (timed out, no responders while the server restarts,
/// the connection lost): worth retrying, unlike an answer that cannot be read.
fn is_request_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<RequestError>())
}
