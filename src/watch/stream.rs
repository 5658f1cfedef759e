//! The list and watch of one scope, as client-go's reflector does it: a (paged or
//! streaming) list, then a watch from the list's version, renewed from the last version
//! seen, a list again when the API server no longer has that version (410 Gone). It keeps
//! what kube-runtime's watcher keeps to itself: the list's own resourceVersion and the
//! watch's bookmarks, which move a checkpoint's position while the watched objects stay
//! quiet. With a checkpoint's version it starts by watching from that version instead of
//! listing (a resume).

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Request;
use kube::runtime::watcher::Error;
use rand::Rng;
use serde::Deserialize;

use super::{WatchedObject, lines};
use crate::model::{Object, Observed};

/// How a scope is listed and watched.
#[derive(Debug, Clone)]
pub struct Settings {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub page_size: u32,
    /// The list as a watch with the initial events (Kubernetes 1.27+ streaming lists).
    pub streaming: bool,
}

/// How long a freshly started resumed watch may stay silent before it counts as resumed:
/// an API server that no longer has the version says so (410) at once.
const SETTLE: Duration = Duration::from_millis(300);

/// How long one watch request lasts; the API server ends it then and it is renewed from
/// the last version seen.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// The version a streaming list asks for: none, so the API server answers with its state
/// as of now (a consistent read, waiting until its cache has caught up, or refusing with
/// 504 when it cannot), as client-go's reflector asks for it. `0` would take the cache as it
/// stands, which on a lagging API server is history.
const CONSISTENT: &str = "";

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

type Events = BoxStream<'static, kube::Result<WatchEvent<WatchedObject>>>;

/// One page of a list response, its items left as bytes (kube's `ObjectList` would buffer
/// them through its flattened type fields, which raw values cannot pass).
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Option<Vec<WatchedObject>>,
}

enum State {
    /// A list is due (first start, or the watch's version is gone).
    List,
    /// A paged list under way: the page's objects not yet yielded, the next page's token,
    /// the list's version.
    Paging {
        items: VecDeque<WatchedObject>,
        next: Option<String>,
        version: String,
    },
    /// A streaming list's initial events.
    Streaming(Events),
    /// The list's version went out; `InitDone` is next, then the watch from that version.
    Listed(String),
    /// A watch is due from this version.
    Connect(String),
    Watching {
        version: String,
        events: Events,
    },
}

struct ListWatch<D> {
    client: Client,
    /// The requests of the scope's resource in its namespace (or all).
    request: Request,
    settings: Settings,
    /// Each object's bytes into an `Object`; None for one that cannot be decoded (it says
    /// why itself), which is left out.
    decode: D,
    state: State,
    /// Failures in a row, for the backoff before the next request.
    failures: u32,
    /// Resuming from a checkpoint and not yet known to work: the first watch's events wait
    /// until `Observed::Resumed` went out.
    settling: bool,
    /// An item held back while `Observed::Resumed` goes first.
    held: Option<Observed>,
}

/// The list and watch of `request`'s resource, each object decoded by `decode`; with
/// `resume_from`, a watch from that version first (see the module's documentation). Errors
/// are yielded and followed by a backoff (client-go's: 0.8 s doubling to 30 s, with jitter);
/// the stream never ends.
pub fn list_watch<D>(
    client: Client,
    request: Request,
    settings: Settings,
    resume_from: Option<String>,
    decode: D,
) -> impl Stream<Item = Result<Observed, Error>> + Send
where
    D: FnMut(WatchedObject) -> Option<Object> + Send + 'static,
{
    let (state, settling) = match resume_from {
        Some(version) => (State::Connect(version), true),
        None => (State::List, false),
    };
    let lw = ListWatch { client, request, settings, decode, state, failures: 0, settling, held: None };
    futures::stream::unfold(lw, |mut lw| async move {
        let item = lw.next().await;
        Some((item, lw))
    })
}

impl<D: FnMut(WatchedObject) -> Option<Object>> ListWatch<D> {
    async fn next(&mut self) -> Result<Observed, Error> {
        if let Some(held) = self.held.take() {
            return Ok(held);
        }
        if self.failures > 0 {
            tokio::time::sleep(backoff(self.failures)).await;
        }
        loop {
            match self.step().await {
                Ok(Some(observed)) => {
                    self.failures = 0;
                    return Ok(observed);
                }
                Ok(None) => {}
                Err(e) => {
                    self.failures += 1;
                    return Err(e);
                }
            }
        }
    }

    /// One request or one buffered item: what to yield, if anything.
    async fn step(&mut self) -> Result<Option<Observed>, Error> {
        match std::mem::replace(&mut self.state, State::List) {
            State::List if self.settings.streaming => {
                let params = self.watch_params().initial_events();
                let events = watch(&self.client, &self.request, &params, CONSISTENT).await?;
                self.state = State::Streaming(events);
                Ok(Some(Observed::Init))
            }
            State::List => {
                self.state = page(&self.client, &self.request, &self.settings, None).await?;
                Ok(Some(Observed::Init))
            }
            State::Paging { mut items, next, version } => {
                if let Some(item) = items.pop_front() {
                    self.state = State::Paging { items, next, version };
                    return Ok((self.decode)(item).map(Observed::InitApply));
                }
                match next {
                    Some(token) => self.state = page(&self.client, &self.request, &self.settings, Some(token)).await?,
                    None => {
                        self.state = State::Listed(version.clone());
                        return Ok(Some(Observed::Bookmark(version)));
                    }
                }
                Ok(None)
            }
            State::Streaming(mut events) => match events.next().await {
                Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                    self.state = State::Streaming(events);
                    Ok((self.decode)(o).map(Observed::InitApply))
                }
                Some(Ok(WatchEvent::Bookmark(b))) if b.metadata.annotations.contains_key(INITIAL_EVENTS_END) => {
                    self.state = State::Watching { version: b.metadata.resource_version.clone(), events };
                    self.held = Some(Observed::InitDone);
                    Ok(Some(Observed::Bookmark(b.metadata.resource_version)))
                }
                Some(Ok(WatchEvent::Bookmark(_) | WatchEvent::Deleted(_))) => {
                    self.state = State::Streaming(events);
                    Ok(None)
                }
                Some(Ok(WatchEvent::Error(s))) => Err(Error::WatchError(s)),
                Some(Err(e)) => Err(Error::WatchFailed(e)),
                // Ended before the initial events did: list again.
                None => Ok(None),
            },
            State::Listed(version) => {
                self.state = State::Connect(version);
                Ok(Some(Observed::InitDone))
            }
            State::Connect(version) => match watch(&self.client, &self.request, &self.watch_params(), &version).await {
                Ok(events) => {
                    self.state = State::Watching { version, events };
                    Ok(None)
                }
                Err(Error::WatchStartFailed(kube::Error::Api(s))) if s.code == 410 => Ok(self.expired(&version)),
                Err(e) => {
                    self.state = State::Connect(version);
                    Err(e)
                }
            },
            State::Watching { version, mut events } => {
                let item = if self.settling {
                    match tokio::time::timeout(SETTLE, events.next()).await {
                        Ok(item) => item,
                        Err(_) => {
                            self.settling = false;
                            self.state = State::Watching { version, events };
                            return Ok(Some(Observed::Resumed));
                        }
                    }
                } else {
                    events.next().await
                };
                let observed = match item {
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => (self.decode)(o).map(Observed::Apply),
                    Some(Ok(WatchEvent::Deleted(o))) => (self.decode)(o).map(Observed::Delete),
                    Some(Ok(WatchEvent::Bookmark(b))) => Some(Observed::Bookmark(b.metadata.resource_version)),
                    Some(Ok(WatchEvent::Error(s))) if s.code == 410 => return Ok(self.expired(&version)),
                    Some(Ok(WatchEvent::Error(s))) => {
                        self.state = State::Connect(version);
                        return Err(Error::WatchError(s));
                    }
                    Some(Err(e)) => {
                        self.state = State::Connect(version);
                        return Err(Error::WatchFailed(e));
                    }
                    // The API server ended the watch (its timeout): renew it.
                    None => {
                        self.state = State::Connect(version);
                        return Ok(None);
                    }
                };
                let version = match &observed {
                    Some(Observed::Apply(o) | Observed::Delete(o)) => o.reference.resource_version.clone(),
                    Some(Observed::Bookmark(v)) => v.clone(),
                    _ => version,
                };
                self.state = State::Watching { version, events };
                if observed.is_some() && std::mem::take(&mut self.settling) {
                    self.held = observed;
                    return Ok(Some(Observed::Resumed));
                }
                Ok(observed)
            }
        }
    }

    fn watch_params(&self) -> WatchParams {
        let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        params.label_selector = self.settings.label_selector.clone();
        params.field_selector = self.settings.field_selector.clone();
        params
    }

    /// The API server no longer has `version`: list again (a resume that never started
    /// ships that list as a diff against its checkpoint).
    fn expired(&mut self, version: &str) -> Option<Observed> {
        tracing::info!(resource_version = %version, "The API server no longer has this version; listing");
        self.settling = false;
        self.state = State::List;
        None
    }
}

/// Starts a watch from `version`.
async fn watch(client: &Client, request: &Request, params: &WatchParams, version: &str) -> Result<Events, Error> {
    let mut req = request.watch(params, version).map_err(|e| Error::WatchStartFailed(kube::Error::BuildRequest(e)))?;
    req.extensions_mut().insert("watch");
    let events = lines::request_events(client, req).await.map_err(Error::WatchStartFailed)?;
    Ok(events.boxed())
}

/// Requests a page of the list (the first when `token` is `None`).
async fn page(client: &Client, request: &Request, settings: &Settings, token: Option<String>) -> Result<State, Error> {
    let mut params = ListParams { label_selector: settings.label_selector.clone(), field_selector: settings.field_selector.clone(), ..ListParams::default() }
        .limit(settings.page_size);
    // The first page names no version: a consistent read (client-go's relist after its
    // version is gone). A version of "0" would be served from a watch cache as it stands,
    // which on a lagging API server is older than what was already shipped.
    if let Some(t) = &token {
        params = params.continue_token(t);
    }
    let mut req = request.list(&params).map_err(|e| Error::InitialListFailed(kube::Error::BuildRequest(e)))?;
    req.extensions_mut().insert("list");
    let page: Page = client.request(req).await.map_err(Error::InitialListFailed)?;
    let version = page.metadata.resource_version.filter(|v| !v.is_empty()).ok_or(Error::NoResourceVersion)?;
    let next = page.metadata.continue_.filter(|t| !t.is_empty());
    Ok(State::Paging { items: page.items.unwrap_or_default().into(), next, version })
}

/// client-go's backoff: 0.8 s doubling per failure in a row, at most 30 s, each delay
/// stretched by up to its half at random so that many watches do not retry in step.
fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(800u64.saturating_mul(1 << failures.min(6).saturating_sub(1))).min(Duration::from_secs(30));
    let jitter = rand::rng().random_range(0.0..0.5);
    base.mul_f64(1.0 + jitter).min(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::TryStreamExt;
    use serde_json::json;

    use super::*;
    use crate::model::fixtures::configmaps;
    use crate::redact::Redactor;
    use crate::watch::Decoder;

    /// An API server that answers each request with the next scripted body of its kind
    /// (list or watch), and notes every request's path and query.
    fn scripted(lists: Vec<serde_json::Value>, watches: Vec<Vec<serde_json::Value>>) -> (Client, Request, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new((VecDeque::from(lists), VecDeque::from(watches))));
        let noted = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let uri = req.uri().to_string();
            noted.lock().unwrap().push(uri.clone());
            let mut script = script.lock().unwrap();
            let body = if uri.contains("watch=true") {
                let lines = script.1.pop_front().unwrap_or_default();
                lines.iter().map(|l| format!("{l}\n")).collect::<String>().into_bytes()
            } else {
                script.0.pop_front().expect("a scripted list").to_string().into_bytes()
            };
            async move { Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(body))) }
        });
        (Client::new(service, "ns"), Request::new("/api/v1/namespaces/ns/configmaps"), seen)
    }

    /// The list and watch of the scripted API server, objects decoded as the bridge does.
    fn watch(
        server: (Client, Request, Arc<Mutex<Vec<String>>>),
        settings: Settings,
        resume_from: Option<String>,
    ) -> (impl Stream<Item = Result<Observed, Error>>, Arc<Mutex<Vec<String>>>) {
        let (client, request, seen) = server;
        let decoder = Decoder::new(&configmaps(), crate::json::Scanner::new(&[], &[]).unwrap(), &[], Redactor::default());
        (list_watch(client, request, settings, resume_from, move |o: WatchedObject| decoder.decode(&o.0).ok()), seen)
    }

    fn cm(name: &str, rv: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv}})
    }

    fn settings() -> Settings {
        Settings { label_selector: None, field_selector: None, page_size: 1, streaming: false }
    }

    /// The first `n` items, each as `kind name-or-version`.
    async fn first(stream: impl Stream<Item = Result<Observed, Error>>, n: usize) -> Vec<String> {
        stream
            .take(n)
            .map_ok(|observed| match observed {
                Observed::Init => "init".to_string(),
                Observed::InitApply(o) => format!("listed {}", o.reference.name),
                Observed::InitDone => "listed".to_string(),
                Observed::Apply(o) => format!("apply {}", o.reference.name),
                Observed::Delete(o) => format!("delete {}", o.reference.name),
                Observed::Bookmark(v) => format!("at {v}"),
                Observed::Resumed => "resumed".to_string(),
            })
            .try_collect()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_paged_list_then_a_watch_yield_the_lists_version_and_every_bookmark() {
        let lists = vec![
            json!({"metadata": {"resourceVersion": "10", "continue": "next"}, "items": [cm("a", "3")]}),
            json!({"metadata": {"resourceVersion": "10"}, "items": [cm("b", "5")]}),
        ];
        let watches = vec![vec![
            json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "15"}}}),
            json!({"type": "MODIFIED", "object": cm("a", "16")}),
        ]];
        let (stream, seen) = watch(scripted(lists, watches), settings(), None);
        let items = first(stream, 7).await;
        assert_eq!(items, ["init", "listed a", "listed b", "at 10", "listed", "at 15", "apply a"]);
        let seen = seen.lock().unwrap();
        assert!(seen[0].contains("limit=1"), "{seen:?}");
        assert!(seen[1].contains("continue=next"), "{seen:?}");
        assert!(
            seen[2].contains("watch=true") && seen[2].contains("resourceVersion=10") && seen[2].contains("allowWatchBookmarks=true"),
            "from the list's version: {seen:?}"
        );
    }

    #[tokio::test]
    async fn a_watch_renews_from_the_last_version_seen_and_lists_again_when_it_is_gone() {
        let lists = vec![json!({"metadata": {"resourceVersion": "2"}, "items": []}), json!({"metadata": {"resourceVersion": "40"}, "items": [cm("c", "39")]})];
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old", "reason": "Expired", "code": 410}});
        let watches = vec![vec![json!({"type": "DELETED", "object": cm("a", "7")})], vec![gone]];
        let (stream, seen) = watch(scripted(lists, watches), settings(), None);
        let items = first(stream, 8).await;
        assert_eq!(items, ["init", "at 2", "listed", "delete a", "init", "listed c", "at 40", "listed"]);
        let seen = seen.lock().unwrap();
        assert!(seen[1].contains("resourceVersion=2") && seen[2].contains("resourceVersion=7"), "renewed from the delete's version: {seen:?}");
    }

    #[tokio::test]
    async fn a_resume_watches_from_the_checkpoint_and_says_so_before_the_first_event() {
        let (stream, seen) = watch(scripted(Vec::new(), vec![vec![json!({"type": "ADDED", "object": cm("n", "8")})]]), settings(), Some("7".into()));
        let items = first(stream, 2).await;
        assert_eq!(items, ["resumed", "apply n"]);
        assert!(seen.lock().unwrap()[0].contains("resourceVersion=7"));
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old", "reason": "Expired", "code": 410}});
        let (stream, _) =
            watch(scripted(vec![json!({"metadata": {"resourceVersion": "9"}, "items": [cm("n", "8")]})], vec![vec![gone]]), settings(), Some("7".into()));
        let items = first(stream, 4).await;
        assert_eq!(items, ["init", "listed n", "at 9", "listed"], "the version is gone: a list, and no `resumed`");
    }

    /// A request's query parameters (URL-decoded), sorted by name.
    fn query(uri: &str) -> Vec<(String, String)> {
        let uri: http::Uri = uri.parse().unwrap();
        let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).into_owned().collect();
        pairs.sort();
        pairs
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        pairs.sort();
        pairs
    }

    fn gone() -> serde_json::Value {
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old", "reason": "Expired", "code": 410}})
    }

    /// Pins what every start and relist path sends, whatever the client library makes of
    /// its parameters: each list is a consistent read (no `resourceVersion`, or an empty one
    /// on a streaming list), never `resourceVersion=0`, which a lagging API server answers
    /// from a stale cache.
    #[tokio::test]
    async fn every_list_on_every_path_is_a_consistent_read() {
        let watch_from = |v: &str| pairs(&[("watch", "true"), ("timeoutSeconds", "290"), ("allowWatchBookmarks", "true"), ("resourceVersion", v)]);
        let first_page = pairs(&[("limit", "1")]);
        // Paged: the first start, a second page, the watch, a relist after 410 Gone.
        let lists = vec![
            json!({"metadata": {"resourceVersion": "10", "continue": "next"}, "items": [cm("a", "3")]}),
            json!({"metadata": {"resourceVersion": "10"}, "items": [cm("b", "5")]}),
            json!({"metadata": {"resourceVersion": "20"}, "items": []}),
        ];
        let (stream, seen) = watch(scripted(lists, vec![vec![gone()]]), settings(), None);
        first(stream, 8).await;
        let seen: Vec<_> = seen.lock().unwrap().iter().map(|u| query(u)).collect();
        assert_eq!(seen[0], first_page, "the first list");
        assert_eq!(seen[1], pairs(&[("limit", "1"), ("continue", "next")]), "its next page");
        assert_eq!(seen[2], watch_from("10"), "the watch from the list's version");
        assert_eq!(seen[3], first_page, "the relist after 410 Gone");
        // A resume: the watch from the checkpoint's version; once that is gone, a consistent list.
        let (stream, seen) =
            watch(scripted(vec![json!({"metadata": {"resourceVersion": "9"}, "items": []})], vec![vec![gone()]]), settings(), Some("7".into()));
        first(stream, 3).await;
        let seen: Vec<_> = seen.lock().unwrap().iter().map(|u| query(u)).collect();
        assert_eq!(seen[..2], [watch_from("7"), first_page.clone()], "a resume, then the list after its version is gone");
        // Streaming: the first start and the relist after 410 Gone.
        let end = |v: &str| json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": v, "annotations": {INITIAL_EVENTS_END: "true"}}}});
        let watches = vec![vec![end("12"), gone()], vec![end("30")]];
        let (stream, seen) = watch(scripted(Vec::new(), watches), Settings { streaming: true, ..settings() }, None);
        first(stream, 6).await;
        let streaming = pairs(&[
            ("watch", "true"),
            ("timeoutSeconds", "290"),
            ("allowWatchBookmarks", "true"),
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("resourceVersion", ""),
        ]);
        let seen: Vec<_> = seen.lock().unwrap().iter().map(|u| query(u)).collect();
        assert_eq!(seen, [streaming.clone(), streaming], "the streaming list, and again after 410 Gone");
    }

    #[tokio::test]
    async fn a_streaming_list_ends_at_its_bookmark() {
        let watches = vec![vec![
            json!({"type": "ADDED", "object": cm("a", "3")}),
            json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "12", "annotations": {INITIAL_EVENTS_END: "true"}}}}),
            json!({"type": "MODIFIED", "object": cm("a", "13")}),
        ]];
        let (stream, seen) = watch(scripted(Vec::new(), watches), Settings { streaming: true, ..settings() }, None);
        let items = first(stream, 5).await;
        assert_eq!(items, ["init", "listed a", "at 12", "listed", "apply a"]);
        assert!(seen.lock().unwrap()[0].contains("sendInitialEvents=true"));
    }
}
