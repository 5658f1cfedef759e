//! CloudEvents protocol bindings shared by the sinks: binary-mode attributes and bytes.

use cloudevents::event::Data;
use cloudevents::{AttributesReader, Event};

/// The event's attributes and extensions in binary content mode, as (name, canonical
/// string value). `datacontenttype` is included: Kafka maps it to `content-type`, NATS to
/// `ce-datacontenttype`.
pub fn binary_attributes(event: &Event) -> impl Iterator<Item = (&str, String)> + '_ {
    event.iter().map(|(name, value)| (name, value.to_string()))
}

/// A header value as the CloudEvents NATS binding requires: space, `"`, `%` and every
/// character outside printable ASCII percent-encoded (upper-case hex of its UTF-8 bytes).
pub fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `content-type` of the event's data.
pub fn data_content_type(event: &Event) -> &str {
    event.datacontenttype().unwrap_or("application/json")
}

/// The event's data as bytes (binary mode payload); empty when there is none.
pub fn data_bytes(event: &Event) -> Vec<u8> {
    match event.data() {
        Some(Data::Json(v)) => serde_json::to_vec(v).expect("a JSON value always serializes"),
        Some(Data::Binary(b)) => b.clone(),
        Some(Data::String(s)) => s.clone().into_bytes(),
        None => Vec::new(),
    }
}

/// The whole event as JSON (structured content mode).
pub fn structured_bytes(event: &Event) -> Vec<u8> {
    serde_json::to_vec(event).expect("a CloudEvent always serializes")
}

pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::{EventBuilder, EventBuilderV10};
    use serde_json::json;

    #[test]
    fn binary_attributes_carry_extensions_but_not_the_content_type() {
        let e = EventBuilderV10::new()
            .id("1")
            .ty("dev.deltaship.object.added")
            .source("//c/api/v1/configmaps")
            .extension("partitionkey", "ns/a")
            .data("application/json", json!({"a": 1}))
            .build()
            .unwrap();
        let attrs: Vec<_> = binary_attributes(&e).collect();
        assert!(attrs.contains(&("id", "1".into())));
        assert!(attrs.contains(&("specversion", "1.0".into())));
        assert!(attrs.contains(&("partitionkey", "ns/a".into())));
        assert!(attrs.contains(&("datacontenttype", "application/json".into())));
        assert_eq!(data_content_type(&e), "application/json");
        assert_eq!(data_bytes(&e), br#"{"a":1}"#);
        let s: serde_json::Value = serde_json::from_slice(&structured_bytes(&e)).unwrap();
        assert_eq!(s["data"]["a"], 1);
        assert_eq!(s["partitionkey"], "ns/a");
    }

    #[test]
    fn nats_header_values_are_percent_encoded_per_the_binding() {
        assert_eq!(percent_encode("Euro \u{20AC} \u{1F600}"), "Euro%20%E2%82%AC%20%F0%9F%98%80");
        assert_eq!(percent_encode("a\"b%c"), "a%22b%25c");
        assert_eq!(percent_encode("//c/api/v1/configmaps"), "//c/api/v1/configmaps");
    }
}
