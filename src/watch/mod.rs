//! The watch stage: the API server's client, discovery and access checks, and one list and
//! watch per resource and namespace (`stream::list_watch`, client-go's reflector's loop), its
//! objects decoded and redacted into a stream of observations (the pipeline's worker takes
//! it from there).

pub mod access;
pub mod client;
mod decode;
pub mod discovery;
mod error;
pub mod lines;
pub mod position;
mod requests;
pub mod stall;
mod stream;
mod watched;

use std::sync::Arc;

use futures::Stream;
use kube::Client;
use kube::core::Request;

use crate::config::KubernetesConfig;
use crate::model::Observed;
use crate::plan::Scope;
use crate::telemetry::meters::DecodeMeters;

pub use decode::{DecodeError, Decoder};
pub use error::WatchError;
pub use watched::WatchedObject;

/// What one watch observes: the list and watch of the scope's resource and namespace
/// (`stream::list_watch`), each object decoded and redacted; with `resume_from` (a
/// checkpoint's resourceVersion), the watch continued from that version, listing when the
/// API server no longer has it. Objects that cannot be decoded are counted, logged and left
/// out; watch errors are passed on (the watch resumes or relists after them).
pub fn observe(
    client: Client,
    scope: &Arc<Scope>,
    kubernetes: &KubernetesConfig,
    resume_from: Option<String>,
) -> impl Stream<Item = Result<Observed, WatchError>> + Send + 'static {
    let label: Arc<str> = scope.resource.label().into();
    let decoder = Decoder::new(&scope.resource, scope.scanner.clone(), &scope.ignore_fields, scope.redaction.redactor(&label));
    let watch = scope.describe();
    let mut meters = DecodeMeters::new(label);
    let decode = move |o: WatchedObject| match decoder.decode(&o.0) {
        Ok(obj) => {
            if obj.truncated {
                meters.too_deep();
                tracing::warn!(watch = %watch, key = %obj.reference.key(), "Shipping an object nested deeper than the JSON limit (128 levels) as a truncated reference");
            }
            Some(obj)
        }
        Err(e) => {
            meters.undecodable();
            tracing::warn!(watch = %watch, error = %e, "Skipped an object that cannot be decoded");
            None
        }
    };
    let settings = stream::Settings {
        label_selector: scope.label_selector.clone(),
        field_selector: scope.field_selector.clone(),
        page_size: kubernetes.page_size,
        streaming: kubernetes.streaming_lists,
    };
    let request = Request::new(position::api(client.clone(), scope).resource_url());
    stream::list_watch(client, request, settings, resume_from, decode)
}

/// Why a watch failed, by the API server's status code: the bounded `error_kind` label of
/// `deltaship_watch_errors_total` and the cause /readyz names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No answer: the API server is unreachable or the connection broke.
    Connection,
    NoResourceVersion,
    Unauthorized,
    Forbidden,
    NotFound,
    /// 410 Gone: the watch's resourceVersion is too old; the watch lists again.
    Expired,
    Throttled,
    ServerError,
    /// Any other status.
    ApiError,
}

impl FailureKind {
    pub fn of(e: &WatchError) -> FailureKind {
        let code = match e {
            WatchError::InitialListFailed(e) | WatchError::WatchStartFailed(e) | WatchError::WatchFailed(e) => match e {
                kube::Error::Api(s) => s.code,
                _ => return FailureKind::Connection,
            },
            WatchError::ErrorEvent(s) => s.code,
            WatchError::NoResourceVersion => return FailureKind::NoResourceVersion,
        };
        match code {
            401 => FailureKind::Unauthorized,
            403 => FailureKind::Forbidden,
            404 => FailureKind::NotFound,
            410 => FailureKind::Expired,
            429 => FailureKind::Throttled,
            500..=599 => FailureKind::ServerError,
            _ => FailureKind::ApiError,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Connection => "connection",
            FailureKind::NoResourceVersion => "no_resource_version",
            FailureKind::Unauthorized => "unauthorized",
            FailureKind::Forbidden => "forbidden",
            FailureKind::NotFound => "not_found",
            FailureKind::Expired => "expired",
            FailureKind::Throttled => "throttled",
            FailureKind::ServerError => "server_error",
            FailureKind::ApiError => "api_error",
        }
    }
}
