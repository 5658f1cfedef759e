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

#[derive(Debug, Clone)]
pub struct Object {
    pub reference: ObjectRef,
    /// The whole object as JSON, fields unknown to any typed client included.
    pub value: Value,
    /// `value` serialized, once the classifier did it (for its fingerprint): the event
    /// stage ships these bytes instead of serializing the object again.
    pub json: Option<Bytes>,
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object {key} has no metadata.{field}")]
    MissingField { key: String, field: &'static str },
}

impl Object {
    /// The object `value`, its identity read from its `metadata`.
    pub fn from_value(value: Value) -> Result<Object, ObjectError> {
        let meta = |field: &str| value.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).map(str::to_string);
        let name = meta("name").unwrap_or_default();
        let namespace = meta("namespace");
        let missing = |field| ObjectError::MissingField {
            key: match &namespace {
                Some(ns) => format!("{ns}/{name}"),
                None => name.clone(),
            },
            field,
        };
        if name.is_empty() {
            return Err(missing("name"));
        }
        let uid = meta("uid").ok_or_else(|| missing("uid"))?;
        let resource_version = meta("resourceVersion").ok_or_else(|| missing("resourceVersion"))?;
        Ok(Object { reference: ObjectRef { namespace, name, uid, resource_version }, value, json: None })
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use serde_json::json;

    /// A ConfigMap in namespace `ns` with the given data.
    pub fn configmap(name: &str, uid: &str, rv: &str, data: Value) -> Object {
        let value = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "data": data,
        });
        Object::from_value(value).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_key_and_keeps_unknown_fields() {
        let o = Object::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "uid": "u1", "resourceVersion": "7"},
            "spec": {"x-unknown": {"deep": [1, 2]}},
        }))
        .unwrap();
        assert_eq!(o.reference.key(), "w");
        assert_eq!(o.value["spec"]["x-unknown"]["deep"][1], 2);
    }

    #[test]
    fn an_object_without_uid_is_an_error_naming_it() {
        let e = Object::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"},
        }))
        .unwrap_err()
        .to_string();
        assert_eq!(e, "object ns/a has no metadata.uid");
    }
}
