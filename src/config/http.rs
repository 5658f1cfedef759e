//! The HTTP sink's configuration: CloudEvents POSTed to a URL (a Knative Broker or Service,
//! a function, a webhook).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds;
use super::content::ContentMode;
use super::credentials::{Credentials, check_credentials};
use super::problem::{Problem, problem};
use super::secret::{Secret, has_userinfo, mask_urls};

/// The variable a Knative SinkBinding or ContainerSource sets to the sink's address.
pub const K_SINK: &str = "K_SINK";
/// The variable a Knative source sets to the CloudEvent extensions every event carries,
/// as JSON: `{"extensions": {"name": "value"}}`.
pub const K_CE_OVERRIDES: &str = "K_CE_OVERRIDES";

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSinkConfig {
    /// The URL each event is POSTed to, `http://` or `https://`. Default: the environment
    /// variable `K_SINK`, which a Knative SinkBinding or ContainerSource sets; one of the
    /// two is required.
    pub url: Option<String>,
    /// `binary` (default: attributes as `ce-` headers, body = data) or `structured` (body =
    /// the whole event as JSON, `application/cloudevents+json`).
    #[serde(default)]
    pub content_mode: ContentMode,
    /// Time allowed for one request, from connecting to the end of the response, in
    /// milliseconds; a request that takes longer is retried, and still awaited before the
    /// object's next event is sent (up to 60 s more). Default: 10000.
    #[serde(default = "default_timeout_ms")]
    #[schemars(transform = &bounds::HTTP_TIMEOUT_MS)]
    pub timeout_ms: u64,
    /// Requests in flight at once (each object has at most one). Default: 64.
    #[serde(default = "default_max_requests")]
    #[schemars(transform = &bounds::HTTP_MAX_REQUESTS)]
    pub max_requests: usize,
    /// What an answer of 400-499 other than 408, 413 and 429 does (retrying cannot help):
    /// `fail` (default: the bridge stops, naming the status; the restart re-delivers) or
    /// `skip` (the event is dropped, logged and counted in
    /// `deltaship_events_dropped_total{reason="rejected"}`).
    #[serde(default)]
    pub on_client_error: ClientErrorPolicy,
    /// TLS to an `https://` URL. Default: the system's CA store, no client certificate.
    #[serde(default)]
    pub tls: HttpTls,
    /// Credentials sent with every request. Default: none.
    #[serde(default)]
    pub auth: HttpAuth,
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn default_max_requests() -> usize {
    64
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClientErrorPolicy {
    /// The bridge stops, naming the status and the answer.
    #[default]
    Fail,
    /// The event is dropped, logged and counted.
    Skip,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpTls {
    /// CA certificate(s) (PEM) to verify the server with, instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `key_file`, for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// At most one of a bearer token and a user with a password. Secrets inline (also from
/// the environment, e.g. `DELTASHIP_SINK__AUTH__TOKEN`) or, better, as files; masked in
/// `print-config` and never logged. Files are read again when they change, so a rotated
/// token is used without a restart.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpAuth {
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<Secret>,
    /// File holding the token (trailing newline trimmed), e.g. a projected service account
    /// token.
    pub token_file: Option<PathBuf>,
    /// User of HTTP basic authentication, with `password` or `password_file`.
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub password_file: Option<PathBuf>,
}

impl HttpSinkConfig {
    /// The URL events go to: `url`, else `$K_SINK`.
    pub fn target_url(&self) -> Option<String> {
        self.url.clone().or_else(|| std::env::var(K_SINK).ok().filter(|u| !u.is_empty()))
    }
}

/// The CloudEvents context attributes (`data` and `data_base64` too, the members of a
/// structured event's body) and the extensions of the event contract that deltaship sets:
/// names `K_CE_OVERRIDES` may not use. Overriding `id` would give every event one id (and a
/// consumer that skips repeats by id would keep only the first); the others identify the
/// object and its resource. `event::attributes` tests that every attribute deltaship writes
/// is listed here.
pub const RESERVED_ATTRIBUTES: [&str; 20] = [
    "specversion",
    "id",
    "source",
    "type",
    "subject",
    "time",
    "datacontenttype",
    "dataschema",
    "data",
    "data_base64",
    "cluster",
    "apiversion",
    "kind",
    "namespace",
    "name",
    "uid",
    "resourceversion",
    "partitionkey",
    "syncid",
    "truncated",
];

/// The extensions of `$K_CE_OVERRIDES` (none when unset), set on every event as Knative's
/// sources do; an error is (what is wrong, the fix).
pub fn ce_overrides() -> Result<BTreeMap<String, String>, (String, String)> {
    match std::env::var(K_CE_OVERRIDES) {
        Ok(text) => parse_ce_overrides(&text),
        Err(_) => Ok(BTreeMap::new()),
    }
}

/// The overrides in `text`: JSON `{"extensions": {"name": "value"}}` whose names are
/// CloudEvents extension names (1 to 20 lowercase letters or digits) that deltaship does not
/// set itself, and whose values hold no control character (a CR or LF would end a header of
/// the HTTP binding). The problem names the extension, never more of the value than needed.
fn parse_ce_overrides(text: &str) -> Result<BTreeMap<String, String>, (String, String)> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Overrides {
        #[serde(default)]
        extensions: BTreeMap<String, String>,
    }
    let example = "set it as Knative does, e.g. {\"extensions\": {\"team\": \"shop\"}}, or unset it";
    let parsed: Overrides =
        serde_json::from_str(text).map_err(|e| (format!("is not JSON of the form {{\"extensions\": {{\"name\": \"value\"}}}}: {e}"), example.to_string()))?;
    for (name, value) in &parsed.extensions {
        if name.is_empty() || name.len() > 20 || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return Err((
                format!("names the extension `{name}`; CloudEvents extension names are 1 to 20 lowercase letters or digits"),
                format!("rename `{name}` to lowercase letters and digits only, e.g. `team`"),
            ));
        }
        if RESERVED_ATTRIBUTES.contains(&name.as_str()) {
            return Err((
                format!("sets `{name}`, which deltaship sets on every event (a CloudEvents attribute or an extension of its event contract)"),
                format!("remove `{name}` from the extensions, or give the value another name, e.g. `x{name}`; reserved: {}", RESERVED_ATTRIBUTES.join(", ")),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err((
                format!("gives the extension `{name}` a value with a control character (CR, LF, tab or another)"),
                format!("remove the control characters from the value of `{name}`"),
            ));
        }
    }
    Ok(parsed.extensions)
}

impl HttpSinkConfig {
    /// The problems of this sink, at `key` (`sink` or `routes[i].sink`).
    pub(super) fn validate(&self, out: &mut Vec<Problem>, key: &str) {
        let h = self;
        let at = |field: &str| format!("{key}.{field}");
        match h.target_url() {
            None => out.push(problem(
                at("url"),
                format!("is not set, nor is {K_SINK}"),
                "set the URL events are POSTed to, e.g. `http://broker-ingress.knative-eventing.svc/default/default`",
            )),
            Some(url) => match url.parse::<::http::Uri>() {
                _ if has_userinfo(&url) => out.push(problem(
                    at("url"),
                    format!("`{}` holds credentials before the host, which the HTTP client never sends", mask_urls(&url)),
                    "remove them from the URL and set `auth` (`user` with `password_file`, or `token_file`)",
                )),
                Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some_and(|h| !h.is_empty()) => {
                    let tls_set = h.tls.ca_file.is_some() || h.tls.cert_file.is_some();
                    if tls_set && uri.scheme_str() == Some("http") {
                        out.push(problem(at("tls"), format!("is set but `{}` is not https", mask_urls(&url)), "use an https:// URL, or remove `tls`"));
                    }
                }
                _ => out.push(problem(
                    at("url"),
                    format!("`{}` is not an http:// or https:// URL", mask_urls(&url)),
                    "give a URL such as `https://events.example.com/hook`",
                )),
            },
        }
        if let Err((what, fix)) = ce_overrides() {
            out.push(problem(K_CE_OVERRIDES, what, fix));
        }
        bounds::HTTP_TIMEOUT_MS.check(out, key, h.timeout_ms);
        bounds::HTTP_MAX_REQUESTS.check(out, key, h.max_requests);
        let a = &h.auth;
        if (a.token.is_some() || a.token_file.is_some()) && a.user.is_some() {
            out.push(problem(at("auth"), "sets both a token and a user", "keep one: `token_file` (bearer) or `user` with `password_file` (basic)"));
        }
        check_credentials(
            out,
            key,
            Credentials {
                user: a.user.is_some(),
                password: (a.password.is_some(), a.password_file.is_some()),
                token: (a.token.is_some(), a.token_file.is_some()),
                cert_and_key: (h.tls.cert_file.is_some(), h.tls.key_file.is_some()),
                files: &[
                    ("auth.token_file", &a.token_file, "the bearer token"),
                    ("auth.password_file", &a.password_file, "the password"),
                    ("tls.ca_file", &h.tls.ca_file, "the CA certificate(s) in PEM"),
                    ("tls.cert_file", &h.tls.cert_file, "the client certificate in PEM"),
                    ("tls.key_file", &h.tls.key_file, "the client certificate's private key in PEM"),
                ],
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> (String, String) {
        parse_ce_overrides(text).expect_err(text)
    }

    #[test]
    fn overrides_add_extensions_of_valid_names() {
        let o = parse_ce_overrides(r#"{"extensions": {"team": "shop", "tier2": "a b/c"}}"#).unwrap();
        assert_eq!(o.into_iter().collect::<Vec<_>>(), [("team".to_string(), "shop".to_string()), ("tier2".into(), "a b/c".into())]);
        assert!(parse_ce_overrides("{}").unwrap().is_empty());
    }

    #[test]
    fn overrides_of_core_attributes_and_contract_extensions_are_refused_naming_them() {
        for name in RESERVED_ATTRIBUTES.iter().filter(|n| !n.contains('_')) {
            let (problem, fix) = refused(&format!(r#"{{"extensions": {{"{name}": "x"}}}}"#));
            assert!(problem.contains(&format!("sets `{name}`")), "{problem}");
            assert!(fix.contains(&format!("remove `{name}`")), "{fix}");
        }
        let (problem, _) = refused(r#"{"extensions": {"team": "shop", "id": "x"}}"#);
        assert!(problem.contains("`id`"), "{problem}");
    }

    #[test]
    fn override_values_with_control_characters_are_refused() {
        for value in [r"a\r\nx-injected: 1", r"line\n", r"tab\there", r"nul\u0000"] {
            let (problem, fix) = refused(&format!(r#"{{"extensions": {{"team": "{value}"}}}}"#));
            assert!(problem.contains("`team`") && problem.contains("control character"), "{problem}");
            assert!(fix.contains("`team`"), "{fix}");
        }
    }

    #[test]
    fn override_names_that_are_not_cloudevents_names_are_refused() {
        for name in ["Team", "team-a", "", "a_b", "abcdefghijklmnopqrstu"] {
            let (problem, _) = refused(&format!(r#"{{"extensions": {{"{name}": "x"}}}}"#));
            assert!(problem.contains("lowercase letters or digits"), "{name}: {problem}");
        }
        assert!(refused(r#"{"extensions": {"team": 1}}"#).0.contains("is not JSON of the form"));
        assert!(refused(r#"{"extension": {}}"#).0.contains("is not JSON of the form"));
    }
}
