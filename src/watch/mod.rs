//! The watch stage: the API server's client, discovery and access checks, and one
//! kube-runtime watcher per resource and namespace, its objects decoded and redacted into a
//! stream of observations (the pipeline's worker takes it from there).

pub mod access;
pub mod client;
pub mod discovery;
mod stream;
mod watched;

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource};
use kube::runtime::watcher;

use crate::config::KubernetesConfig;
use crate::model::{Object, ObjectError, Observed, ResourceType};
use crate::plan::Scope;
use crate::redact::Redactor;
use crate::telemetry::metrics::{self as m, Counters};

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
) -> impl Stream<Item = Result<Observed, watcher::Error>> + Send + 'static {
    let label: Arc<str> = scope.resource.label().into();
    let redactor = scope.redaction.redactor(&label);
    let decoding = scope.clone();
    // Registered on the first undecodable object, then reused.
    let mut undecodable = Counters::default();
    let mut count_undecodable = move || undecodable.increment((), |()| metrics::counter!(m::BAD_OBJECTS, "resource" => label.clone(), "reason" => "decode"));
    let settings = stream::Settings {
        label_selector: scope.label_selector.clone(),
        field_selector: scope.field_selector.clone(),
        page_size: kubernetes.page_size,
        streaming: kubernetes.streaming_lists,
    };
    stream::list_watch(api(client, scope), settings, resume_from).filter_map(move |item| {
        std::future::ready(match item {
            Ok(raw) => decode(raw, &decoding, &redactor, &mut count_undecodable).map(Ok),
            Err(e) => Some(Err(e)),
        })
    })
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
    /// 410 Gone: the watch's resourceVersion is too old; the watcher relists.
    Expired,
    Throttled,
    ServerError,
    /// Any other status.
    ApiError,
}

impl FailureKind {
    pub fn of(e: &watcher::Error) -> FailureKind {
        let code = match e {
            watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => match e {
                kube::Error::Api(s) => s.code,
                _ => return FailureKind::Connection,
            },
            watcher::Error::WatchError(s) => s.code,
            watcher::Error::NoResourceVersion => return FailureKind::NoResourceVersion,
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

/// The API of the scope's resource within its namespace (or all).
pub fn api(client: Client, scope: &Scope) -> Api<WatchedObject> {
    let r = &scope.resource;
    let ar = ApiResource { group: r.group.clone(), version: r.version.clone(), api_version: r.api_version(), kind: r.kind.clone(), plural: r.plural.clone() };
    match &scope.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    }
}

/// One watched object of `resource` as the later stages take it: decoded, with its
/// apiVersion and kind, and redacted by `redactor`.
pub fn decode_object(o: WatchedObject, resource: &ResourceType, redactor: &Redactor) -> Result<Object, ObjectError> {
    let mut value = o.value;
    // Items of a list response carry no apiVersion and kind (only watch events do):
    // every shipped object gets them, and redaction needs them to recognise a Secret.
    if let Some(fields) = value.as_object_mut() {
        fields.entry("apiVersion").or_insert_with(|| resource.api_version().into());
        fields.entry("kind").or_insert_with(|| resource.kind.clone().into());
    }
    let mut obj = Object::from_value(value)?;
    redactor.redact(&mut obj.value);
    Ok(obj)
}

/// Decodes and redacts the event's object; an object that cannot be decoded is counted
/// (by `count_undecodable`), logged with its key and skipped.
fn decode(raw: stream::Raw, scope: &Scope, redactor: &Redactor, count_undecodable: &mut impl FnMut()) -> Option<Observed> {
    let mut object = |o: WatchedObject| match decode_object(o, &scope.resource, redactor) {
        Ok(obj) => Some(obj),
        Err(e) => {
            count_undecodable();
            tracing::warn!(watch = %scope.describe(), error = %e, "Skipped an object that cannot be decoded");
            None
        }
    };
    Some(match raw {
        stream::Raw::Init => Observed::Init,
        stream::Raw::InitApply(o) => Observed::InitApply(object(o)?),
        stream::Raw::InitDone => Observed::InitDone,
        stream::Raw::Apply(o) => Observed::Apply(object(o)?),
        stream::Raw::Delete(o) => Observed::Delete(object(o)?),
        stream::Raw::Bookmark(version) => Observed::Bookmark(version),
        stream::Raw::Resumed => Observed::Resumed,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn list_items_get_their_type_and_secrets_among_them_are_redacted() {
        let secrets = ResourceType { group: String::new(), version: "v1".into(), kind: "Secret".into(), plural: "secrets".into(), namespaced: true };
        // As an item of a list response: no apiVersion, no kind.
        let item = json!({"metadata": {"name": "db", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "data": {"password": "aHVudGVyMg=="}});
        let watched: WatchedObject = serde_json::from_value(item).unwrap();
        let obj = decode_object(watched, &secrets, &Redactor::default()).unwrap();
        assert_eq!((obj.value["apiVersion"].as_str(), obj.value["kind"].as_str()), (Some("v1"), Some("Secret")));
        assert_ne!(obj.value["data"]["password"], "aHVudGVyMg==", "redacted: {}", obj.value);
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "uid": "u", "resourceVersion": "2"}});
        let obj = decode_object(serde_json::from_value(deployment).unwrap(), &crate::model::fixtures::deployments(), &Redactor::default()).unwrap();
        assert_eq!(obj.value["apiVersion"], "apps/v1", "a watch event's own type is kept");
    }
}
