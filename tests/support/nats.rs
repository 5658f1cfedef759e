//! NATS helpers: read a JetStream stream whole, headers percent-decoded.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;

/// The JetStream stream the bridge writes to by default (`sink.jetstream.stream`).
pub const STREAM: &str = "DELTASHIP";

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

/// Reads stream `name` from its first message until `done` accepts what was read, or
/// panics after `timeout` showing what was read.
pub async fn read_until(js: &jetstream::Context, name: &str, timeout: Duration, done: impl Fn(&[Msg]) -> bool) -> Vec<Msg> {
    let deadline = Instant::now() + timeout;
    let mut msgs: Vec<Msg> = Vec::new();
    loop {
        if let Ok(mut stream) = js.get_stream(name).await
            && let Ok(info) = stream.info().await
        {
            let first = msgs.last().map(|m| m.sequence + 1).unwrap_or(info.state.first_sequence.max(1));
            for seq in first..=info.state.last_sequence {
                let m = stream.get_raw_message(seq).await.expect("read a stored message");
                let headers =
                    m.headers.iter().map(|(k, v)| (k.to_string().to_ascii_lowercase(), percent_decode(v.first().map(|v| v.as_str()).unwrap_or("")))).collect();
                msgs.push(Msg { sequence: m.sequence, subject: m.subject.to_string(), headers, payload: m.payload.to_vec() });
            }
        }
        if done(&msgs) {
            return msgs;
        }
        if Instant::now() >= deadline {
            let seen: Vec<String> = msgs.iter().map(|m| format!("{} {}", m.subject, m.headers.get("ce-type").cloned().unwrap_or_default())).collect();
            panic!("timed out reading stream {name}; got {} messages: {seen:#?}", msgs.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
