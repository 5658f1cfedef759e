//! Redaction, applied as soon as an object is decoded: nothing unredacted goes further.

use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::config::{Config, DigestKeyError, FieldPath, KEY_FIX, RedactAction, ResourceConfig, Segment, read_digest_key};
use crate::telemetry::meters::RedactionMeters;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a `mask` rule puts in place of a value, and what a Secret's values become without a
/// digest key: the mask `print-config` shows for secrets.
const MASK: &str = "***";

#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    #[error("redaction.digest_key_file: {source}; fix: {KEY_FIX}")]
    DigestKey {
        #[source]
        source: DigestKeyError,
    },
}

/// The key of keyed digests: HMAC-SHA256 with the key already absorbed, cloned per digest.
#[derive(Clone)]
pub struct DigestKey(Hmac<Sha256>);

impl DigestKey {
    pub fn new(key: &[u8]) -> DigestKey {
        DigestKey(Hmac::new_from_slice(key).expect("HMAC takes keys of any length"))
    }

    /// Reads the key file once; errors name the setting and the file, never the content.
    pub fn from_file(path: &Path) -> Result<DigestKey, RedactError> {
        read_digest_key(path).map(|key| DigestKey::new(&key)).map_err(|source| RedactError::DigestKey { source })
    }
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(***)")
    }
}

/// How one resource's objects are redacted: built once at start-up, shared by its watches.
#[derive(Debug, Clone)]
pub struct Redaction {
    /// The built-in redaction (`redact`): managedFields, Secret values.
    builtin: bool,
    rules: Vec<(FieldPath, RedactAction)>,
    key: Option<DigestKey>,
}

impl Default for Redaction {
    /// The built-in redaction only, without a key: Secret values masked.
    fn default() -> Redaction {
        Redaction { builtin: true, rules: Vec::new(), key: None }
    }
}

/// The redaction of each of `config.resources`, in order: the digest key read once. Without
/// a key, Secret values are masked, never digested (an unkeyed digest of a short value is
/// recovered by hashing guesses): a warning says so once when a Secret is watched. `hash`
/// rules need a key (the configuration is refused without one).
pub fn for_resources(config: &Config) -> Result<Vec<Arc<Redaction>>, RedactError> {
    let key = config.redaction.digest_key_file.as_deref().map(DigestKey::from_file).transpose()?;
    let mut out = Vec::new();
    for rc in &config.resources {
        out.push(Arc::new(Redaction::new(rc, key.clone())));
    }
    if key.is_none() && config.resources.iter().any(redacts_secrets) {
        tracing::warn!(
            "Secret values are shipped as \"***\" (no digest key): a change of a Secret's values alone ships no event; set redaction.digest_key_file for keyed digests that show when a value changes"
        );
    }
    Ok(out)
}

impl Redaction {
    fn new(rc: &ResourceConfig, key: Option<DigestKey>) -> Redaction {
        let rules = rc.redact_fields.iter().map(|r| (r.path.clone(), r.action)).collect();
        Redaction { builtin: rc.redact, rules, key }
    }

    /// The redactor of one watch of `resource` (its metric label), with the counter of
    /// each rule's action registered once.
    pub fn redactor(self: &Arc<Self>, resource: &str) -> Redactor {
        let counted = RedactionMeters::new(resource, self.rules.iter().map(|(_, action)| action.as_str()));
        Redactor { redaction: self.clone(), counted }
    }
}

#[cfg(test)]
impl Redaction {
    /// The built-in redaction and these field rules, without a key.
    pub(crate) fn with_rules(rules: Vec<(FieldPath, RedactAction)>) -> Redaction {
        Redaction { builtin: true, rules, key: None }
    }

    /// No redaction at all (`redact = false`, no rules).
    pub(crate) fn off() -> Redaction {
        Redaction { builtin: false, rules: Vec::new(), key: None }
    }
}

/// Whether `rc`'s built-in redaction covers Secret values.
fn redacts_secrets(rc: &ResourceConfig) -> bool {
    rc.redact && rc.group.is_empty() && rc.kind == "Secret"
}

/// A resource's redaction with its counters, for one watch.
pub struct Redactor {
    redaction: Arc<Redaction>,
    /// Fields redacted by each rule.
    counted: RedactionMeters,
}

impl Default for Redactor {
    /// The built-in redaction without a key.
    fn default() -> Redactor {
        Redactor { redaction: Arc::default(), counted: RedactionMeters::default() }
    }
}

impl Redactor {
    /// Whether redaction may change an object of this kind and apiVersion beyond cutting
    /// `metadata.managedFields` (a splice does that): a core Secret under the built-in
    /// redaction, or any object when field rules are set. Such objects take the tree path.
    pub fn changes(&self, kind: &str, api_version: &str) -> bool {
        let r = &*self.redaction;
        (r.builtin && is_secret(kind, api_version)) || !r.rules.is_empty()
    }

    /// Whether `metadata.managedFields` is cut (the built-in redaction).
    pub fn cuts_managed_fields(&self) -> bool {
        self.redaction.builtin
    }

    /// Redacts `value` in place: the built-in redaction (when on), then each field rule.
    pub fn redact(&self, value: &mut Value) {
        let r = &*self.redaction;
        let key = r.key.as_ref();
        if r.builtin {
            redact(value, key);
        }
        for (rule, (path, action)) in r.rules.iter().enumerate() {
            let n = apply(value, path.segments(), *action, key);
            if n > 0 {
                self.counted.redacted(rule, n);
            }
        }
    }
}

/// Removes `metadata.managedFields`; for a core Secret, replaces every value of `data` and
/// `stringData`, and the last-applied annotation, by its keyed digest (consumers see that a
/// value changed, and cannot guess it without the key), or by the mask without a key.
fn redact(value: &mut Value, key: Option<&DigestKey>) {
    let secret = is_secret(value.get("kind").and_then(Value::as_str).unwrap_or(""), value.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
    let Some(obj) = value.as_object_mut() else { return };
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.shift_remove("managedFields");
        if secret
            && let Some(Value::Object(annotations)) = meta.get_mut("annotations")
            && let Some(v) = annotations.get_mut(LAST_APPLIED)
        {
            *v = Value::String(hidden(v, key));
        }
    }
    if secret {
        for field in ["data", "stringData"] {
            if let Some(Value::Object(values)) = obj.get_mut(field) {
                digest_values(values, key);
            }
        }
    }
}

fn is_secret(kind: &str, api_version: &str) -> bool {
    kind == "Secret" && api_version == "v1"
}

fn digest_values(values: &mut Map<String, Value>, key: Option<&DigestKey>) {
    for v in values.values_mut() {
        *v = Value::String(hidden(v, key));
    }
}

/// Applies `action` to the fields of `value` at `path`; returns how many it redacted.
/// Allocates nothing where the path does not match.
fn apply(value: &mut Value, path: &[Segment], action: RedactAction, key: Option<&DigestKey>) -> u64 {
    let Some((segment, rest)) = path.split_first() else { return 0 };
    if !rest.is_empty() {
        return match (value, segment) {
            (Value::Object(map), Segment::Any) => map.values_mut().map(|v| apply(v, rest, action, key)).sum(),
            (Value::Array(items), Segment::Any) => items.iter_mut().map(|v| apply(v, rest, action, key)).sum(),
            (Value::Object(map), Segment::Key { name, .. }) => map.get_mut(name).map_or(0, |v| apply(v, rest, action, key)),
            (Value::Array(items), Segment::Key { index: Some(i), .. }) => items.get_mut(*i).map_or(0, |v| apply(v, rest, action, key)),
            _ => 0,
        };
    }
    // The last segment: act on the matched members or items of `value`.
    let replace = |v: &mut Value| {
        *v = Value::String(match action {
            RedactAction::Mask => MASK.to_string(),
            _ => hidden(v, key),
        });
        1
    };
    match (value, segment, action) {
        (Value::Object(map), Segment::Any, RedactAction::Drop) => std::mem::take(map).len() as u64,
        (Value::Array(items), Segment::Any, RedactAction::Drop) => std::mem::take(items).len() as u64,
        (Value::Object(map), Segment::Any, _) => map.values_mut().map(replace).sum(),
        (Value::Array(items), Segment::Any, _) => items.iter_mut().map(replace).sum(),
        (Value::Object(map), Segment::Key { name, .. }, RedactAction::Drop) => map.shift_remove(name).is_some() as u64,
        (Value::Object(map), Segment::Key { name, .. }, _) => map.get_mut(name).map_or(0, replace),
        (Value::Array(items), Segment::Key { index: Some(i), .. }, RedactAction::Drop) if *i < items.len() => {
            items.remove(*i);
            1
        }
        (Value::Array(items), Segment::Key { index: Some(i), .. }, _) => items.get_mut(*i).map_or(0, replace),
        _ => 0,
    }
}

/// What a Secret's value, or a `hash` rule's, becomes: its keyed digest, or without a key
/// the mask. Never an unkeyed digest: anyone can hash guesses of a short value (a PIN, a
/// password from a dictionary) until one matches.
fn hidden(v: &Value, key: Option<&DigestKey>) -> String {
    key.map_or_else(|| MASK.to_string(), |key| digest(v, key))
}

/// The keyed digest of a value, `hmac-sha256:<hex>`: of a string's bytes, of any other
/// value's JSON text.
fn digest(v: &Value, DigestKey(mac): &DigestKey) -> String {
    let text;
    let bytes = match v {
        Value::String(s) => s.as_bytes(),
        other => {
            text = other.to_string();
            text.as_bytes()
        }
    };
    let mut mac = mac.clone();
    mac.update(bytes);
    crate::hex::encode("hmac-sha256:", &mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redaction(rules: &[(&str, RedactAction)], key: Option<&[u8]>) -> Redactor {
        let rules = rules.iter().map(|(p, a)| (FieldPath::parse(p).unwrap(), *a)).collect();
        Arc::new(Redaction { builtin: true, rules, key: key.map(DigestKey::new) }).redactor("test")
    }

    const KEY: &[u8] = b"0123456789abcdef";

    /// How many fields `path` redacts in `value` with `action` (a `hash` with `KEY`).
    fn count(value: &mut Value, path: &str, action: RedactAction) -> u64 {
        apply(value, FieldPath::parse(path).unwrap().segments(), action, Some(&DigestKey::new(KEY)))
    }

    #[test]
    fn without_a_key_secret_values_and_last_applied_are_masked_never_digested() {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "pin", "annotations": {LAST_APPLIED: "{\"data\":{\"pin\":\"MTIzNA==\"}}"}},
            "data": {"pin": "MTIzNA=="},
            "stringData": {"word": "hunter2"},
        });
        Redactor::default().redact(&mut s);
        // Before, "sha256:<hex of MTIzNA==>": a 4-digit PIN was found by hashing the 10,000 guesses.
        assert_eq!(s["data"], json!({"pin": MASK}));
        assert_eq!(s["stringData"], json!({"word": MASK}));
        assert_eq!(s["metadata"]["annotations"][LAST_APPLIED], MASK);
        assert!(!s.to_string().contains("sha256"), "{s}");
    }

    #[test]
    fn secret_values_and_last_applied_become_keyed_digests() {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "managedFields": [{"manager": "kubectl"}],
                         "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}", "keep": "me"}},
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "plain-secret"},
        });
        redaction(&[], Some(KEY)).redact(&mut s);
        let text = s.to_string();
        assert!(!text.contains("aHVudGVyMg") && !text.contains("plain-secret"), "{text}");
        assert!(s["metadata"].get("managedFields").is_none());
        assert_eq!(s["metadata"]["annotations"]["keep"], "me");
        let d = s["data"]["password"].as_str().unwrap();
        assert!(d.starts_with("hmac-sha256:") && d.len() == 76, "{d}");
        assert!(s["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap().starts_with("hmac-sha256:"));
        // Same value, same digest: consumers can see whether a value changed.
        let mut again = json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": "aHVudGVyMg=="}});
        redaction(&[], Some(KEY)).redact(&mut again);
        assert_eq!(again["data"]["password"], s["data"]["password"]);
    }

    #[test]
    fn other_kinds_only_lose_managed_fields() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"managedFields": [], "annotations": {LAST_APPLIED: "x"}}, "data": {"a": "b"}});
        Redactor::default().redact(&mut cm);
        assert_eq!(
            cm,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"annotations": {LAST_APPLIED: "x"}}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn digests_are_hex_of_hmac_sha256_with_the_key() {
        // RFC 4231 (test case 2) vector.
        let jefe = DigestKey::new(b"Jefe");
        assert_eq!(digest(&json!("what do ya want for nothing?"), &jefe), "hmac-sha256:5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        // Other values are digested as their JSON text, so that different values differ.
        assert_ne!(digest(&json!(1), &jefe), digest(&json!(2), &jefe));
        assert_eq!(digest(&json!({"a": 1}), &jefe), digest(&json!("{\"a\":1}"), &jefe));
        assert_eq!(format!("{jefe:?}"), "DigestKey(***)");
    }

    #[test]
    fn a_keyed_secret_digest_is_stable_and_differs_by_key() {
        let secret = || json!({"apiVersion": "v1", "kind": "Secret", "data": {"pin": "MTIzNA=="}});
        let digest_with = |key: &[u8]| {
            let mut s = secret();
            redaction(&[], Some(key)).redact(&mut s);
            s["data"]["pin"].as_str().unwrap().to_string()
        };
        let a = digest_with(KEY);
        assert!(a.starts_with("hmac-sha256:") && a.len() == 12 + 64, "{a}");
        assert_eq!(a, digest_with(KEY), "same key, same value: same digest (restarts, replicas)");
        assert_ne!(a, digest_with(b"fedcba9876543210"));
    }

    #[test]
    fn wildcards_cover_every_array_item_and_object_member() {
        let mut d = json!({"spec": {"containers": [
            {"name": "a", "env": [{"name": "A", "value": "s1"}, {"name": "B", "value": "s2"}]},
            {"name": "b", "env": [{"name": "C", "valueFrom": {"secretKeyRef": {}}}]},
            {"name": "c"},
        ]}});
        assert_eq!(count(&mut d, "/spec/containers/*/env/*/value", RedactAction::Mask), 2);
        assert_eq!(d["spec"]["containers"][0]["env"][1], json!({"name": "B", "value": MASK}));
        assert_eq!(d["spec"]["containers"][1]["env"][0], json!({"name": "C", "valueFrom": {"secretKeyRef": {}}}));
        assert_eq!(count(&mut d, "/spec/containers/*/env", RedactAction::Drop), 2);
        assert_eq!(d["spec"]["containers"], json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));

        let mut cm = json!({"data": {"a": "1", "b": "2"}, "binaryData": {}});
        assert_eq!(count(&mut cm, "/data/*", RedactAction::Hash), 2);
        assert!(cm["data"]["a"].as_str().unwrap().starts_with("hmac-sha256:"));
        assert_eq!(count(&mut cm, "/binaryData/*", RedactAction::Drop), 0);
        assert_eq!(count(&mut cm, "/data/*", RedactAction::Drop), 2);
        assert_eq!(cm, json!({"data": {}, "binaryData": {}}));
        // A wildcard in the middle walks the members of an object, too.
        let mut m = json!({"metadata": {"annotations": {"x": "1"}, "labels": {"x": "2", "y": "3"}}});
        assert_eq!(count(&mut m, "/metadata/*/x", RedactAction::Drop), 2);
        assert_eq!(m, json!({"metadata": {"annotations": {}, "labels": {"y": "3"}}}));
    }

    #[test]
    fn escapes_name_members_with_slashes_and_tildes() {
        let mut d = json!({"metadata": {"annotations": {"example.com/token": "t", "a~b": "u", "example.com": {"token": "v"}}}});
        assert_eq!(count(&mut d, "/metadata/annotations/example.com~1token", RedactAction::Drop), 1);
        assert_eq!(count(&mut d, "/metadata/annotations/a~0b", RedactAction::Mask), 1);
        assert_eq!(d, json!({"metadata": {"annotations": {"a~b": MASK, "example.com": {"token": "v"}}}}));
    }

    #[test]
    fn missing_paths_and_other_types_are_left_alone() {
        let original = json!({"spec": {"replicas": 3, "list": [1, 2], "text": "s"}});
        let mut d = original.clone();
        for path in [
            "/status",
            "/spec/missing/x",
            "/spec/replicas/x",
            "/spec/text/*",
            "/spec/list/x",
            "/spec/list/2",
            "/spec/list/01",
            "/spec/list/-",
            "/spec/replicas/*/x",
        ] {
            for action in RedactAction::ALL {
                assert_eq!(count(&mut d, path, action), 0, "{path} {action:?}");
            }
        }
        assert_eq!(d, original);
        // An index names an array item, and a member whose name is digits.
        assert_eq!(count(&mut d, "/spec/list/0", RedactAction::Drop), 1);
        assert_eq!(d["spec"]["list"], json!([2]));
        let mut m = json!({"data": {"0": "zero"}});
        assert_eq!(count(&mut m, "/data/0", RedactAction::Mask), 1);
        assert_eq!(m, json!({"data": {"0": MASK}}));
    }

    #[test]
    fn rules_apply_after_the_built_in_redaction_even_when_it_is_off() {
        let rules = [("/data/password", RedactAction::Hash), ("/metadata/annotations/token", RedactAction::Drop)];
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "managedFields": [], "annotations": {"token": "t"}}, "data": {"password": "p"}});
        let mut r = redaction(&rules, Some(KEY));
        r.redact(&mut cm);
        assert!(cm["data"]["password"].as_str().unwrap().starts_with("hmac-sha256:"), "{cm}");
        assert_eq!(cm["metadata"], json!({"name": "c", "annotations": {}}));
        Arc::get_mut(&mut r.redaction).unwrap().builtin = false;
        let mut cm = json!({"metadata": {"managedFields": [], "annotations": {"token": "t"}}});
        r.redact(&mut cm);
        assert_eq!(cm, json!({"metadata": {"managedFields": [], "annotations": {}}}));
    }
}
