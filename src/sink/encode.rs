//! CloudEvents protocol bindings shared by the sinks: binary-mode attributes and bytes.

use cloudevents::event::Data;
use cloudevents::{AttributesReader, Event};

/// The event's attributes and extensions in binary content mode, named for the binding:
/// `prefix` + name (`ce_` for Kafka, `ce-` for NATS). `datacontenttype` is left out: each
/// binding maps it to its own content-type header.
pub fn binary_attributes<'a>(event: &'a Event, prefix: &'a str) -> impl Iterator<Item = (String, String)> + 'a {
    event
        .iter()
        .filter(|(name, _)| *name != "datacontenttype")
        .map(move |(name, value)| (format!("{prefix}{name}"), value.to_string()))
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
        let attrs: Vec<_> = binary_attributes(&e, "ce_").collect();
        assert!(attrs.contains(&("ce_id".into(), "1".into())));
        assert!(attrs.contains(&("ce_specversion".into(), "1.0".into())));
        assert!(attrs.contains(&("ce_partitionkey".into(), "ns/a".into())));
        assert!(!attrs.iter().any(|(k, _)| k.contains("datacontenttype")));
        assert_eq!(data_content_type(&e), "application/json");
        assert_eq!(data_bytes(&e), br#"{"a":1}"#);
        let s: serde_json::Value = serde_json::from_slice(&structured_bytes(&e)).unwrap();
        assert_eq!(s["data"]["a"], 1);
        assert_eq!(s["partitionkey"], "ns/a");
    }
}
