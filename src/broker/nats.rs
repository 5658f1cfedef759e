//! The NATS client of a NATS sink's configuration (its servers, credentials and TLS), and
//! what its answers mean.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::ConnectOptions;
use async_nats::jetstream;

use crate::config::{NatsConfig, Secret, SecretFileError};

/// Why a NATS client cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A secret file of the sink cannot be read.
    #[error("{0}")]
    SecretFile(#[from] SecretFileError),
    /// The credentials file cannot be used.
    #[error("sink.auth.credentials_file: cannot use {}: {source}", .file.display())]
    Credentials {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The client cannot start (the URL, the TLS files).
    #[error("sink.url: cannot connect: {0}")]
    Connect(#[source] async_nats::ConnectError),
}

/// A client of the servers of `cfg`, with its credentials and TLS, connecting in the
/// background. Credentials and TLS files are read now.
pub async fn client(cfg: &NatsConfig) -> Result<async_nats::Client, ConnectError> {
    let mut opts = ConnectOptions::new().name("deltaship").retry_on_initial_connect().max_reconnects(None).event_callback({
        let log = Arc::new(ConnectionLog::default());
        move |event| {
            let log = log.clone();
            async move { log.record(event) }
        }
    });
    let a = &cfg.auth;
    if let Some(user) = &a.user {
        let password = match (&a.password, &a.password_file) {
            (Some(p), _) => p.expose().to_string(),
            (None, Some(f)) => Secret::from_file("sink.auth.password_file", f)?.expose().to_string(),
            (None, None) => String::new(),
        };
        opts = opts.user_and_password(user.clone(), password);
    }
    match (&a.token, &a.token_file) {
        (Some(t), _) => opts = opts.token(t.expose().to_string()),
        (None, Some(f)) => opts = opts.token(Secret::from_file("sink.auth.token_file", f)?.expose().to_string()),
        (None, None) => {}
    }
    if let Some(f) = &a.nkey_seed_file {
        opts = opts.nkey(Secret::from_file("sink.auth.nkey_seed_file", f)?.expose().to_string());
    }
    if let Some(f) = &a.credentials_file {
        opts = opts.credentials_file(f).await.map_err(|source| ConnectError::Credentials { file: f.clone(), source })?;
    }
    if let Some(ca) = &cfg.tls.ca_file {
        opts = opts.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&cfg.tls.cert_file, &cfg.tls.key_file) {
        opts = opts.add_client_certificate(cert.clone(), key.clone());
    }
    if cfg.tls.required {
        opts = opts.require_tls(true);
    }
    let servers: Vec<&str> = cfg.url.split(',').map(str::trim).collect();
    opts.connect(servers).await.map_err(ConnectError::Connect)
}

/// Logs the connection's state changes once each, and each kind of client or server error
/// (e.g. an authorization violation repeated on every reconnect) at most once a minute.
#[derive(Default)]
struct ConnectionLog {
    connected: AtomicBool,
    warned: Mutex<HashMap<String, Instant>>,
}

impl ConnectionLog {
    fn record(&self, event: async_nats::Event) {
        match event {
            async_nats::Event::Connected => {
                if !self.connected.swap(true, Ordering::AcqRel) {
                    tracing::info!(sink = "nats", "Connected to NATS");
                }
            }
            async_nats::Event::Disconnected => {
                if self.connected.swap(false, Ordering::AcqRel) {
                    tracing::warn!(sink = "nats", "Disconnected from NATS; reconnecting");
                }
            }
            other => {
                let text = other.to_string();
                let kind: String = text.chars().take_while(|c| *c != ':').collect();
                let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
                if warned.get(&kind).is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(sink = "nats", event = %text, "NATS connection problem");
                    warned.insert(kind, Instant::now());
                } else {
                    tracing::debug!(sink = "nats", event = %text, "NATS connection problem (repeated)");
                }
            }
        }
    }
}

/// Whether the server's answer among the causes of `e` is "stream not found" (JetStream
/// error 10059): the failed lookup of a stream, or a request about one deleted since.
pub fn is_stream_not_found(e: &(dyn std::error::Error + 'static)) -> bool {
    let not_found = |j: &jetstream::Error| j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND;
    let mut next = Some(e);
    while let Some(e) = next {
        let lookup = e.downcast_ref::<jetstream::context::GetStreamError>().map(|g| g.kind());
        if matches!(lookup, Some(jetstream::context::GetStreamErrorKind::JetStream(j)) if not_found(&j))
            || e.downcast_ref::<jetstream::Error>().is_some_and(not_found)
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind, RequestError, RequestErrorKind};

    use super::*;

    /// The server's answer `err_code`.
    fn answer(err_code: u64, description: &str) -> jetstream::Error {
        serde_json::from_value(serde_json::json!({"code": 404, "err_code": err_code, "description": description})).unwrap()
    }

    #[test]
    fn only_the_answer_stream_not_found_says_the_stream_is_gone() {
        assert!(is_stream_not_found(&RequestError::from(answer(10059, "stream not found"))));
        assert!(is_stream_not_found(&GetStreamError::new(GetStreamErrorKind::JetStream(answer(10059, "stream not found")))));
        assert!(!is_stream_not_found(&RequestError::from(answer(10014, "consumer not found"))));
        assert!(!is_stream_not_found(&GetStreamError::new(GetStreamErrorKind::JetStream(answer(10014, "consumer not found")))));
        assert!(!is_stream_not_found(&RequestError::new(RequestErrorKind::TimedOut)));
        assert!(!is_stream_not_found(&RequestError::new(RequestErrorKind::NoResponders)));
    }
}
