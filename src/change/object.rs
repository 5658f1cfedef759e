//! A watched object decoded once, with the metadata every later stage reads.

use kube::api::DynamicObject;
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
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object {key} has no metadata.{field}")]
    MissingField { key: String, field: &'static str },
    #[error("object {key} cannot be encoded as JSON: {source}")]
    Encode {
        key: String,
        source: serde_json::Error,
    },
}

impl Object {
    pub fn from_dynamic(obj: DynamicObject) -> Result<Object, ObjectError> {
        let m = &obj.metadata;
        let name = m.name.clone().unwrap_or_default();
        let key = match &m.namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.clone(),
        };
        let missing = |field| ObjectError::MissingField {
            key: key.clone(),
            field,
        };
        if name.is_empty() {
            return Err(missing("name"));
        }
        let reference = ObjectRef {
            namespace: m.namespace.clone(),
            name,
            uid: m.uid.clone().ok_or_else(|| missing("uid"))?,
            resource_version: m.resource_version.clone().ok_or_else(|| missing("resourceVersion"))?,
        };
        let value = serde_json::to_value(&obj).map_err(|source| ObjectError::Encode { key, source })?;
        Ok(Object { reference, value })
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
        let obj: DynamicObject = serde_json::from_value(value).unwrap();
        Object::from_dynamic(obj).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_key_and_keeps_unknown_fields() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "uid": "u1", "resourceVersion": "7"},
            "spec": {"x-unknown": {"deep": [1, 2]}},
        }))
        .unwrap();
        let o = Object::from_dynamic(obj).unwrap();
        assert_eq!(o.reference.key(), "w");
        assert_eq!(o.value["spec"]["x-unknown"]["deep"][1], 2);
    }

    #[test]
    fn an_object_without_uid_is_an_error_naming_it() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"},
        }))
        .unwrap();
        let e = Object::from_dynamic(obj).unwrap_err().to_string();
        assert_eq!(e, "object ns/a has no metadata.uid");
    }
}
