//! CloudEvents protocol bindings shared by the sinks: header values and structured bytes.

use std::borrow::Cow;

use cloudevents::Event;

/// A header value as the CloudEvents NATS binding requires: space, `"`, `%` and every
/// character outside printable ASCII percent-encoded (upper-case hex of its UTF-8 bytes).
/// A value with nothing to encode (the usual case) is returned as it is, without a copy.
pub fn percent_encode(value: &str) -> Cow<'_, str> {
    if all_plain(value.as_bytes()) {
        return Cow::Borrowed(value);
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if is_plain(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    Cow::Owned(out)
}

/// A byte a NATS header value may hold as it is.
fn is_plain(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%'
}

/// Whether every byte of `text` is plain: sixteen at a time without a branch per byte (the
/// compiler checks a chunk in a few vector instructions), the rest one by one.
fn all_plain(text: &[u8]) -> bool {
    let mut chunks = text.chunks_exact(16);
    for chunk in &mut chunks {
        if !chunk.iter().fold(true, |all, &b| all & is_plain(b)) {
            return false;
        }
    }
    chunks.remainder().iter().all(|&b| is_plain(b))
}

/// The whole event as JSON (structured content mode): the attributes of `event` (which
/// holds no data) with `data`, the JSON bytes of its data, as its `data` member.
pub fn structured_bytes(event: &Event, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 + data.len());
    serde_json::to_writer(&mut out, event).expect("a CloudEvent always serializes");
    if !data.is_empty() {
        // The attributes are a JSON object with at least its four required members: its
        // closing brace makes way for one more.
        out.pop();
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data);
        out.push(b'}');
    }
    out
}

pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::event::AttributesWriter;
    use cloudevents::{EventBuilder, EventBuilderV10};
    use serde_json::json;

    #[test]
    fn a_structured_event_is_what_the_sdk_writes_for_the_same_event_with_its_data() {
        let mut attributes = EventBuilderV10::new()
            .id("1")
            .ty("dev.deltaship.object.added")
            .source("//c/api/v1/configmaps")
            .subject("ns/a")
            .extension("partitionkey", "ns/a")
            .build()
            .unwrap();
        attributes.set_datacontenttype(Some("application/json"));
        let data = json!({"metadata": {"name": "a"}, "data": {"k": "v \u{20AC}"}});
        let mut whole = attributes.clone();
        whole.set_data("application/json", data.clone());
        let ours: serde_json::Value = serde_json::from_slice(&structured_bytes(&attributes, &serde_json::to_vec(&data).unwrap())).unwrap();
        assert_eq!(ours, serde_json::to_value(&whole).unwrap());
        let back: Event = serde_json::from_value(ours).unwrap();
        assert_eq!(back, whole, "the SDK reads it back as the same event");
    }

    proptest::proptest! {
        #[test]
        fn a_value_is_plain_whatever_its_length_when_every_byte_is(text in "[ -~\u{80}-\u{10FFFF}]{0,8}[!-~]{0,40}[\u{0}-\u{10FFFF}]?[!-~]{0,40}") {
            proptest::prop_assert_eq!(all_plain(text.as_bytes()), text.bytes().all(is_plain), "{:?}", text);
        }
    }

    #[test]
    fn nats_header_values_are_percent_encoded_per_the_binding() {
        assert_eq!(percent_encode("Euro \u{20AC} \u{1F600}"), "Euro%20%E2%82%AC%20%F0%9F%98%80");
        assert_eq!(percent_encode("a\"b%c"), "a%22b%25c");
        assert!(matches!(percent_encode("//c/api/v1/configmaps"), Cow::Borrowed("//c/api/v1/configmaps")), "nothing to encode: no copy");
    }
}
