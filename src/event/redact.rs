//! Redaction, applied as soon as an object is decoded: nothing unredacted goes further.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes `metadata.managedFields`; for a core Secret, replaces every value of `data` and
/// `stringData`, and the last-applied annotation, by `sha256:<hex>` of the value, so that
/// consumers see that a value changed, never the value.
pub fn redact(value: &mut Value) {
    let is_secret = value.get("kind").and_then(Value::as_str) == Some("Secret")
        && value.get("apiVersion").and_then(Value::as_str) == Some("v1");
    let Some(obj) = value.as_object_mut() else { return };
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.remove("managedFields");
        if is_secret
            && let Some(Value::Object(annotations)) = meta.get_mut("annotations")
            && let Some(v) = annotations.get_mut(LAST_APPLIED)
        {
            *v = Value::String(digest(v));
        }
    }
    if is_secret {
        for field in ["data", "stringData"] {
            if let Some(Value::Object(values)) = obj.get_mut(field) {
                digest_values(values);
            }
        }
    }
}

fn digest_values(values: &mut Map<String, Value>) {
    for v in values.values_mut() {
        *v = Value::String(digest(v));
    }
}

fn digest(v: &Value) -> String {
    let bytes: &[u8] = match v {
        Value::String(s) => s.as_bytes(),
        _ => &[],
    };
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_and_last_applied_become_digests() {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "managedFields": [{"manager": "kubectl"}],
                         "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}", "keep": "me"}},
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "plain-secret"},
        });
        redact(&mut s);
        let text = s.to_string();
        assert!(!text.contains("aHVudGVyMg") && !text.contains("plain-secret"), "{text}");
        assert!(s["metadata"].get("managedFields").is_none());
        assert_eq!(s["metadata"]["annotations"]["keep"], "me");
        let d = s["data"]["password"].as_str().unwrap();
        assert!(d.starts_with("sha256:") && d.len() == 71, "{d}");
        // Same value, same digest: consumers can see whether a value changed.
        let mut again = json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": "aHVudGVyMg=="}});
        redact(&mut again);
        assert_eq!(again["data"]["password"], s["data"]["password"]);
    }

    #[test]
    fn other_kinds_only_lose_managed_fields() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"managedFields": [], "annotations": {LAST_APPLIED: "x"}}, "data": {"a": "b"}});
        redact(&mut cm);
        assert_eq!(cm, json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"annotations": {LAST_APPLIED: "x"}}, "data": {"a": "b"}}));
    }
}
