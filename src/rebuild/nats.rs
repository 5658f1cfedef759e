//! Reads a JetStream stream from its first message to the last it had when reading started.

use async_nats::jetstream;
use serde_json::Value;

use super::RebuildError;
use super::protocol::Received;

/// Calls `each` with every event of `stream`, in stream order.
pub async fn read(url: &str, stream: &str, mut each: impl FnMut(Received) -> Result<(), RebuildError>) -> Result<(), RebuildError> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| RebuildError::Source(format!("cannot connect to {url}: {e}")))?;
    let js = jetstream::new(client);
    let mut s = js
        .get_stream(stream)
        .await
        .map_err(|e| RebuildError::Source(format!("stream {stream}: {e}")))?;
    let info = s.info().await.map_err(|e| RebuildError::Source(e.to_string()))?.clone();
    for seq in info.state.first_sequence.max(1)..=info.state.last_sequence {
        // One request per message keeps this reader simple; deleted sequences are skipped.
        let Ok(m) = s.get_raw_message(seq).await else { continue };
        let bad = |problem: String| RebuildError::Source(format!("message {stream}#{seq}: {problem}"));
        let header = |name: &str| m.headers.get(name).map(|v| percent_decode(v.as_str()));
        if header("Content-Type").is_some_and(|c| c.starts_with("application/cloudevents+json")) {
            let event: Value = serde_json::from_slice(&m.payload).map_err(|e| bad(e.to_string()))?;
            each(super::from_structured(event, 0).map_err(bad)?)?;
            continue;
        }
        each(Received {
            id: header("ce-id").ok_or_else(|| bad("no ce-id header".into()))?,
            ty: header("ce-type").ok_or_else(|| bad("no ce-type header".into()))?,
            cluster: header("ce-cluster").unwrap_or_default(),
            apiversion: header("ce-apiversion").unwrap_or_default(),
            kind: header("ce-kind").unwrap_or_default(),
            subject: header("ce-subject"),
            datacontenttype: header("ce-datacontenttype"),
            data: Some(serde_json::from_slice(&m.payload).map_err(|e| bad(e.to_string()))?),
            partition: 0,
        })?;
    }
    Ok(())
}

/// Undoes the binding's percent-encoding of header values.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
