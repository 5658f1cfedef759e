//! Decoding: a watched object's bytes, as the API server sent them, into an `Object`.
//!
//! The raw-bytes path reads the identity with one validating scan (`json::Scanner`), cuts
//! `metadata.managedFields` out by its span, puts `kind` and `apiVersion` in front of a list
//! item that lacks them, and fingerprints the bytes with the ignored fields skipped: no tree
//! is built. Only an object that redaction must change (a Secret, or any object of a
//! resource with field rules) is parsed into a tree, redacted and written back as the API
//! server writes JSON (`json::Fingerprinter`). Both paths give the same bytes and the same
//! fingerprint for an object redaction leaves alone (property-tested below).

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::Value;

use crate::json::{Fingerprinter, Meta, ScanError, Scanner};
use crate::model::{Object, ObjectError, ObjectRef, ResourceType};
use crate::redact::Redactor;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Json(#[from] ScanError),
    #[error("cannot be parsed for redaction: {0}")]
    Tree(#[from] serde_json::Error),
    #[error(transparent)]
    Object(#[from] ObjectError),
}

/// Decodes the objects of one watch.
pub struct Decoder {
    scanner: Scanner,
    fingerprinter: Fingerprinter,
    redactor: Redactor,
    kind: String,
    api_version: String,
    /// `{"kind":…,"apiVersion":…,`: what a list item lacks, in the order the API server
    /// writes them in a watch event's object.
    type_meta: Vec<u8>,
}

impl Decoder {
    /// The decoder of `resource`'s objects: `scanner` leaves its ignored fields out of the
    /// fingerprint (`ignore_fields` are the configured ones, for the tree path).
    pub fn new(resource: &ResourceType, scanner: Scanner, ignore_fields: &[String], redactor: Redactor) -> Decoder {
        let api_version = resource.api_version();
        let mut type_meta = b"{\"kind\":".to_vec();
        serde_json::to_writer(&mut type_meta, &resource.kind).expect("a string serializes");
        type_meta.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut type_meta, &api_version).expect("a string serializes");
        type_meta.push(b',');
        Decoder { scanner, fingerprinter: Fingerprinter::new(ignore_fields), redactor, kind: resource.kind.clone(), api_version, type_meta }
    }

    /// One object: invalid JSON, metadata of the wrong type and a missing name, uid or
    /// resourceVersion are errors naming what is wrong. Bytes that need no change are
    /// shipped as they are (no copy).
    pub fn decode(&self, json: &Bytes) -> Result<Object, DecodeError> {
        let scanned = match self.scanner.scan(json) {
            Err(ScanError::TooDeep { .. }) => return self.too_deep(json),
            scanned => scanned?,
        };
        let reference = reference(&scanned.meta)?;
        let (kind, api_version) = (scanned.meta.kind.as_deref(), scanned.meta.api_version.as_deref());
        let type_meta: &[u8] = match (kind, api_version) {
            (None, None) => &self.type_meta,
            (Some(_), Some(_)) => b"",
            // One of the two: the tree path adds the other.
            _ => return self.tree(json, reference),
        };
        if self.redactor.changes(kind.unwrap_or(&self.kind), api_version.unwrap_or(&self.api_version)) {
            return self.tree(&scanned.shipped(type_meta, false), reference);
        }
        let shipped = match scanned.shipped(type_meta, self.redactor.cuts_managed_fields()) {
            // `shipped` borrows only when it is the whole input.
            Cow::Borrowed(_) => json.clone(),
            Cow::Owned(v) => Bytes::from(v),
        };
        Ok(Object { reference, json: shipped, fingerprint: scanned.fingerprint(type_meta), truncated: false })
    }

    /// The tree path: parsed, given its type, redacted, written back.
    fn tree(&self, json: &[u8], reference: ObjectRef) -> Result<Object, DecodeError> {
        let mut value: Value = serde_json::from_slice(json)?;
        if let Some(fields) = value.as_object_mut() {
            if !fields.contains_key("kind") {
                fields.shift_insert(0, "kind".into(), self.kind.clone().into());
            }
            if !fields.contains_key("apiVersion") {
                fields.shift_insert(1, "apiVersion".into(), self.api_version.clone().into());
            }
        }
        self.redactor.redact(&mut value);
        let s = self.fingerprinter.serialize(&value);
        Ok(Object { reference, json: s.json, fingerprint: s.fingerprint, truncated: false })
    }
}

/// What is read of an object nested too deep to scan: its identity, every other member
/// skipped unparsed (serde_json skips values without a depth limit).
#[derive(serde::Deserialize)]
struct Shallow {
    #[serde(default)]
    metadata: ShallowMeta,
}

#[derive(serde::Deserialize, Default)]
struct ShallowMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl Decoder {
    /// An object nested deeper than the JSON limit: shipped as its reference, marked
    /// `truncated` (the oversize policy's form), so that it is neither lost nor, at the
    /// next relist, taken for deleted. Its fingerprint covers its whole bytes.
    fn too_deep(&self, json: &Bytes) -> Result<Object, DecodeError> {
        let shallow: Shallow = serde_json::from_slice(json)?;
        let m = shallow.metadata;
        let meta = Meta {
            name: m.name.map(Cow::Owned),
            namespace: m.namespace.map(Cow::Owned),
            uid: m.uid.map(Cow::Owned),
            resource_version: m.resource_version.map(Cow::Owned),
            ..Meta::default()
        };
        let reference = reference(&meta)?;
        Ok(Object { reference, json: Bytes::new(), fingerprint: xxhash_rust::xxh3::xxh3_128(json), truncated: true })
    }
}

/// The object's identity from its metadata.
fn reference(meta: &Meta) -> Result<ObjectRef, ObjectError> {
    let name = meta.name.as_deref().unwrap_or_default();
    let namespace = meta.namespace.as_deref().map(str::to_string);
    let missing = |field| ObjectError::MissingField {
        key: match &namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        },
        field,
    };
    if name.is_empty() {
        return Err(missing("name"));
    }
    let uid = meta.uid.as_deref().ok_or_else(|| missing("uid"))?;
    let resource_version = meta.resource_version.as_deref().ok_or_else(|| missing("resourceVersion"))?;
    Ok(ObjectRef { namespace, name: name.to_string(), uid: uid.to_string(), resource_version: resource_version.to_string() })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use serde_json::{Map, json};

    use super::*;
    use crate::config::{FieldPath, RedactAction};
    use crate::json::ALWAYS_IGNORED;
    use crate::json::strategies::{any_json, key, text};
    use crate::model::fixtures::{configmaps, deployments};
    use crate::redact::Redaction;

    fn secrets() -> ResourceType {
        ResourceType { group: String::new(), version: "v1".into(), kind: "Secret".into(), plural: "secrets".into(), namespaced: true }
    }

    fn decoder(resource: &ResourceType, ignore_fields: &[&str], redactor: Redactor) -> Decoder {
        let ignore_fields: Vec<String> = ignore_fields.iter().map(|s| s.to_string()).collect();
        let ignored: Vec<String> = ALWAYS_IGNORED.iter().map(|s| s.to_string()).chain(ignore_fields.iter().cloned()).collect();
        Decoder::new(resource, Scanner::new(&ignored, &[]).unwrap(), &ignore_fields, redactor)
    }

    /// A redactor whose one field rule matches nothing: every object takes the tree path
    /// and nothing in it changes but managedFields.
    fn tree_only() -> Redactor {
        let rules = vec![(FieldPath::parse("/nothing/here").unwrap(), RedactAction::Drop)];
        Arc::new(Redaction::with_rules(rules)).redactor("test")
    }

    /// JSON as the API server writes it (compact, Go's escapes).
    fn wire(value: &Value) -> Bytes {
        Fingerprinter::new(&[]).serialize(value).json
    }

    #[test]
    fn list_items_get_their_type_first_and_secrets_among_them_are_redacted() {
        // As an item of a list response: no apiVersion, no kind.
        let item = json!({"metadata": {"name": "db", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "data": {"password": "aHVudGVyMg=="}});
        let obj = decoder(&secrets(), &[], Redactor::default()).decode(&wire(&item)).unwrap();
        let v = obj.value().unwrap();
        assert_eq!(v.as_object().unwrap().keys().take(2).collect::<Vec<_>>(), ["kind", "apiVersion"]);
        assert_eq!((v["apiVersion"].as_str(), v["kind"].as_str()), (Some("v1"), Some("Secret")));
        assert_ne!(v["data"]["password"], "aHVudGVyMg==", "redacted: {v}");
        let configmap = json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "data": {"k": "v"}});
        let obj = decoder(&configmaps(), &[], Redactor::default()).decode(&wire(&configmap)).unwrap();
        assert_eq!(
            &obj.json[..],
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"ns","uid":"u","resourceVersion":"1"},"data":{"k":"v"}}"#
        );
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "uid": "u", "resourceVersion": "2"}});
        let obj = decoder(&deployments(), &[], Redactor::default()).decode(&wire(&deployment)).unwrap();
        assert_eq!(&obj.json[..], &wire(&deployment)[..], "a watch event's object is shipped as it came");
    }

    /// `depth` arrays nested in one another around `leaf`.
    fn nested(depth: usize, leaf: &str) -> String {
        format!("{}{leaf}{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// The API server accepts objects nested 1,000 levels (managedFields mirror the nesting):
    /// one deeper than the JSON limit is decoded to its identity, marked `truncated`, its
    /// fingerprint over its whole bytes; never an error (which would leave it out, and a
    /// relist then take it for deleted).
    #[test]
    fn an_object_nested_deeper_than_the_json_limit_is_decoded_to_its_identity_marked_truncated() {
        let d = decoder(&configmaps(), &[], Redactor::default());
        let deep = |leaf: &str| {
            let spec = nested(1000, leaf);
            Bytes::from(format!(
                r#"{{"metadata":{{"name":"deep","namespace":"ns","uid":"u","resourceVersion":"9","managedFields":[{{"fieldsV1":{spec}}}]}},"spec":{spec}}}"#
            ))
        };
        let obj = d.decode(&deep("1")).unwrap();
        assert!(obj.truncated);
        assert_eq!(obj.reference, ObjectRef { namespace: Some("ns".into()), name: "deep".into(), uid: "u".into(), resource_version: "9".into() });
        assert_ne!(obj.fingerprint, d.decode(&deep("2")).unwrap().fingerprint, "a change deep inside is a change");
        let shallow = format!(r#"{{"metadata":{{"name":"ok","namespace":"ns","uid":"u","resourceVersion":"9"}},"spec":{}}}"#, nested(100, "1"));
        assert!(!d.decode(&Bytes::from(shallow)).unwrap().truncated, "100 levels are shipped whole");
        let nameless = format!(r#"{{"metadata":{{"namespace":"ns","uid":"u","resourceVersion":"9"}},"spec":{}}}"#, nested(1000, "1"));
        assert_eq!(d.decode(&Bytes::from(nameless)).unwrap_err().to_string(), "object ns/ has no metadata.name");
    }

    #[test]
    fn an_object_with_only_one_of_kind_and_api_version_gets_the_other() {
        let half = json!({"kind": "Deployment", "metadata": {"name": "d", "uid": "u", "resourceVersion": "2"}});
        let v = decoder(&deployments(), &[], Redactor::default()).decode(&wire(&half)).unwrap().value().unwrap();
        assert_eq!((v["kind"].as_str(), v["apiVersion"].as_str()), (Some("Deployment"), Some("apps/v1")));
    }

    #[test]
    fn an_object_without_uid_or_with_broken_json_is_an_error_naming_it() {
        let d = decoder(&configmaps(), &[], Redactor::default());
        let e = d.decode(&Bytes::from_static(br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1"}}"#)).unwrap_err().to_string();
        assert_eq!(e, "object ns/a has no metadata.uid");
        let e = d.decode(&Bytes::from_static(br#"{"metadata":{"name":"a","#)).unwrap_err().to_string();
        assert!(e.starts_with("invalid JSON at byte"), "{e}");
        let e = d.decode(&Bytes::from_static(br#"{"metadata":{"name":7}}"#)).unwrap_err().to_string();
        assert_eq!(e, "metadata.name is a number, expected a string");
    }

    #[test]
    fn managed_fields_are_cut_unless_redaction_is_off_and_never_change_the_fingerprint() {
        let with = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a", "uid": "u", "resourceVersion": "1", "managedFields": [{"manager": "m"}], "labels": {"x": "y"}}});
        let mut without = with.clone();
        without["metadata"].as_object_mut().unwrap().shift_remove("managedFields");
        let d = decoder(&configmaps(), &[], Redactor::default());
        let (a, b) = (d.decode(&wire(&with)).unwrap(), d.decode(&wire(&without)).unwrap());
        assert_eq!(a.json, b.json);
        assert_eq!(&a.json[..], &wire(&without)[..]);
        assert_eq!(a.fingerprint, b.fingerprint);
        let off = Arc::new(Redaction::off()).redactor("test");
        let kept = decoder(&configmaps(), &[], off).decode(&wire(&with)).unwrap();
        assert_eq!(&kept.json[..], &wire(&with)[..], "redact = false ships managedFields");
        assert_eq!(kept.fingerprint, a.fingerprint);
    }

    /// Kubernetes-shaped objects with members in any order, with or without their type,
    /// managedFields, status and an ignored annotation.
    fn object() -> impl Strategy<Value = Value> {
        (
            text(),
            prop::option::of(text()),
            prop::option::of(any_json()),
            prop::option::of(any_json()),
            prop::collection::vec((key(), any_json()), 0..4),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(name, namespace, managed, status, members, typed, annotated)| {
                let mut meta = Map::new();
                meta.insert("name".into(), format!("n{name}").into());
                if let Some(ns) = namespace {
                    meta.insert("namespace".into(), ns.into());
                }
                meta.insert("uid".into(), "u-1".into());
                meta.insert("resourceVersion".into(), "42".into());
                if let Some(m) = managed {
                    meta.insert("managedFields".into(), m);
                }
                if annotated {
                    meta.insert("annotations".into(), json!({"example.com/note": "n", "keep": "k"}));
                }
                let mut object = Map::new();
                if typed {
                    object.insert("kind".into(), "Widget".into());
                    object.insert("apiVersion".into(), "example.com/v1".into());
                }
                object.insert("metadata".into(), Value::Object(meta));
                for (k, v) in members {
                    if !matches!(k.as_str(), "kind" | "apiVersion" | "metadata") {
                        object.insert(k, v);
                    }
                }
                if let Some(s) = status {
                    object.insert("status".into(), s);
                }
                Value::Object(object)
            })
    }

    fn widgets() -> ResourceType {
        ResourceType { group: "example.com".into(), version: "v1".into(), kind: "Widget".into(), plural: "widgets".into(), namespaced: true }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The raw-bytes path and the tree path ship the same bytes with the same
        /// fingerprint, whatever the object holds.
        #[test]
        fn the_raw_path_and_the_tree_path_agree(value in object()) {
            let ignored = ["/status", "/metadata/annotations/example.com~1note"];
            let raw = decoder(&widgets(), &ignored, Redactor::default()).decode(&wire(&value)).unwrap();
            let tree = decoder(&widgets(), &ignored, tree_only()).decode(&wire(&value)).unwrap();
            prop_assert_eq!(&raw.json[..], &tree.json[..]);
            prop_assert_eq!(raw.fingerprint, tree.fingerprint);
            prop_assert_eq!(raw.reference, tree.reference);
            // The fingerprint leaves out exactly the ignored fields.
            let mut bare = value.clone();
            let fields = bare.as_object_mut().unwrap();
            fields.shift_remove("status");
            let meta = fields.get_mut("metadata").unwrap().as_object_mut().unwrap();
            meta.insert("resourceVersion".into(), "43".into());
            if let Some(Value::Object(a)) = meta.get_mut("annotations") {
                a.shift_remove("example.com/note");
            }
            let again = decoder(&widgets(), &ignored, Redactor::default()).decode(&wire(&bare)).unwrap();
            prop_assert_eq!(again.fingerprint, raw.fingerprint);
        }
    }
}
