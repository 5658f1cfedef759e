//! The HTTP sink: each event POSTed to one URL by the CloudEvents HTTP binding (binary or
//! structured), a 2xx answer being the acknowledgement. 408, 429, 5xx, connection errors and
//! timeouts are retried by the dispatcher (honouring `Retry-After`; a late attempt is still
//! awaited before the object's next event goes, `late.rs`), 413 goes to the
//! oversize policy, 401 and 403 stop the bridge, other 3xx and 4xx follow
//! `on_client_error`; a server certificate that cannot be verified stops the bridge too.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::Semaphore;
use tokio_util::task::AbortOnDropHandle;
use tower::ServiceExt;

use super::encode::{STRUCTURED_CONTENT_TYPE, percent_encode, structured_bytes};
use super::error::causes;
use super::late::{LATE_ANSWER_WAIT, LateAnswers};
use super::{ErrorKind, Failure, SendError, SinkError};
use crate::config::{ClientErrorPolicy, ContentMode, HttpSinkConfig, HttpTls, Secret, ce_overrides, mask_urls};
use crate::event::Envelope;

/// The most of an answer's body kept for the log (the rest is read and dropped).
const BODY_EXCERPT: usize = 200;
/// The most of an answer's body read.
const BODY_LIMIT: usize = 64 * 1024;
/// How long a probe (connection and TLS handshake) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct HttpSink {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// The client's connector, for probes: a connection and, to `https://`, the handshake.
    connector: HttpsConnector<HttpConnector>,
    uri: Uri,
    /// The URL as errors show it (credentials masked).
    shown: String,
    /// `sink.tls.ca_file`, named in the fix of a certificate from an unknown issuer.
    ca_file: Option<PathBuf>,
    content_mode: ContentMode,
    timeout: Duration,
    requests: Semaphore,
    /// Attempts answered later than `timeout`, still awaited.
    late: LateAnswers,
    on_client_error: ClientErrorPolicy,
    auth: Option<Auth>,
    /// `K_CE_OVERRIDES`: extensions added to every event, never one deltaship sets.
    overrides: Vec<(String, String)>,
}

enum Auth {
    Bearer(Credential),
    Basic { user: String, password: Credential },
}

/// A secret given inline, or as a file read again when it changes (a rotated token).
enum Credential {
    Inline(Secret),
    File { key: &'static str, path: PathBuf, read: Mutex<Option<(SystemTime, Secret)>> },
}

impl Credential {
    fn new(key: &'static str, inline: &Option<Secret>, file: &Option<PathBuf>) -> Result<Option<Credential>, SinkError> {
        Ok(match (inline, file) {
            (Some(s), _) => Some(Credential::Inline(s.clone())),
            (None, Some(path)) => {
                let c = Credential::File { key, path: path.clone(), read: Mutex::new(None) };
                c.current().map_err(SinkError::SecretFile)?;
                Some(c)
            }
            (None, None) => None,
        })
    }

    /// The secret now: a file is read again when its modification time changed.
    fn current(&self) -> Result<Secret, crate::config::SecretFileError> {
        match self {
            Credential::Inline(s) => Ok(s.clone()),
            Credential::File { key, path, read } => {
                let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                let mut read = read.lock().expect("never poisoned: no panic while held");
                if let (Some((at, secret)), Some(now)) = (read.as_ref(), modified)
                    && *at == now
                {
                    return Ok(secret.clone());
                }
                let secret = Secret::from_file(key, path)?;
                *read = modified.map(|m| (m, secret.clone()));
                Ok(secret)
            }
        }
    }
}

impl Auth {
    fn header(&self) -> Result<HeaderValue, Failure> {
        let value = match self {
            Auth::Bearer(token) => format!("Bearer {}", token.current().map_err(Failure::Credential)?.expose()),
            Auth::Basic { user, password } => {
                let pair = format!("{user}:{}", password.current().map_err(Failure::Credential)?.expose());
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
            }
        };
        let mut header = HeaderValue::from_str(&value).map_err(Failure::HttpCredentialHeader)?;
        header.set_sensitive(true);
        Ok(header)
    }
}

impl HttpSink {
    /// Reads the TLS and credential files and sets up the client; connects on the first
    /// send (an unreachable server is retried, never a start-up failure).
    pub fn new(cfg: &HttpSinkConfig) -> Result<HttpSink, SinkError> {
        let url = cfg.target_url().ok_or_else(|| SinkError::HttpUrl("not set, nor is K_SINK".into()))?;
        let uri: Uri = url.parse().map_err(|e| SinkError::HttpUrl(format!("`{}`: {e}", mask_urls(&url))))?;
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls_config(&cfg.tls)?).https_or_http().enable_http1().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(connector.clone());
        let a = &cfg.auth;
        let auth = match (&a.user, Credential::new("sink.auth.token_file", &a.token, &a.token_file)?) {
            (_, Some(token)) => Some(Auth::Bearer(token)),
            (Some(user), None) => {
                Credential::new("sink.auth.password_file", &a.password, &a.password_file)?.map(|password| Auth::Basic { user: user.clone(), password })
            }
            (None, None) => None,
        };
        let overrides = ce_overrides().map_err(|(what, fix)| SinkError::CeOverrides(format!("{what}; fix: {fix}")))?.into_iter().collect();
        Ok(HttpSink {
            inner: Arc::new(Inner {
                client,
                connector,
                uri,
                shown: mask_urls(&url).into_owned(),
                ca_file: cfg.tls.ca_file.clone(),
                content_mode: cfg.content_mode,
                timeout,
                requests: Semaphore::new(cfg.max_requests),
                late: LateAnswers::new(LATE_ANSWER_WAIT),
                on_client_error: cfg.on_client_error,
                auth,
                overrides,
            }),
        })
    }

    /// The `host:port` requests go to.
    pub fn address(&self) -> String {
        let uri = &self.inner.uri;
        let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
        format!("{}:{port}", uri.host().unwrap_or_default())
    }

    /// Whether the URL is `https://`.
    pub fn is_tls(&self) -> bool {
        self.inner.uri.scheme_str() == Some("https")
    }

    /// Whether a connection to the server opens within 5 s, its TLS handshake included
    /// (for /readyz and `check`). A server certificate that cannot be verified is an error
    /// that is not retryable, naming the problem and the fix.
    pub async fn probe(&self) -> Result<(), SinkError> {
        let unreachable = |reason: String| SinkError::HttpUnreachable { address: self.address(), reason };
        match tokio::time::timeout(PROBE_TIMEOUT, self.inner.connector.clone().oneshot(self.inner.uri.clone())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(match self.certificate_failure(&*e) {
                Some(source) => SinkError::Request(SendError::Fatal { kind: ErrorKind::Tls, source }),
                None => unreachable(causes(&*e)),
            }),
            Err(_) => Err(unreachable(format!("no connection within {PROBE_TIMEOUT:?}"))),
        }
    }

    /// The failure of a request or probe whose error is a server certificate that cannot
    /// be verified: retrying cannot help, the certificate or the configuration must change.
    fn certificate_failure(&self, e: &(dyn std::error::Error + 'static)) -> Option<Failure> {
        let (problem, fix) = certificate_problem(certificate_error(e)?, self.inner.uri.host().unwrap_or_default(), self.inner.ca_file.as_deref());
        Some(Failure::HttpCertificate { url: self.inner.shown.clone(), problem, fix })
    }

    /// POSTs `env`; a 2xx answer acknowledges it. An attempt answered later than the timeout
    /// fails as retryable but keeps running (`late.rs`): the event is acknowledged only once
    /// every attempt of it has answered, so no copy of it can arrive after the object's next
    /// event.
    pub async fn send(&self, env: &Envelope) -> Result<(), SendError> {
        let inner = &self.inner;
        let id = env.attributes.id.as_str();
        // A late attempt the server accepted meanwhile: no need to send it again.
        if inner.late.accepted(id) {
            self.settle(id).await;
            return Ok(());
        }
        let _request = inner.requests.acquire().await.expect("the semaphore is never closed");
        let request = self.request(env).map_err(|source| match source {
            // A rotated file may be missing for a moment: try again.
            Failure::Credential(_) => SendError::Retryable { kind: ErrorKind::Authentication, source },
            _ => SendError::Fatal { kind: ErrorKind::Authentication, source },
        })?;
        let mut answer = Box::pin(self.clone().answer(request));
        let result = match tokio::time::timeout(inner.timeout, &mut answer).await {
            Ok(answered) => answered.and_then(|(status, retry_after, body)| classify(status, retry_after, body, inner.on_client_error)),
            Err(_) => {
                let accepted = async move { matches!(answer.await, Ok((status, ..)) if status.is_success()) };
                inner.late.keep(id, AbortOnDropHandle::new(tokio::spawn(accepted)));
                return Err(SendError::Retryable { kind: ErrorKind::Timeout, source: Failure::HttpTimeout(inner.timeout) });
            }
        };
        if !matches!(result, Err(SendError::Retryable { .. })) {
            self.settle(id).await;
        }
        result
    }

    /// The answer to `request`: its status, `Retry-After` and the start of its body.
    async fn answer(self, request: Request<Full<Bytes>>) -> Result<(StatusCode, Option<Duration>, String), SendError> {
        let response = self.inner.client.request(request).await.map_err(|e| match self.certificate_failure(&e) {
            Some(source) => SendError::Fatal { kind: ErrorKind::Tls, source },
            None => SendError::Retryable { kind: ErrorKind::Connect, source: Failure::HttpTransport(e) },
        })?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        // Read the answer (so the connection is reused), keeping its start for the log.
        let body = match Limited::new(response.into_body(), BODY_LIMIT).collect().await {
            Ok(b) => excerpt(&b.to_bytes()),
            Err(_) => String::new(),
        };
        Ok((status, retry_after, body))
    }

    /// Waits for the late attempts of event `id` before its object's next event may go.
    async fn settle(&self, id: &str) {
        let settled = self.inner.late.settle(id).await;
        if settled.abandoned > 0 {
            tracing::warn!(
                sink = "http",
                id,
                abandoned = settled.abandoned,
                url = %self.inner.shown,
                "Gave up on attempts of an event still unanswered {LATE_ANSWER_WAIT:?} after their timeout; should the server still take one, that copy may arrive after a newer event of the same object"
            );
        }
    }

    fn request(&self, env: &Envelope) -> Result<Request<Full<Bytes>>, Failure> {
        let inner = &self.inner;
        let mut builder = Request::builder().method(Method::POST).uri(inner.uri.clone());
        let headers = builder.headers_mut().expect("a new request builder has headers");
        let body = match inner.content_mode {
            ContentMode::Binary => {
                // The overrides never name an attribute of ours (config::RESERVED_ATTRIBUTES).
                let ours = env.attributes.pairs().map(|(name, value)| (name as &str, value));
                let overrides = inner.overrides.iter().map(|(name, value)| (name.as_str(), value.as_str()));
                for (name, value) in ours.chain(overrides) {
                    let failed = |header: &str, source: http::Error| Failure::HttpHeader { header: header.to_string(), source };
                    let (header, value) = if name == "datacontenttype" {
                        (CONTENT_TYPE, Cow::Borrowed(value))
                    } else {
                        let header = format!("ce-{name}");
                        (HeaderName::try_from(&header).map_err(|e| failed(&header, e.into()))?, percent_encode(value))
                    };
                    let value = HeaderValue::try_from(value.as_ref()).map_err(|e| failed(header.as_str(), e.into()))?;
                    headers.insert(header, value);
                }
                env.data.clone()
            }
            ContentMode::Structured => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static(STRUCTURED_CONTENT_TYPE));
                let mut event = env.attributes.to_event();
                for (name, value) in &inner.overrides {
                    event.set_extension(name, value.as_str());
                }
                structured_bytes(&event, &env.data).into()
            }
        };
        if let Some(auth) = &inner.auth {
            headers.insert(AUTHORIZATION, auth.header()?);
        }
        Ok(builder.body(Full::new(body)).expect("the request's parts are valid"))
    }
}

/// What an answer means for the event.
fn classify(status: StatusCode, retry_after: Option<Duration>, body: String, on_client_error: ClientErrorPolicy) -> Result<(), SendError> {
    if status.is_success() {
        return Ok(());
    }
    let source = Failure::HttpStatus { status: status.as_u16(), retry_after, body };
    Err(match status.as_u16() {
        413 => SendError::TooLarge { source },
        408 | 429 | 500..=599 => SendError::Retryable { kind: ErrorKind::Unavailable, source },
        401 => SendError::Fatal { kind: ErrorKind::Authentication, source },
        403 => SendError::Fatal { kind: ErrorKind::Authorization, source },
        400..=499 if on_client_error == ClientErrorPolicy::Skip => SendError::Rejected { source },
        _ => SendError::Fatal { kind: ErrorKind::Rejected, source },
    })
}

/// `Retry-After` in seconds (an HTTP date is read as its distance from now).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(BODY_EXCERPT)]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The certificate error among the causes of `e`. The TLS error reaches the client inside
/// two `std::io::Error`s (tokio-rustls's, then hyper-rustls's), whose `source` skips the error
/// they wrap: each is opened by `get_ref`.
fn certificate_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::CertificateError> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(rustls::Error::InvalidCertificate(c)) = e.downcast_ref::<rustls::Error>() {
            return Some(c);
        }
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// What is wrong with the server's certificate, and the fix, in the words of the sink's
/// settings: `host` is the URL's, `ca_file` is `sink.tls.ca_file`.
fn certificate_problem(c: &rustls::CertificateError, host: &str, ca_file: Option<&std::path::Path>) -> (String, String) {
    use rustls::CertificateError as C;
    let trust = match ca_file {
        None => "set sink.tls.ca_file to the PEM file of the CA that issued it (without it the system's CA store is used)".to_string(),
        Some(f) => format!("sink.tls.ca_file ({}) does not hold the CA that issued it: point it at that CA's PEM file", f.display()),
    };
    let clocks = "renew the server's certificate, or set the clock right if this host's or the server's is wrong";
    #[allow(deprecated)] // rustls reports the context variants; the plain ones are matched too
    let (problem, fix) = match c {
        C::UnknownIssuer => ("unknown issuer: it is not signed by a CA the bridge trusts (self-signed, or issued by a private CA)".to_string(), trust),
        C::BadSignature => (format!("its signature does not verify ({c})"), trust),
        C::Expired | C::ExpiredContext { .. } => (format!("it has expired ({c})"), clocks.to_string()),
        C::NotValidYet | C::NotValidYetContext { .. } => (format!("it is not valid yet ({c})"), clocks.to_string()),
        C::NotValidForName | C::NotValidForNameContext { .. } => (
            format!("wrong host name: it is not valid for {host}, the host of sink.url ({c})"),
            format!("use a URL whose host the certificate names (sink.url), or give the server a certificate for {host}"),
        ),
        C::Revoked => ("it has been revoked".to_string(), "give the server a new certificate".to_string()),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            (format!("it is not a certificate for a server ({c})"), "give the server a certificate for TLS server authentication".to_string())
        }
        other => (other.to_string(), "give the server a certificate that verifies against sink.tls.ca_file or the system's CA store".to_string()),
    };
    (problem, fix)
}

fn tls_config(tls: &HttpTls) -> Result<rustls::ClientConfig, SinkError> {
    let bad = |key: &'static str, file: &PathBuf, reason: String| SinkError::HttpTls { key, file: file.clone(), reason };
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca_file {
        Some(f) => {
            let certs: Vec<CertificateDer> =
                CertificateDer::pem_file_iter(f).and_then(Iterator::collect).map_err(|e| bad("sink.tls.ca_file", f, e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("sink.tls.ca_file", f, "holds no PEM certificate".into()));
            }
            for c in certs {
                roots.add(c).map_err(|e| bad("sink.tls.ca_file", f, e.to_string()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots);
    Ok(match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(cert).and_then(Iterator::collect).map_err(|e| bad("sink.tls.cert_file", cert, e.to_string()))?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("sink.tls.key_file", key, e.to_string()))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| bad("sink.tls.key_file", key, e.to_string()))?
        }
        _ => builder.with_no_client_auth(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn kind(status: u16, policy: ClientErrorPolicy) -> (&'static str, Option<ErrorKind>) {
        match classify(StatusCode::from_u16(status).unwrap(), None, String::new(), policy) {
            Ok(()) => ("ok", None),
            Err(e @ SendError::Retryable { .. }) => ("retry", Some(e.kind())),
            Err(SendError::TooLarge { .. }) => ("oversize", None),
            Err(e @ SendError::Fatal { .. }) => ("fatal", Some(e.kind())),
            Err(SendError::Rejected { .. }) => ("skip", None),
        }
    }

    #[test]
    fn answers_are_acks_retries_oversize_or_by_policy() {
        use ClientErrorPolicy::{Fail, Skip};
        assert_eq!(kind(200, Fail), ("ok", None));
        assert_eq!(kind(202, Fail), ("ok", None));
        assert_eq!(kind(204, Fail), ("ok", None));
        for s in [408, 429, 500, 502, 503, 504] {
            assert_eq!(kind(s, Fail), ("retry", Some(ErrorKind::Unavailable)), "{s}");
        }
        assert_eq!(kind(413, Skip), ("oversize", None));
        assert_eq!(kind(401, Skip), ("fatal", Some(ErrorKind::Authentication)));
        assert_eq!(kind(403, Skip), ("fatal", Some(ErrorKind::Authorization)));
        assert_eq!(kind(400, Fail), ("fatal", Some(ErrorKind::Rejected)));
        assert_eq!(kind(404, Skip), ("skip", None));
        assert_eq!(kind(301, Skip), ("fatal", Some(ErrorKind::Rejected)), "a redirect is a wrong URL, whatever the policy");
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert(RETRY_AFTER, HeaderValue::from_str(&later).unwrap());
        assert!(retry_after(&h).is_some_and(|d| d > Duration::from_secs(25) && d <= Duration::from_secs(30)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    /// A sink of `mode` with Knative's overrides `team = shop` and `tier = gold` (as
    /// `K_CE_OVERRIDES` sets them), and the request it makes of an object event.
    fn request_with_overrides(mode: &str) -> Request<Full<Bytes>> {
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": "http://127.0.0.1:9/events", "content_mode": mode})).unwrap();
        let mut sink = HttpSink::new(&cfg).unwrap();
        Arc::get_mut(&mut sink.inner).unwrap().overrides = vec![("team".into(), "shop".into()), ("tier".into(), "gold".into())];
        let kind = crate::event::EnvelopeKind::Object(crate::model::ChangeType::Added);
        let env = Envelope { data: Bytes::from_static(b"{\"kind\":\"ConfigMap\"}"), ..crate::event::fixtures::configmap_event("ns/a", "e1", kind) };
        sink.request(&env).unwrap()
    }

    #[test]
    fn knative_overrides_add_extensions_in_both_modes() {
        let binary = request_with_overrides("binary");
        let h = binary.headers();
        assert_eq!((&h["ce-team"], &h["ce-tier"]), (&"shop".parse::<HeaderValue>().unwrap(), &"gold".parse::<HeaderValue>().unwrap()));
        assert_eq!(h["ce-cluster"], "c");
        assert_eq!(h.get_all("ce-cluster").iter().count(), 1);
        assert_eq!(h["ce-id"], "e1");
        assert_eq!(h["ce-subject"], "ns/a");
        assert_eq!(h[CONTENT_TYPE], "application/json");
        let structured = request_with_overrides("structured");
        assert_eq!(structured.headers()[CONTENT_TYPE], STRUCTURED_CONTENT_TYPE);
        let body = futures::executor::block_on(structured.into_body().collect()).unwrap().to_bytes();
        let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((event["team"].as_str(), event["tier"].as_str(), event["id"].as_str()), (Some("shop"), Some("gold"), Some("e1")));
        assert_eq!(event["data"]["kind"], "ConfigMap");
    }

    #[test]
    fn a_certificate_error_is_found_inside_the_io_errors_that_carry_it() {
        // As tokio-rustls, then hyper-rustls, wrap it.
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped = std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls));
        assert_eq!(certificate_error(&wrapped), Some(&rustls::CertificateError::UnknownIssuer));
        let other = std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::DecryptError));
        assert_eq!(certificate_error(&other), None, "a TLS error that is not the certificate's");
        assert_eq!(certificate_error(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)), None);
    }

    #[test]
    fn a_certificate_problem_names_what_is_wrong_and_the_setting_that_fixes_it() {
        use rustls::CertificateError as C;
        let (problem, fix) = certificate_problem(&C::UnknownIssuer, "events.example", None);
        assert!(problem.starts_with("unknown issuer: it is not signed by a CA the bridge trusts"), "{problem}");
        assert!(fix.starts_with("set sink.tls.ca_file to the PEM file of the CA"), "{fix}");
        let (_, fix) = certificate_problem(&C::UnknownIssuer, "events.example", Some(std::path::Path::new("/etc/ca.pem")));
        assert!(fix.starts_with("sink.tls.ca_file (/etc/ca.pem) does not hold the CA that issued it"), "{fix}");
        let wrong_name = C::NotValidForNameContext {
            expected: rustls_pki_types::ServerName::try_from("events.example").unwrap().to_owned(),
            presented: vec!["DnsName(\"other.example\")".into()],
        };
        let (problem, fix) = certificate_problem(&wrong_name, "events.example", None);
        assert!(problem.starts_with("wrong host name: it is not valid for events.example") && problem.contains("other.example"), "{problem}");
        assert!(fix.contains("use a URL whose host the certificate names (sink.url)"), "{fix}");
        let expired = C::ExpiredContext {
            time: rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(2_000)),
            not_after: rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(1_000)),
        };
        let (problem, fix) = certificate_problem(&expired, "events.example", None);
        assert!(problem.starts_with("it has expired") && problem.contains("1000 seconds ago"), "{problem}");
        assert!(fix.starts_with("renew the server's certificate"), "{fix}");
    }

    #[test]
    fn a_certificate_failure_shows_the_url_masked_and_is_not_retried() {
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": "https://127.0.0.1:9/events?access_token=s3cret"})).unwrap();
        let sink = HttpSink::new(&cfg).unwrap();
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let failure = sink.certificate_failure(&std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls))).unwrap();
        let e = SinkError::Request(SendError::Fatal { kind: ErrorKind::Tls, source: failure });
        assert!(!e.is_retryable());
        let text = e.to_string();
        assert!(
            text.starts_with("tls: the certificate of the HTTPS server at https://127.0.0.1:9/events?access_token=*** cannot be verified: unknown issuer"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried_with_the_clients_error_as_its_source_and_its_causes_in_the_text() {
        // A port just given back by the system: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": format!("http://127.0.0.1:{port}/events")})).unwrap();
        let sink = HttpSink::new(&cfg).unwrap();
        let kind = crate::event::EnvelopeKind::Object(crate::model::ChangeType::Added);
        let e = sink.send(&crate::event::fixtures::configmap_event("ns/a", "e1", kind)).await.unwrap_err();
        let SendError::Retryable { kind: ErrorKind::Connect, source } = &e else { panic!("{e:?}") };
        let client = std::error::Error::source(source).and_then(|s| s.downcast_ref::<hyper_util::client::legacy::Error>());
        assert!(client.is_some_and(|c| c.is_connect()), "{source:?}");
        assert!(e.to_string().starts_with("connect: client error (Connect): tcp connect error: Connection refused"), "{e}");
    }

    /// A server on 127.0.0.1 that answers 200 to every POST, the first one only after
    /// `delay`; it returns its address and the ids it has taken, in the order it took them.
    async fn server_slow_at_first(delay: Duration) -> (String, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let taken = Arc::new(Mutex::new(Vec::new()));
        let log = taken.clone();
        tokio::spawn(async move {
            for n in 0.. {
                let (mut conn, _) = listener.accept().await.unwrap();
                let log = log.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8];
                        if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
                    let header = |name: &str| head.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
                    let mut body = vec![0u8; header("content-length:").map_or(0, |l| l.parse().unwrap())];
                    conn.read_exact(&mut body).await.unwrap();
                    if n == 0 {
                        tokio::time::sleep(delay).await;
                    }
                    // Taken, as a server does, whether or not the client still waits.
                    log.lock().unwrap().push(header("ce-id:").unwrap());
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                });
            }
        });
        (addr, taken)
    }

    fn event(id: &str) -> Envelope {
        crate::event::fixtures::configmap_event("ns/a", id, crate::event::EnvelopeKind::Object(crate::model::ChangeType::Updated))
    }

    #[tokio::test]
    async fn an_event_retried_after_a_timeout_is_acknowledged_only_once_its_late_attempt_answered() {
        // The timeout leaves a busy machine time to answer the retry; the first answer comes
        // well after it.
        let (addr, taken) = server_slow_at_first(Duration::from_millis(2_500)).await;
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": format!("http://{addr}/events"), "timeout_ms": 1_000})).unwrap();
        let sink = HttpSink::new(&cfg).unwrap();
        let started = Instant::now();
        let e = sink.send(&event("e1")).await.unwrap_err();
        assert!(matches!(e, SendError::Retryable { kind: ErrorKind::Timeout, .. }), "{e:?}");
        // The retry is answered at once, but the first attempt is still with the server.
        sink.send(&event("e1")).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(2_500), "acknowledged after {:?}, before the late answer", started.elapsed());
        sink.send(&event("e2")).await.unwrap();
        assert_eq!(*taken.lock().unwrap(), ["e1", "e1", "e2"], "the object's next event after every copy of the one before");
    }

    #[tokio::test]
    async fn a_late_answer_that_accepted_the_event_spares_the_retry() {
        let (addr, taken) = server_slow_at_first(Duration::from_millis(400)).await;
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": format!("http://{addr}/events"), "timeout_ms": 100})).unwrap();
        let sink = HttpSink::new(&cfg).unwrap();
        sink.send(&event("e1")).await.unwrap_err();
        // The retry comes once the server took the first attempt and its late answer reached
        // the sink, however busy the machine.
        while taken.lock().unwrap().is_empty() || !sink.inner.late.answered("e1") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        sink.send(&event("e1")).await.unwrap();
        assert_eq!(*taken.lock().unwrap(), ["e1"], "sent once");
    }

    #[test]
    fn a_header_the_event_cannot_carry_names_the_header_and_keeps_its_cause_and_a_credential_is_not_shown() {
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": "http://127.0.0.1:9/events"})).unwrap();
        let mut sink = HttpSink::new(&cfg).unwrap();
        Arc::get_mut(&mut sink.inner).unwrap().overrides = vec![("a b".into(), "x".into())];
        let kind = crate::event::EnvelopeKind::Object(crate::model::ChangeType::Added);
        let env = crate::event::fixtures::configmap_event("ns/a", "e1", kind);
        let failure = sink.request(&env).unwrap_err();
        assert!(matches!(&failure, Failure::HttpHeader { header, .. } if header == "ce-a b"), "{failure:?}");
        assert!(std::error::Error::source(&failure).is_some_and(|s| s.is::<http::Error>()));
        assert_eq!(failure.to_string(), "ce-a b: invalid HTTP header name");
        let cfg: HttpSinkConfig = serde_json::from_value(serde_json::json!({"url": "http://127.0.0.1:9/events", "auth": {"token": "s3cret\n"}})).unwrap();
        let failure = HttpSink::new(&cfg).unwrap().request(&env).unwrap_err();
        assert!(matches!(failure, Failure::HttpCredentialHeader(_)), "{failure:?}");
        assert_eq!(failure.to_string(), "the credential holds characters a header cannot carry (not shown)");
    }

    #[test]
    fn a_failure_names_the_status_and_the_start_of_the_answer() {
        let f = Failure::HttpStatus { status: 503, retry_after: Some(Duration::from_secs(2)), body: excerpt(b"  broker\n not ready  ") };
        assert_eq!(f.to_string(), "the server answered 503: broker not ready");
        assert_eq!(f.retry_after(), Some(Duration::from_secs(2)));
    }
}
