//! NATS helpers: read what a JetStream stream stored since this test process started, headers
//! percent-decoded.
//!
//! The shared test server keeps the messages of every earlier run (hundreds of thousands on a
//! machine that ran the suite often), so a test never reads a stream whole: every message a
//! test waits for is published after the test process started (each test starts its bridge
//! itself), and a read starts there.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use futures::StreamExt;
use serde_json::Value;

/// The JetStream stream the bridge writes to by default (`sink.jetstream.stream`).
pub const STREAM: &str = "DELTASHIP";

/// When this test process started, near enough: `support::env()`, which every test calls
/// before it starts a bridge, forces it.
pub static STARTED: LazyLock<SystemTime> = LazyLock::new(SystemTime::now);

/// A read starts this long before [`STARTED`]: room for the server's clock, which stamps the
/// stored messages, to differ a little from ours.
const CLOCK_MARGIN: Duration = Duration::from_secs(2);
/// The pause between two reads of a stream that had nothing more, and before a new consumer
/// after an error.
const POLL: Duration = Duration::from_millis(200);
/// Messages per pull request.
const BATCH: usize = 500;
/// The longest one request to the server may take before its consumer is given up for a new
/// one (a restarted server never answers a request made before the restart).
const STALL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Msg {
    pub sequence: u64,
    pub subject: String,
    /// Header values percent-decoded, as the CloudEvents NATS binding prescribes.
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
}

impl Msg {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or_else(|| panic!("message has no {name} header: {self:?}"))
    }

    pub fn event_type(&self) -> &str {
        self.header("ce-type")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).expect("a JSON payload")
    }

    /// The message stored at stream sequence `sequence`, as a consumer delivered it.
    fn delivered(sequence: u64, m: &async_nats::Message) -> Msg {
        let headers = m
            .headers
            .iter()
            .flat_map(|h| h.iter())
            .map(|(k, v)| (k.to_string().to_ascii_lowercase(), percent_decode(v.first().map(|v| v.as_str()).unwrap_or(""))))
            .collect();
        Msg { sequence, subject: m.subject.to_string(), headers, payload: m.payload.to_vec() }
    }
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("valid escape"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8")
}

pub async fn jetstream() -> jetstream::Context {
    let client = async_nats::connect(super::env().nats).await.expect("connect to the test NATS server");
    jetstream::new(client)
}

/// Reads the messages stream `name` stored since this test process started ([`STARTED`],
/// less a two-second margin for clocks) until `done` accepts what was read, or panics after
/// `timeout` showing what was read. `done` sees every such message, in stream order, once
/// each, up to the end of the stream as it was a moment before (it is asked again as more
/// arrives). What was stored before (earlier runs of the suite, other test processes) is
/// never read: every message a test waits for is published by a bridge the test started.
///
/// An ordered read by an ephemeral pull consumer: when the server restarts or anything else
/// fails, the consumer is dropped and a new one resumes right after the last message read,
/// so that nothing is lost or read twice.
pub async fn read_until(js: &jetstream::Context, name: &str, timeout: Duration, done: impl Fn(&[Msg]) -> bool) -> Vec<Msg> {
    let deadline = Instant::now() + timeout;
    let since = STARTED.checked_sub(CLOCK_MARGIN).unwrap_or(UNIX_EPOCH);
    let mut msgs: Vec<Msg> = Vec::new();
    let mut reader: Option<Reader> = None;
    let mut error: Option<String> = None;
    loop {
        if let Err(e) = read_more(js, name, since, &mut reader, &mut msgs, deadline).await {
            reader = None;
            error = Some(e.to_string());
        }
        if done(&msgs) {
            if let Some(reader) = reader {
                let _ = js.delete_consumer_from_stream(&reader.consumer.cached_info().name, name).await;
            }
            return msgs;
        }
        if Instant::now() >= deadline {
            let seen: Vec<String> = msgs.iter().map(|m| format!("{} {}", m.subject, m.headers.get("ce-type").cloned().unwrap_or_default())).collect();
            let error = error.map(|e| format!(" (last error: {e})")).unwrap_or_default();
            panic!("timed out reading stream {name} since {since:?}{error}; got {} messages: {seen:#?}", msgs.len());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A consumer of the stream and the consumer sequence of its last delivery: deliveries must
/// follow each other without a gap.
struct Reader {
    consumer: PullConsumer,
    delivered: u64,
}

/// Appends to `msgs` the messages stored after the last of them (since `since` when there
/// is none), until the stream has no more or `deadline` passed; makes a consumer if there is
/// none. An error leaves `msgs` as far as they were read.
async fn read_more(
    js: &jetstream::Context,
    name: &str,
    since: SystemTime,
    reader: &mut Option<Reader>,
    msgs: &mut Vec<Msg>,
    deadline: Instant,
) -> Result<(), async_nats::Error> {
    loop {
        if reader.is_none() {
            let deliver_policy = match msgs.last() {
                Some(last) => DeliverPolicy::ByStartSequence { start_sequence: last.sequence + 1 },
                None => {
                    let start_time = async_nats::datetime::from_nanos(i128::try_from(since.duration_since(UNIX_EPOCH)?.as_nanos())?)?;
                    DeliverPolicy::ByStartTime { start_time }
                }
            };
            let config = pull::Config {
                deliver_policy,
                ack_policy: AckPolicy::None,
                memory_storage: true,
                num_replicas: 1,
                inactive_threshold: Duration::from_secs(30),
                ..pull::Config::default()
            };
            let stream = tokio::time::timeout(STALL, js.get_stream(name)).await??;
            let consumer = tokio::time::timeout(STALL, stream.create_consumer(config)).await??;
            *reader = Some(Reader { consumer, delivered: 0 });
        }
        let reader = reader.as_mut().expect("a consumer was just made");
        let mut batch = tokio::time::timeout(STALL, reader.consumer.fetch().max_messages(BATCH).messages()).await??;
        let (mut count, mut pending) = (0, 0);
        while let Some(m) = tokio::time::timeout(STALL, batch.next()).await? {
            let m = m?;
            let info = m.info()?;
            if info.consumer_sequence != reader.delivered + 1 {
                return Err(format!("consumer delivery {} after {}: a gap", info.consumer_sequence, reader.delivered).into());
            }
            reader.delivered = info.consumer_sequence;
            (count, pending) = (count + 1, info.pending);
            let sequence = info.stream_sequence;
            if msgs.last().is_none_or(|last| last.sequence < sequence) {
                msgs.push(Msg::delivered(sequence, &m));
            }
        }
        if count < BATCH || pending == 0 || Instant::now() >= deadline {
            return Ok(());
        }
    }
}
