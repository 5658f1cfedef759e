//! The watch stage: one kube-runtime watcher per resource and namespace, behind backoff,
//! feeding that watch's classifier.

pub mod access;
pub mod client;
pub mod discovery;
mod output;
mod scope;
mod watched;

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource};
use kube::runtime::{WatchStreamExt, watcher};
use kube::Client;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::change::{Change, Classifier, Fingerprinter, Object, ObjectError, WatchEvent};
use crate::config::KubernetesConfig;
use crate::event::{self, Envelope};
use crate::event::redact::Redactor;
use crate::resource::Resource;
use crate::telemetry::{WatchHealth, metrics as m};

pub use output::Output;
pub use scope::Scope;
pub use watched::WatchedObject;

/// Everything one watch task needs.
pub struct Watch {
    pub client: Client,
    pub cluster: Arc<str>,
    pub scope: Arc<Scope>,
    pub kubernetes: KubernetesConfig,
    /// Where the watch reports its errors and recoveries (for /readyz).
    pub health: WatchHealth,
}

impl Watch {
    /// Watches until `stop` is cancelled or a route's queue is closed; `queues` holds each
    /// route's queue, by route position. Watch errors never end it: they are logged and
    /// counted, and the watcher resumes (or relists) after a backoff.
    pub async fn run(self, queues: Vec<mpsc::Sender<Envelope>>, stop: CancellationToken) {
        let scope = self.scope.clone();
        let label = scope.resource.label();
        let stream = watcher(api(self.client.clone(), &scope), self.watcher_config()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut classifier = Classifier::new(label.clone(), Fingerprinter::new(&scope.ignore_fields), scope.relist, scope.keeps_content());
        // Resyncs run in this task, between watch events: each object's resync event
        // carries its state at emission time, in order with its live events.
        let mut resync = scope.resync.map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
        let mut changes = Vec::new();
        // Per-event gauges, registered once (a lookup by labels allocates them).
        let indexed = metrics::gauge!(m::INDEXED, "resource" => label.clone());
        let queued: Vec<metrics::Gauge> = scope.outputs.iter().map(|o| metrics::gauge!(m::QUEUED, "route" => o.route_name.to_string())).collect();
        let redactor = scope.redaction.redactor(&label);
        tracing::info!(watch = %scope.describe(), "Watch started");
        loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick(&mut resync) => {
                    if !classifier.resync(&mut changes) {
                        tracing::debug!(watch = %scope.describe(), "Resync skipped: a sync is under way");
                    }
                    if !self.ship(&scope, &label, &mut changes, &queues, &queued, &stop).await {
                        return;
                    }
                    continue;
                }
                item = stream.next() => item,
            };
            let Some(item) = item else { return };
            let event = match item {
                Ok(e) => e,
                Err(e) => {
                    let kind = error_kind(&e);
                    metrics::counter!(m::WATCH_ERRORS, "resource" => label.clone(), "error_kind" => kind).increment(1);
                    self.health.failed(kind);
                    tracing::warn!(watch = %scope.describe(), error_kind = kind, error = %e, "Watch failed; backing off");
                    continue;
                }
            };
            // `Init` comes before each list is even tried; anything else proves the watch
            // works (an object, a completed list, a live event).
            if !matches!(event, watcher::Event::Init) {
                self.health.worked();
            }
            let Some(event) = decode(event, &scope, &redactor, &label) else { continue };
            classifier.handle(event, &mut changes);
            indexed.set(classifier.index_len() as f64);
            if !self.ship(&scope, &label, &mut changes, &queues, &queued, &stop).await {
                return;
            }
        }
    }

    /// Builds and queues the events of `changes` for each route that ships them; false
    /// when stopping. A full route queue pauses this watch (and with it every route it
    /// feeds) until that route catches up: nothing is dropped.
    /// `queued` holds the queue gauge of each of the scope's outputs.
    async fn ship(&self, scope: &Scope, label: &str, changes: &mut Vec<Change>, queues: &[mpsc::Sender<Envelope>], queued: &[metrics::Gauge], stop: &CancellationToken) -> bool {
        for change in changes.drain(..) {
            let last = scope.outputs.len().saturating_sub(1);
            let mut change = Some(change);
            for (i, output) in scope.outputs.iter().enumerate() {
                let c = change.as_ref().expect("taken only by the last output");
                if !output.passes(c) {
                    if let Change::Object(o) = c {
                        metrics::counter!(m::FILTERED, "resource" => label.to_string(), "type" => o.change.as_str(), "route" => output.route_name.to_string())
                            .increment(1);
                    }
                    continue;
                }
                // The last output takes the change; the others build from a copy.
                let c = if i == last { change.take().expect("not taken yet") } else { c.clone() };
                let env = match event::build(&self.cluster, scope, output, c, chrono::Utc::now()) {
                    Ok(env) => env,
                    Err(e) => {
                        metrics::counter!(m::BAD_OBJECTS, "resource" => label.to_string(), "reason" => "encode").increment(1);
                        tracing::warn!(watch = %scope.describe(), error = %e, "Skipped an object that cannot be encoded");
                        continue;
                    }
                };
                let tx = &queues[output.route];
                tokio::select! {
                    _ = stop.cancelled() => return false,
                    sent = tx.send(env) => if sent.is_err() { return false },
                }
                // Set where the queue fills (here) and where it drains (the dispatcher).
                queued[i].set((tx.max_capacity() - tx.capacity()) as f64);
            }
        }
        true
    }

    fn watcher_config(&self) -> watcher::Config {
        let mut c = watcher::Config::default().page_size(self.kubernetes.page_size);
        // Lists served from the API server's watch cache (resourceVersion=0) are cheap for
        // it; the watch then continues from the list's version, so nothing is missed.
        c = if self.kubernetes.streaming_lists { c.streaming_lists() } else { c.any_semantic() };
        if let Some(l) = &self.scope.label_selector {
            c = c.labels(l);
        }
        if let Some(f) = &self.scope.field_selector {
            c = c.fields(f);
        }
        c
    }
}

/// The bounded `error_kind` of a watch error, by the API server's status code.
fn error_kind(e: &watcher::Error) -> &'static str {
    let code = match e {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(s) => s.code,
            _ => return "connection",
        },
        watcher::Error::WatchError(s) => s.code,
        watcher::Error::NoResourceVersion => return "no_resource_version",
    };
    match code {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        410 => "expired",
        429 => "throttled",
        500..=599 => "server_error",
        _ => "api_error",
    }
}

/// The next tick of an optional timer; never, without one.
async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The API of the scope's resource within its namespace (or all).
pub fn api(client: Client, scope: &Scope) -> Api<WatchedObject> {
    let r = &scope.resource;
    let ar = ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: r.api_version(),
        kind: r.kind.clone(),
        plural: r.plural.clone(),
    };
    match &scope.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    }
}

/// One watched object of `resource` as the later stages take it: decoded, with its
/// apiVersion and kind, and redacted by `redactor`.
pub fn decode_object(o: WatchedObject, resource: &Resource, redactor: &Redactor) -> Result<Object, ObjectError> {
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

/// Decodes and redacts the event's object; an object that cannot be decoded is counted,
/// logged with its key and skipped.
fn decode(event: watcher::Event<WatchedObject>, scope: &Scope, redactor: &Redactor, label: &str) -> Option<WatchEvent> {
    let object = |o: WatchedObject| match decode_object(o, &scope.resource, redactor) {
        Ok(obj) => Some(obj),
        Err(e) => {
            metrics::counter!(m::BAD_OBJECTS, "resource" => label.to_string(), "reason" => "decode").increment(1);
            tracing::warn!(watch = %scope.describe(), error = %e, "Skipped an object that cannot be decoded");
            None
        }
    };
    Some(match event {
        watcher::Event::Init => WatchEvent::Init,
        watcher::Event::InitApply(o) => WatchEvent::InitApply(object(o)?),
        watcher::Event::InitDone => WatchEvent::InitDone,
        watcher::Event::Apply(o) => WatchEvent::Apply(object(o)?),
        watcher::Event::Delete(o) => WatchEvent::Delete(object(o)?),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn list_items_get_their_type_and_secrets_among_them_are_redacted() {
        let secrets = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "Secret".into(),
            plural: "secrets".into(),
            namespaced: true,
        };
        // As an item of a list response: no apiVersion, no kind.
        let item = json!({"metadata": {"name": "db", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "data": {"password": "aHVudGVyMg=="}});
        let watched: WatchedObject = serde_json::from_value(item).unwrap();
        let obj = decode_object(watched, &secrets, &Redactor::default()).unwrap();
        assert_eq!((obj.value["apiVersion"].as_str(), obj.value["kind"].as_str()), (Some("v1"), Some("Secret")));
        assert_ne!(obj.value["data"]["password"], "aHVudGVyMg==", "redacted: {}", obj.value);
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "uid": "u", "resourceVersion": "2"}});
        let obj = decode_object(serde_json::from_value(deployment).unwrap(), &crate::resource::fixtures::deployments(), &Redactor::default()).unwrap();
        assert_eq!(obj.value["apiVersion"], "apps/v1", "a watch event's own type is kept");
    }
}
