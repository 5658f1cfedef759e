//! Redaction settings: the field rules of a resource (`resources[].redact_fields`) and the
//! digest key (`redaction`), their parsing and their validation.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::problem::{Problem, problem};
use super::secret::regular_file;

/// Keyed digests of redacted values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedactionConfig {
    /// A file holding the key of the digests (HMAC-SHA256, shown as `hmac-sha256:<hex>`),
    /// e.g. mounted from a Kubernetes Secret; read once at start-up, at least 16 bytes, a
    /// trailing newline trimmed. Every replica and restart must use the same key for equal
    /// values to keep equal digests. Required by `hash` rules. Default: none: Secret values
    /// are shipped as `***`, no digest (an unkeyed digest of a short value is recovered by
    /// hashing guesses), so a change of a Secret's values alone ships no event (a warning
    /// is logged at start-up).
    pub digest_key_file: Option<PathBuf>,
}

/// One field rule: the fields at `path` get `action`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedactField {
    /// An RFC 6901 JSON pointer into the object (`~1` for `/`, `~0` for `~`); a segment
    /// that is exactly `*` stands for every item of an array or member of an object.
    pub path: FieldPath,
    /// `drop` (remove the field), `mask` (replace its value by `"***"`) or `hash` (replace
    /// it by its keyed digest, as Secret values; needs `redaction.digest_key_file`).
    pub action: RedactAction,
}

/// What a field rule does to a matched field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RedactAction {
    Drop,
    Mask,
    Hash,
}

impl RedactAction {
    pub const ALL: [RedactAction; 3] = [RedactAction::Drop, RedactAction::Mask, RedactAction::Hash];

    pub fn as_str(self) -> &'static str {
        match self {
            RedactAction::Drop => "drop",
            RedactAction::Mask => "mask",
            RedactAction::Hash => "hash",
        }
    }
}

/// One segment of a parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// `*`: every item of an array, every member of an object.
    Any,
    /// A member name (unescaped); `index` when it is also an array index (RFC 6901: `0` or
    /// digits without a leading zero).
    Key { name: String, index: Option<usize> },
}

impl Segment {
    fn matches(&self, name: &str) -> bool {
        match self {
            Segment::Any => true,
            Segment::Key { name: n, .. } => n == name,
        }
    }
}

/// A path of a field rule, parsed when the configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    /// As written, for `print-config`.
    text: String,
    segments: Vec<Segment>,
}

/// Why a path was refused: the problem and its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    pub problem: String,
    pub fix: &'static str,
}

const PATH_EXAMPLE: &str = "e.g. `/spec/template/spec/containers/*/env` or `/metadata/annotations/example.com~1token`";

/// Fields that identify an object: redacting them (or a field above them) would ship
/// events that neither consumers nor `deltaship rebuild` can attribute.
const IDENTITY: [&[&str]; 6] =
    [&["apiVersion"], &["kind"], &["metadata", "name"], &["metadata", "namespace"], &["metadata", "uid"], &["metadata", "resourceVersion"]];

impl FieldPath {
    pub fn parse(path: &str) -> Result<FieldPath, PathError> {
        let refuse = |problem: String, fix| Err(PathError { problem, fix });
        if path.is_empty() {
            return refuse("is empty".into(), "give a JSON pointer to a field below the object's root, e.g. `/spec/template/spec/containers/*/env`");
        }
        let Some(rest) = path.strip_prefix('/') else {
            return refuse(format!("`{path}` is not a JSON pointer"), "start it with `/`, e.g. `/spec/template/spec/containers/*/env`");
        };
        let mut segments = Vec::new();
        for raw in rest.split('/') {
            if raw.is_empty() {
                return refuse(format!("`{path}` has an empty segment"), "remove the doubled or trailing `/`");
            }
            if raw == "*" {
                segments.push(Segment::Any);
                continue;
            }
            let Some(name) = unescape(raw) else {
                return refuse(
                    format!("`{path}` has a `~` not followed by `0` or `1`"),
                    "write `~0` for `~` and `~1` for `/`, e.g. `/metadata/annotations/example.com~1token`",
                );
            };
            let index = (name.bytes().all(|b| b.is_ascii_digit()) && (name == "0" || !name.starts_with('0'))).then(|| name.parse().ok()).flatten();
            segments.push(Segment::Key { name, index });
        }
        let p = FieldPath { text: path.into(), segments };
        if let Some(id) = IDENTITY.iter().find(|id| p.covers(id)) {
            return refuse(
                format!("`{path}` would redact /{}, which identifies the object", id.join("/")),
                "name a field that does not contain apiVersion, kind, or metadata's name, namespace, uid or resourceVersion, e.g. `/metadata/annotations/example.com~1token`",
            );
        }
        Ok(p)
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether the field at `fields` is at or below a field this path matches.
    fn covers(&self, fields: &[&str]) -> bool {
        self.segments.len() <= fields.len() && self.segments.iter().zip(fields).all(|(s, f)| s.matches(f))
    }
}

impl Serialize for FieldPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl JsonSchema for FieldPath {
    fn schema_name() -> Cow<'static, str> {
        "FieldPath".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": "^/", "description": format!("An RFC 6901 JSON pointer, `*` for every item or member, {PATH_EXAMPLE}.")})
    }
}

impl<'de> Deserialize<'de> for FieldPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FieldPath, D::Error> {
        super::parse::parse_str(d, "a JSON pointer such as `/spec/template/spec/containers/*/env`", |v| {
            FieldPath::parse(v).map_err(|e| (e.problem, format!("{} ({PATH_EXAMPLE})", e.fix)))
        })
    }
}

/// `~1` to `/` and `~0` to `~` (in that order, as RFC 6901 says); None for any other `~`.
fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return None,
        }
    }
    Some(out)
}

/// The digest key file (read to check it; the bridge reads it again when it starts and
/// keeps it). Field rules parsed when the configuration was loaded.
impl RedactionConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        if let Some(path) = &self.digest_key_file
            && let Err(e) = read_digest_key(path)
        {
            out.push(problem("redaction.digest_key_file", e.to_string(), KEY_FIX));
        }
    }
}

/// How to make a good key file, for every error about one.
pub const KEY_FIX: &str =
    "give the path of a regular file holding at least 16 random bytes, e.g. from `openssl rand -hex 32`, mounted from a Kubernetes Secret";

/// The shortest accepted key, in bytes: a shorter key could itself be guessed.
const MIN_KEY_BYTES: usize = 16;

/// Why a digest key file was refused: the file and what is wrong, never the content.
#[derive(Debug, thiserror::Error)]
pub enum DigestKeyError {
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("{} holds {bytes} bytes, fewer than {MIN_KEY_BYTES}", path.display())]
    TooShort { path: PathBuf, bytes: usize },
}

/// The file at `path` is a regular file (after symbolic links, as Secret volumes use) that
/// is not empty. Its metadata only: a FIFO or a device is refused before it is opened.
fn key_file(path: &Path) -> Result<(), DigestKeyError> {
    let meta = regular_file(path).map_err(|source| DigestKeyError::Unreadable { path: path.into(), source })?;
    if meta.len() == 0 {
        return Err(DigestKeyError::Empty { path: path.into() });
    }
    Ok(())
}

/// Reads the digest key at `path`: its bytes without a trailing newline.
pub fn read_digest_key(path: &Path) -> Result<Vec<u8>, DigestKeyError> {
    key_file(path)?;
    let mut key = std::fs::read(path).map_err(|source| DigestKeyError::Unreadable { path: path.into(), source })?;
    while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        key.pop();
    }
    if key.len() < MIN_KEY_BYTES {
        return Err(DigestKeyError::TooShort { path: path.into(), bytes: key.len() });
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::validate::validate;

    /// A fresh directory of this test process, for key files.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("deltaship-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn key(name: &str) -> Segment {
        Segment::Key { name: name.into(), index: None }
    }

    #[test]
    fn paths_parse_with_wildcards_escapes_and_indexes() {
        let p = FieldPath::parse("/spec/containers/*/env/0/a~1b~0c~01").unwrap();
        assert_eq!(
            p.segments(),
            [key("spec"), key("containers"), Segment::Any, key("env"), Segment::Key { name: "0".into(), index: Some(0) }, key("a/b~c~1"),]
        );
        // Leading zeros and signs are member names only (RFC 6901).
        assert_eq!(FieldPath::parse("/data/01").unwrap().segments()[1], key("01"));
        assert_eq!(FieldPath::parse("/data/-").unwrap().segments()[1], key("-"));
        assert_eq!(FieldPath::parse("/data/12").unwrap().segments()[1], Segment::Key { name: "12".into(), index: Some(12) });
    }

    #[test]
    fn bad_paths_say_what_is_wrong() {
        let problem = |p: &str| FieldPath::parse(p).unwrap_err().problem;
        assert_eq!(problem(""), "is empty");
        assert!(problem("spec/x").contains("not a JSON pointer"));
        assert!(problem("/spec//x").contains("empty segment"));
        assert!(problem("/spec/").contains("empty segment"));
        assert!(problem("/").contains("empty segment"));
        assert!(problem("/a~2b").contains("`~` not followed"));
        assert!(problem("/a~").contains("`~` not followed"));
    }

    #[test]
    fn paths_over_identity_fields_are_refused() {
        for p in ["/metadata", "/metadata/name", "/metadata/*", "/*", "/kind", "/metadata/uid"] {
            let e = FieldPath::parse(p).unwrap_err();
            assert!(e.problem.contains("identifies the object"), "{p}: {e:?}");
        }
        for p in ["/metadata/annotations", "/metadata/labels/*", "/metadata/name2", "/spec/*/name"] {
            assert!(FieldPath::parse(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn rules_that_do_not_parse_are_refused_with_the_fix_and_good_ones_serialize_as_written() {
        let rule = |path: &str, action: &str| serde_json::from_value::<RedactField>(serde_json::json!({"path": path, "action": action}));
        let e = rule("data", "hash").unwrap_err().to_string();
        assert!(e.contains("`data` is not a JSON pointer; fix: start it with `/`"), "{e}");
        let e = rule("/data", "wipe").unwrap_err().to_string();
        assert!(e.contains("wipe") && e.contains("drop"), "{e}");
        let r = rule("/data/*", "hash").unwrap();
        assert_eq!(r.action, RedactAction::Hash);
        assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::json!({"path": "/data/*", "action": "hash"}));
    }

    #[test]
    fn hash_rules_without_a_digest_key_are_refused_naming_the_rule() {
        let mut c: Config = serde_json::from_value(serde_json::json!({
            "resources": [
                {"version": "v1", "kind": "ConfigMap", "redact_fields": [{"path": "/data/a", "action": "mask"}, {"path": "/data/*", "action": "hash"}]},
                {"version": "v1", "kind": "Secret"},
            ],
        }))
        .unwrap();
        let problems = validate(&c);
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["resources[0].redact_fields[1].action"]);
        assert!(problems[0].problem.contains("without a digest key") && problems[0].fix.contains("redaction.digest_key_file"), "{:?}", problems[0]);
        let dir = scratch("redact-hash");
        let key = dir.join("key");
        std::fs::write(&key, "0123456789abcdef\n").unwrap();
        c.redaction.digest_key_file = Some(key);
        assert_eq!(validate(&c), []);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn key_file_mistakes_name_their_key() {
        let dir = scratch("redact-rules");
        let empty = dir.join("empty");
        std::fs::write(&empty, "").unwrap();
        let mut c: Config = serde_json::from_value(serde_json::json!({
            "resources": [{"version": "v1", "kind": "ConfigMap", "redact_fields": [{"path": "/data/*", "action": "hash"}]}],
            "redaction": {"digest_key_file": empty},
        }))
        .unwrap();
        let problems = validate(&c);
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["redaction.digest_key_file"]);
        assert!(problems[0].problem.ends_with("is empty"), "{:?}", problems[0]);
        c.redaction.digest_key_file = Some(dir.clone());
        assert!(validate(&c)[0].problem.contains("not a regular file"));
        c.redaction.digest_key_file = Some(dir.join("missing"));
        assert!(validate(&c)[0].problem.contains("No such file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_lose_a_trailing_newline_and_must_be_long_enough_without_being_shown() {
        let dir = scratch("redact-key");
        let file = dir.join("key");
        std::fs::write(&file, "0123456789abcdef0123\r\n").unwrap();
        assert_eq!(read_digest_key(&file).unwrap(), b"0123456789abcdef0123");
        std::fs::write(&file, "short-secret\n").unwrap();
        let e = read_digest_key(&file).unwrap_err();
        assert!(matches!(e, DigestKeyError::TooShort { bytes: 12, .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("12 bytes") && !e.contains("short-secret"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
