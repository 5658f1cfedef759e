//! What each watched object is read into from a list or watch response: its bytes as the
//! API server sent them, not parsed (`decode` reads them).

use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A watched object's JSON, as it was in the response.
#[derive(Debug, Clone)]
pub struct WatchedObject(pub Bytes);

impl<'de> Deserialize<'de> for WatchedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(WatchedObject(Bytes::from(String::from(Box::<str>::from(raw)).into_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use kube::core::WatchEvent;

    use super::*;

    #[test]
    fn watch_events_keep_their_objects_bytes() {
        let line = r#"{"type":"MODIFIED","object":{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","resourceVersion":"7","x-unknown":1},"spec":{"deep":[1,2],"s":"\u003c"}}}"#;
        let WatchEvent::Modified(o) = serde_json::from_str::<WatchEvent<WatchedObject>>(line).unwrap() else { panic!("a MODIFIED event") };
        assert_eq!(&o.0[..], br#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","resourceVersion":"7","x-unknown":1},"spec":{"deep":[1,2],"s":"\u003c"}}"#);
    }
}
