//! A watched object decoded once, with the metadata every later stage reads.

use bytes::Bytes;
use serde_json::Value;

/// Identity and version of an object: what a `reference` payload carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

impl ObjectRef {
    /// client-go's informer key: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A watched object as the later stages take it: its identity, and its JSON as shipped.
#[derive(Debug, Clone)]
pub struct Object {
    pub reference: ObjectRef,
    /// The whole object as JSON, fields unknown to any typed client included: the API
    /// server's bytes (with `kind` and `apiVersion` put first where a list item lacked
    /// them), without `metadata.managedFields` and redacted as configured.
    pub json: Bytes,
    /// The hash of `json` without the fields that never make an update worth shipping
    /// (resourceVersion, managedFields, the resource's `ignore_fields`): two versions of
    /// an object with the same fingerprint look the same to consumers.
    pub fingerprint: u128,
    /// The object cannot be shipped whole (nested deeper than the JSON limit consumers
    /// keep): it is shipped as a reference marked `truncated`, and `json` holds that.
    pub truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object {key} has no metadata.{field}")]
    MissingField { key: String, field: &'static str },
}

impl Object {
    /// The object parsed into a tree, for what looks inside it (patch payloads, filters on
    /// changed paths); None if serde_json cannot hold it (a number beyond its range).
    pub fn value(&self) -> Option<Value> {
        serde_json::from_slice(&self.json).ok()
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use serde_json::json;

    /// A ConfigMap in namespace `ns` with the given data.
    pub fn configmap(name: &str, uid: &str, rv: &str, data: Value) -> Object {
        let value = json!({
            "kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "data": data,
        });
        let reference = ObjectRef { namespace: Some("ns".into()), name: name.into(), uid: uid.into(), resource_version: rv.into() };
        // Its fingerprint as defined, with no `ignore_fields`: the JSON without resourceVersion.
        let mut unversioned = value.clone();
        unversioned["metadata"].as_object_mut().unwrap().shift_remove("resourceVersion");
        let fingerprint = xxhash_rust::xxh3::xxh3_128(&serde_json::to_vec(&unversioned).unwrap());
        Object { reference, json: serde_json::to_vec(&value).unwrap().into(), fingerprint, truncated: false }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::configmap;
    use serde_json::json;

    #[test]
    fn the_tree_is_parsed_from_the_json() {
        let o = configmap("a", "u1", "7", json!({"x-unknown": {"deep": [1, 2]}}));
        assert_eq!(o.reference.key(), "ns/a");
        assert_eq!(o.value().unwrap()["data"]["x-unknown"]["deep"][1], 2);
    }
}
