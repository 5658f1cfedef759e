//! Watch responses read as the API server writes them: one event per line,
//! `{"type":"MODIFIED","object":{…}}`. An added, modified or deleted event's object is a
//! slice of its line's bytes: not parsed here, not copied (the decoder's scan validates and
//! reads it once). Any other line (bookmarks, errors, events written another way) is parsed
//! whole, as kube's `request_events` parses every line.

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use kube::Client;
use kube::core::{Status, WatchEvent};

use super::WatchedObject;

/// Starts the watch `request` asks for and reads its events.
pub async fn request_events(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
) -> kube::Result<impl Stream<Item = kube::Result<WatchEvent<WatchedObject>>> + use<>> {
    // Each event is read as it arrives: uncompressed (kube's decompression reads a gzip
    // stream's first member only).
    request.headers_mut().entry(http::header::ACCEPT_ENCODING).or_insert(http::HeaderValue::from_static("identity"));
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        let body = response.into_body().collect().await?.to_bytes();
        return Err(kube::Error::Api(refusal(status, &body).boxed()));
    }
    Ok(events(response.into_body().into_data_stream()))
}

/// The API server's answer to a refused request: its `Status`, or one made of the body.
fn refusal(status: http::StatusCode, body: &[u8]) -> Status {
    serde_json::from_slice::<Status>(body)
        .unwrap_or_else(|_| Status::failure(String::from_utf8_lossy(body).trim(), "Failed to parse error data").with_code(status.as_u16()))
}

/// The events of a watch response's body. The stream ends where the body does, also when
/// the connection broke mid-line (the watch is renewed from the last version seen).
fn events(body: impl Stream<Item = kube::Result<Bytes>> + Send + 'static) -> impl Stream<Item = kube::Result<WatchEvent<WatchedObject>>> + Send {
    let body = body.map_ok(Some).chain(futures::stream::once(async { Ok(None) })).boxed();
    futures::stream::unfold((body, Lines::default(), false), |(mut body, mut lines, mut ended)| async move {
        loop {
            if let Some(line) = lines.next(ended) {
                match event(line) {
                    // The rest after the end, cut short.
                    Err(kube::Error::SerdeError(e)) if ended && e.is_eof() => return None,
                    event => return Some((event, (body, lines, ended))),
                }
            }
            if ended {
                return None;
            }
            match body.next().await {
                Some(Ok(Some(chunk))) => lines.push(chunk),
                Some(Ok(None)) | None => ended = true,
                Some(Err(e)) if broken(&e) => {
                    tracing::debug!(error = %e, "The watch's connection ended mid-response");
                    return None;
                }
                Some(Err(e)) => return Some((Err(kube::Error::ReadEvents(std::io::Error::other(e))), (body, lines, true))),
            }
        }
    })
}

/// A connection that ended without a clean end of the response: the watch is simply renewed.
fn broken(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    // Bounded: a cycle of sources must not stall the watch.
    for _ in 0..16 {
        let Some(err) = source else { break };
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = err.source();
    }
    e.to_string().contains("unexpected EOF during chunk")
}

/// Bytes received and not yet cut into lines.
#[derive(Default)]
struct Lines {
    pending: BytesMut,
    /// How far `pending` is known to hold no newline.
    searched: usize,
}

impl Lines {
    fn push(&mut self, chunk: Bytes) {
        self.pending.extend_from_slice(&chunk);
    }

    /// The next whole line without its newline, or after the end the rest; blank lines
    /// are passed over.
    fn next(&mut self, ended: bool) -> Option<Bytes> {
        loop {
            let line = match memchr::memchr(b'\n', &self.pending[self.searched..]) {
                Some(i) => {
                    let mut line = self.pending.split_to(self.searched + i + 1);
                    line.truncate(line.len() - 1);
                    line
                }
                None if ended && !self.pending.is_empty() => self.pending.split(),
                None => {
                    self.searched = self.pending.len();
                    return None;
                }
            };
            self.searched = 0;
            let line = line.freeze();
            if !line.trim_ascii().is_empty() {
                return Some(line);
            }
        }
    }
}

/// One line's event.
pub fn event(mut line: Bytes) -> kube::Result<WatchEvent<WatchedObject>> {
    const OPEN: &[u8] = b"{\"type\":\"";
    const OBJECT: &[u8] = b"\",\"object\":";
    let trailing = line.len() - line.trim_ascii_end().len();
    line.truncate(line.len() - trailing);
    if let Some(rest) = line.strip_prefix(OPEN) {
        let kind = rest.iter().position(|&b| b == b'"').unwrap_or(0);
        let event: Option<fn(WatchedObject) -> WatchEvent<WatchedObject>> = match &rest[..kind] {
            b"ADDED" => Some(WatchEvent::Added),
            b"MODIFIED" => Some(WatchEvent::Modified),
            b"DELETED" => Some(WatchEvent::Deleted),
            _ => None,
        };
        if let Some(event) = event
            && rest[kind..].starts_with(OBJECT)
            && line.ends_with(b"}")
        {
            let start = OPEN.len() + kind + OBJECT.len();
            let end = line.len() - 1;
            line.advance(start);
            line.truncate(end - start);
            return Ok(event(WatchedObject(line)));
        }
    }
    serde_json::from_slice::<WatchEvent<WatchedObject>>(&line).map_err(|e| match serde_json::from_slice::<Status>(&line) {
        Ok(status) => kube::Error::Api(status.boxed()),
        Err(_) => kube::Error::SerdeError(e),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::json::strategies::any_json;

    proptest! {
        /// The slice is what parsing the whole line gives, whatever the object holds.
        #[test]
        fn the_slice_is_the_parsed_lines_object(object in prop::collection::btree_map("[a-z\"\\\\}]{0,4}", any_json(), 0..5), spaces in "[ \t\r]{0,2}") {
            let object = serde_json::to_string(&object).unwrap();
            let line = format!("{{\"type\":\"MODIFIED\",\"object\":{object}}}{spaces}");
            let parsed = serde_json::from_str::<WatchEvent<WatchedObject>>(&line).unwrap();
            let (WatchEvent::Modified(sliced), WatchEvent::Modified(parsed)) = (event(Bytes::from(line)).unwrap(), parsed) else { panic!("modified events") };
            prop_assert_eq!(sliced.0, parsed.0);
        }
    }

    fn object(event: kube::Result<WatchEvent<WatchedObject>>) -> (&'static str, Bytes) {
        match event.unwrap() {
            WatchEvent::Added(o) => ("added", o.0),
            WatchEvent::Modified(o) => ("modified", o.0),
            WatchEvent::Deleted(o) => ("deleted", o.0),
            WatchEvent::Bookmark(b) => ("bookmark", Bytes::from(b.metadata.resource_version)),
            WatchEvent::Error(s) => panic!("an error event: {s:?}"),
        }
    }

    #[test]
    fn an_objects_bytes_are_its_slice_of_the_line() {
        let o = r#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","resourceVersion":"7"},"spec":{"s":"\u003c}"}}"#;
        for (kind, name) in [("ADDED", "added"), ("MODIFIED", "modified"), ("DELETED", "deleted")] {
            let line = Bytes::from(format!("{{\"type\":\"{kind}\",\"object\":{o}}}\r\n"));
            assert_eq!(object(event(line)), (name, Bytes::from(o)));
        }
    }

    #[test]
    fn lines_written_another_way_are_parsed_whole() {
        let o = r#"{"metadata":{"name":"w","resourceVersion":"7"}}"#;
        let line = format!(r#"{{ "type": "ADDED", "object": {o} }}"#);
        assert_eq!(object(event(Bytes::from(line))), ("added", Bytes::from(o)));
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"resourceVersion":"12"}}}"#;
        assert_eq!(object(event(Bytes::from(bookmark))), ("bookmark", Bytes::from("12")));
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}}"#;
        assert!(matches!(event(Bytes::from(gone)), Ok(WatchEvent::Error(s)) if s.code == 410));
    }

    #[test]
    fn a_status_line_is_the_api_servers_refusal_and_a_cut_line_an_error() {
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"Forbidden","code":403}"#;
        assert!(matches!(event(Bytes::from(status)), Err(kube::Error::Api(s)) if s.code == 403));
        assert!(matches!(event(Bytes::from("{\"type\":\"ADDED\"")), Err(kube::Error::SerdeError(_))));
    }

    #[tokio::test]
    async fn events_are_cut_at_newlines_across_chunks_in_any_place() {
        let lines: Vec<String> = (0..4)
            .map(|i| {
                format!(r#"{{"type":"MODIFIED","object":{{"metadata":{{"name":"o{i}","resourceVersion":"{i}"}},"data":{{"k":"{}"}}}}}}"#, "x".repeat(i * 50))
            })
            .collect();
        let body = lines.join("\n\n") + "\n";
        for size in [1, 7, 64, body.len()] {
            let chunks: Vec<kube::Result<Bytes>> = body.as_bytes().chunks(size).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            let read: Vec<_> = events(futures::stream::iter(chunks)).map(|e| object(e).1).collect().await;
            let expected: Vec<Bytes> = lines.iter().map(|l| Bytes::copy_from_slice(&l.as_bytes()[28..l.len() - 1])).collect();
            assert_eq!(read, expected, "chunks of {size}");
        }
    }

    #[tokio::test]
    async fn the_last_line_needs_no_newline_and_a_broken_connection_ends_the_events() {
        let line = r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#;
        let read: Vec<_> = events(futures::stream::iter([Ok(Bytes::from(line))])).map(|e| object(e).0).collect().await;
        assert_eq!(read, ["added"]);
        let eof = kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
        let read: Vec<_> = events(futures::stream::iter([Ok(Bytes::from(format!("{line}\n{{\"type\":\"ADD"))), Err(eof)])).collect().await;
        assert_eq!(read.len(), 1, "the whole line, then the end: the half line is dropped");
        let other = kube::Error::ReadEvents(std::io::Error::other("reset"));
        let read: Vec<_> = events(futures::stream::iter([Err(other)])).collect().await;
        assert!(matches!(&read[..], [Err(kube::Error::ReadEvents(_))]), "{read:?}");
    }
}
