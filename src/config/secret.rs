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

/// Parts of query parameter names whose values are secrets (`token`, `access_token`,
/// `password`, `sig` of a shared access signature, `api_key`, ...): wider than the client
/// options' list (`mask_value`), as a URL's parameters follow no one's naming.
const SECRET_PARAM_PARTS: [&str; 10] = ["pass", "pwd", "secret", "token", "sig", "key", "auth", "credential", "session", "jwt"];

/// `text` (a URL, a comma-separated list of them, or a message that quotes them) with the
/// credentials of every `scheme://` URL in it replaced by `***`: the password of
/// `user:password@` (the user stays), a lone `token@`, and the values of query parameters
/// whose names say they are secrets. The one masking of URLs: `print-config`, `check`, error
/// messages and logs all show URLs through it.
pub fn mask_urls(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after.find(|c: char| c.is_whitespace() || matches!(c, ',' | '`' | '"' | '\'' | '<' | '>')).unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        mask_url(url, &mut out);
        rest = tail;
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Whether a `scheme://` URL in `text` carries credentials before its host.
pub fn has_userinfo(text: &str) -> bool {
    text.split("://").skip(1).any(|url| userinfo_end(url).is_some())
}

/// Where the userinfo of `url` (the part after `scheme://`) ends: its `@`, the last one
/// of the authority (a password may hold an unescaped `@`).
fn userinfo_end(url: &str) -> Option<usize> {
    let authority = &url[..url.find(['/', '?', '#', ',']).unwrap_or(url.len())];
    authority.rfind('@')
}

/// Writes `url` (after `scheme://`) to `out` with its credentials masked.
fn mask_url(url: &str, out: &mut String) {
    let url = match userinfo_end(url) {
        Some(at) => {
            if let Some((user, _)) = url[..at].split_once(':') {
                out.push_str(user);
                out.push(':');
            }
            out.push_str("***");
            &url[at..]
        }
        None => url,
    };
    let Some((path, query)) = url.split_once('?') else {
        out.push_str(url);
        return;
    };
    out.push_str(path);
    out.push('?');
    let (query, fragment) = query.split_once('#').map_or((query, None), |(q, f)| (q, Some(f)));
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((name, _)) if SECRET_PARAM_PARTS.iter().any(|p| name.to_ascii_lowercase().contains(p)) => {
                out.push_str(name);
                out.push_str("=***");
            }
            _ => out.push_str(pair),
        }
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
}

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

/// Keys of raw client options whose values are secrets (`sasl.oauthbearer.config` holds
/// the client's credentials).
const SECRET_KEY_PARTS: [&str; 6] = ["password", "secret", "token", "jaas", "key.pem", "oauthbearer.config"];

/// Returns `key`'s value, or a mask when the key names a secret.
pub fn mask_value(key: &str, value: &str) -> String {
    let key = key.to_ascii_lowercase();
    if SECRET_KEY_PARTS.iter().any(|p| key.contains(p)) { "***".into() } else { value.into() }
}

/// `text` with the value of every secret-named option among `options` (as `mask_value`
/// decides) replaced by `***`: for client errors, which may echo a value they refuse.
pub fn mask_secrets_in<'a>(text: &str, options: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    options
        .into_iter()
        .filter(|(key, value)| !value.is_empty() && mask_value(key, value) != *value)
        .fold(text.to_string(), |text, (_, value)| text.replace(value, "***"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_masked_inside_error_text() {
        let options = [("sasl.oauthbearer.client.secret", "s3cr3t"), ("ssl.key.password", ""), ("linger.ms", "5")];
        let text = "Invalid value \"s3cr3t\" for configuration property; linger.ms 5";
        assert_eq!(mask_secrets_in(text, options), "Invalid value \"***\" for configuration property; linger.ms 5");
    }

    #[test]
    fn debug_hides_and_wrong_types_are_refused_without_the_value() {
        let s: Secret = serde_json::from_value(serde_json::json!("hunter2")).unwrap();
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(format!("{s:?}"), "***");
        let e = serde_json::from_value::<Secret>(serde_json::json!(271828)).unwrap_err().to_string();
        assert!(e.contains("a number") && !e.contains("271828"), "{e}");
    }

    #[test]
    fn credentials_in_urls_are_masked_and_the_rest_is_kept() {
        let cases = [
            ("nats://user:PASSWORD@nats-0:4222", "nats://user:***@nats-0:4222"),
            ("nats://TOKEN@nats-0:4222", "nats://***@nats-0:4222"),
            ("http://user:p@ss@hooks.example.com/x?a=1", "http://user:***@hooks.example.com/x?a=1"),
            (
                "https://h.example.com/hook?token=T1&team=shop&access_token=T2&sig=S3&Password=P4&api_key=K5#frag",
                "https://h.example.com/hook?token=***&team=shop&access_token=***&sig=***&Password=***&api_key=***#frag",
            ),
            ("nats://a:PW1@n-0:4222, nats://TOK@n-1:4222,nats://n-2:4222", "nats://a:***@n-0:4222, nats://***@n-1:4222,nats://n-2:4222"),
            ("cannot connect to `nats://u:PW@h:1`: refused", "cannot connect to `nats://u:***@h:1`: refused"),
            ("http://hooks.example.com/a@b?x=1", "http://hooks.example.com/a@b?x=1"),
            ("kafka-0:9092,kafka-1:9092", "kafka-0:9092,kafka-1:9092"),
        ];
        for (url, masked) in cases {
            assert_eq!(mask_urls(url), masked, "{url}");
        }
        assert!(matches!(mask_urls("kafka-0:9092"), Cow::Borrowed(_)));
        assert!(has_userinfo("nats://n-0:4222,nats://t@n-1:4222") && has_userinfo("http://u:p@h/"));
        assert!(!has_userinfo("nats://n-0:4222") && !has_userinfo("http://h/a@b?token=x"));
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
