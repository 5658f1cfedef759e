//! What kube's watcher decodes each watched object into: its JSON value, parsed once.

use std::borrow::Cow;

use kube::Resource;
use kube::api::{ApiResource, ObjectMeta};
use kube::core::DynamicResourceScope;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A watched object as the API server sent it, parsed straight into a `Value`. kube's
/// `DynamicObject` costs about 2.5 × as much for a Pod: its `flatten` buffers the object
/// and walks it again, and the later stages need one more conversion into a `Value`.
#[derive(Debug, Clone)]
pub struct WatchedObject {
    /// Only `resourceVersion`, the one field kube's watcher reads (to resume a watch);
    /// the later stages read the object's metadata from `value`.
    metadata: ObjectMeta,
    pub value: Value,
}

impl<'de> Deserialize<'de> for WatchedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let resource_version = value.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
        Ok(WatchedObject { metadata: ObjectMeta { resource_version, ..ObjectMeta::default() }, value })
    }
}

/// As kube's `DynamicObject`: the resource is known at run time, from discovery.
impl Resource for WatchedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;
    use kube::core::WatchEvent;
    use serde_json::json;

    use super::*;

    #[test]
    fn watch_events_decode_whole_with_the_resource_version_kube_resumes_from() {
        let line = br#"{"type":"MODIFIED","object":{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","resourceVersion":"7","x-unknown":1},"spec":{"deep":[1,2]}}}"#;
        let WatchEvent::Modified(o) = serde_json::from_slice::<WatchEvent<WatchedObject>>(line).unwrap() else { panic!("a MODIFIED event") };
        assert_eq!(o.resource_version().as_deref(), Some("7"));
        assert_eq!(
            o.value,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "resourceVersion": "7", "x-unknown": 1}, "spec": {"deep": [1, 2]}})
        );
    }
}
