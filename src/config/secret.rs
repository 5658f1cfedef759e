//! Secrets in the configuration: Debug never shows them, a value of the wrong type is
//! refused without echoing it, `print-config` masks them, and `*_file` settings are read
//! at start-up.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// An inline secret (a password or token), from the file or an environment variable.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the client that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What `print-config` shows instead.
    pub fn masked() -> Secret {
        Secret("***".into())
    }

    /// Reads a secret file: its content without the trailing newline (`echo secret > file`
    /// adds one); other whitespace is part of the secret. The error names `key` and the
    /// file, never the content.
    pub fn from_file(key: &str, file: &Path) -> Result<Secret, SecretFileError> {
        regular_file(file)
            .and_then(|_| std::fs::read_to_string(file))
            .map(|s| Secret(s.trim_end_matches(['\n', '\r']).to_string()))
            .map_err(|source| SecretFileError { key: key.into(), file: file.into(), source })
    }
}

/// A secret file that could not be read: its key and path, never its content.
#[derive(Debug, thiserror::Error)]
#[error("{key}: cannot read {}: {source}", file.display())]
pub struct SecretFileError {
    pub key: String,
    pub file: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The metadata of `path` if it is a regular file (after symbolic links, as Secret volumes
/// use), else an error. Checked before a file of the configuration is opened: opening a
/// FIFO blocks until a writer comes, and a device may never end.
pub(crate) fn regular_file(path: &Path) -> std::io::Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() { Ok(meta) } else { Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")) }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A string the schema marks `writeOnly`: editors and tools know not to show it.
impl JsonSchema for Secret {
    fn schema_name() -> Cow<'static, str> {
        "Secret".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "writeOnly": true})
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        d.deserialize_any(SecretVisitor)
    }
}

struct SecretVisitor;

/// figment reads `DELTASHIP_..._PASSWORD=123456` as a number: refused, without the value
/// (serde's own message would print it). Inside a sink the key path is lost (its `type`
/// tag buffers the table), so the message says what kind of key it is.
fn not_a_string<E: de::Error>(what: &str) -> Result<Secret, E> {
    Err(E::custom(format!(
        "a password or token is {what}, not a string (the value is not shown); quote it, e.g. DELTASHIP_SINK__SASL__PASSWORD='\"...\"', or use its *_file setting"
    )))
}

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret(v.to_string()))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secret, E> {
        not_a_string("a boolean")
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
        not_a_string("a number")
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
        not_a_string("a number")
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Secret, E> {
        not_a_string("a number")
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Secret, E> {
        not_a_string("a number")
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
        not_a_string("a number")
    }
    fn visit_char<E: de::Error>(self, v: char) -> Result<Secret, E> {
        Ok(Secret(v.to_string()))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        not_a_string("a list")
    }
    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        not_a_string("a table")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_and_wrong_types_are_refused_without_the_value() {
        let s: Secret = serde_json::from_value(serde_json::json!("hunter2")).unwrap();
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(format!("{s:?}"), "***");
        let e = serde_json::from_value::<Secret>(serde_json::json!(271828)).unwrap_err().to_string();
        assert!(e.contains("a number") && !e.contains("271828"), "{e}");
    }

    #[test]
    fn files_lose_their_trailing_newline_only() {
        let f = std::env::temp_dir().join(format!("deltaship-secret-{}", std::process::id()));
        std::fs::write(&f, " pa ss\r\n").unwrap();
        assert_eq!(Secret::from_file("k", &f).unwrap().expose(), " pa ss");
        std::fs::remove_file(&f).unwrap();
        let e = Secret::from_file("sink.auth.password_file", &f).unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("sink.auth.password_file: cannot read"), "{e}");
    }
}
