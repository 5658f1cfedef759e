//! The list and watch of one scope, as client-go's reflector does it: a (paged or
//! streaming) list, then a watch from the list's version, renewed from the last version
//! seen, a list again when the API server no longer has that version (410 Gone). It keeps
//! what kube-runtime's watcher keeps to itself: the list's own resourceVersion and the
//! watch's bookmarks, which move a checkpoint's position while the watched objects stay
//! quiet. With a checkpoint's version it starts by watching from that version instead of
//! listing (a resume). A watch that hears nothing for a while, or is reconnected after a
//! failure, or is refused as "Too large resource version", asks the API server where it
//! stands, and is given up and listed again when `stall::judge` says so.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Request;
use rand::Rng;
use serde::Deserialize;
// tokio's clock, so that the tests can pause and advance it.
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::error::WatchError;
use super::{WatchedObject, lines, position, stall};
use crate::model::{Object, Observed, Stall};

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
    /// A paged list under way: the page's objects not yet yielded, the next page (already
    /// requested, so that the API server reads it while these are handled), the list's
    /// version.
    Paging {
        items: VecDeque<WatchedObject>,
        next: Option<AbortOnDropHandle<Result<Page, WatchError>>>,
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
    /// When the watch last heard from the API server (an event, a bookmark, its start).
    heard: Instant,
    /// When to ask the API server where it stands unless the watch hears from it first.
    check_at: Instant,
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
) -> impl Stream<Item = Result<Observed, WatchError>> + Send
where
    D: FnMut(WatchedObject) -> Option<Object> + Send + 'static,
{
    let (state, settling) = match resume_from {
        Some(version) => (State::Connect(version), true),
        None => (State::List, false),
    };
    let now = Instant::now();
    let lw = ListWatch { client, request, settings, decode, state, failures: 0, settling, held: None, heard: now, check_at: now + stall::CHECK_AFTER };
    futures::stream::unfold(lw, |mut lw| async move {
        let item = lw.next().await;
        Some((item, lw))
    })
}

impl<D: FnMut(WatchedObject) -> Option<Object>> ListWatch<D> {
    async fn next(&mut self) -> Result<Observed, WatchError> {
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
    async fn step(&mut self) -> Result<Option<Observed>, WatchError> {
        match std::mem::replace(&mut self.state, State::List) {
            State::List if self.settings.streaming => {
                let params = self.watch_params().initial_events();
                let events = watch(&self.client, &self.request, &params, CONSISTENT).await?;
                self.state = State::Streaming(events);
                Ok(Some(Observed::Init))
            }
            State::List => {
                let first = page(self.client.clone(), self.request.clone(), self.settings.clone(), None).await?;
                self.state = self.paging(first)?;
                Ok(Some(Observed::Init))
            }
            State::Paging { mut items, next, version } => {
                if let Some(item) = items.pop_front() {
                    self.state = State::Paging { items, next, version };
                    return Ok((self.decode)(item).map(Observed::InitApply));
                }
                match next {
                    Some(next) => {
                        // The request runs on its own task, which only a panic ends early.
                        let fetched = next.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
                        self.state = self.paging(fetched)?;
                    }
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
                    self.heard_now();
                    self.watching(b.metadata.resource_version.clone(), events);
                    self.held = Some(Observed::InitDone);
                    Ok(Some(Observed::Bookmark(b.metadata.resource_version)))
                }
                Some(Ok(WatchEvent::Bookmark(_) | WatchEvent::Deleted(_))) => {
                    self.state = State::Streaming(events);
                    Ok(None)
                }
                Some(Ok(WatchEvent::Error(s))) => Err(WatchError::ErrorEvent(s)),
                Some(Err(e)) => Err(WatchError::WatchFailed(e)),
                // Ended before the initial events did: list again.
                None => Ok(None),
            },
            State::Listed(version) => {
                self.heard_now();
                self.state = State::Connect(version);
                Ok(Some(Observed::InitDone))
            }
            State::Connect(version) => match watch(&self.client, &self.request, &self.watch_params(), &version).await {
                Ok(events) => {
                    self.watching(version, events);
                    Ok(None)
                }
                Err(WatchError::WatchStartFailed(kube::Error::Api(s))) if s.code == 410 => Ok(self.expired(&version)),
                Err(e) => {
                    if let WatchError::WatchStartFailed(kube::Error::Api(s)) = &e
                        && stall::too_large(s)
                        && let Some(stall) = self.check(&version, true).await
                    {
                        return Ok(self.stalled(stall));
                    }
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
                    match tokio::time::timeout_at(self.check_at, events.next()).await {
                        Ok(item) => item,
                        // Nothing heard for a while (or just reconnected): where does the API
                        // server stand?
                        Err(_) => {
                            if let Some(stall) = self.check(&version, false).await {
                                return Ok(self.stalled(stall));
                            }
                            self.state = State::Watching { version, events };
                            return Ok(None);
                        }
                    }
                };
                if item.is_some() {
                    self.heard_now();
                }
                let observed = match item {
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => (self.decode)(o).map(Observed::Apply),
                    Some(Ok(WatchEvent::Deleted(o))) => (self.decode)(o).map(Observed::Delete),
                    Some(Ok(WatchEvent::Bookmark(b))) => Some(Observed::Bookmark(b.metadata.resource_version)),
                    Some(Ok(WatchEvent::Error(s))) if s.code == 410 => return Ok(self.expired(&version)),
                    Some(Ok(WatchEvent::Error(s))) => {
                        if stall::too_large(&s)
                            && let Some(stall) = self.check(&version, true).await
                        {
                            return Ok(self.stalled(stall));
                        }
                        self.state = State::Connect(version);
                        return Err(WatchError::ErrorEvent(s));
                    }
                    Some(Err(e)) => {
                        self.state = State::Connect(version);
                        return Err(WatchError::WatchFailed(e));
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

    /// A page of the list as the state to go on from: its objects, and the next page
    /// requested at once when there is one.
    fn paging(&self, fetched: Page) -> Result<State, WatchError> {
        let version = fetched.metadata.resource_version.filter(|v| !v.is_empty()).ok_or(WatchError::NoResourceVersion)?;
        let next = fetched
            .metadata
            .continue_
            .filter(|t| !t.is_empty())
            .map(|token| AbortOnDropHandle::new(tokio::spawn(page(self.client.clone(), self.request.clone(), self.settings.clone(), Some(token)))));
        Ok(State::Paging { items: fetched.items.unwrap_or_default().into(), next, version })
    }

    fn watch_params(&self) -> WatchParams {
        let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        params.label_selector = self.settings.label_selector.clone();
        params.field_selector = self.settings.field_selector.clone();
        params
    }

    /// A watch from `version` is under way. Right after a failure (the API server may have
    /// been restarted on another history) its silence counts from now and the API server is
    /// asked at once where it stands. A renewal (the API server ended the watch on its
    /// timeout) goes on counting: ending a watch says nothing of the resource's progress.
    fn watching(&mut self, version: String, events: Events) {
        if self.failures > 0 {
            self.heard = Instant::now();
            self.check_at = self.heard;
        }
        self.state = State::Watching { version, events };
    }

    /// The watch heard from the API server (an event, a bookmark, a completed list).
    fn heard_now(&mut self) {
        self.heard = Instant::now();
        self.check_at = self.heard + stall::CHECK_AFTER;
    }

    /// Asks the API server for its current version and judges the watch at `position` by
    /// it (`too_large`: the API server refused the watch so). A replaced history is only
    /// believed when a second read `stall::CONFIRM_AFTER` later says so too (an API server
    /// that has just started may answer once with a version it does not stand at). A failed
    /// read is no verdict: the watch goes on, and is asked about again after
    /// `stall::CHECK_AFTER`.
    async fn check(&mut self, position: &str, too_large: bool) -> Option<Stall> {
        self.check_at = Instant::now() + stall::CHECK_AFTER;
        let judge = |current: &str, silent_for| if too_large { stall::judge_too_large(position, current) } else { stall::judge(position, current, silent_for) };
        let mut current = current_version(&self.client, &self.request, &self.settings).await?;
        let reason = judge(&current, self.heard.elapsed())?;
        if reason.rewound() {
            tokio::time::sleep(stall::CONFIRM_AFTER).await;
            let first = std::mem::replace(&mut current, current_version(&self.client, &self.request, &self.settings).await?);
            if judge(&current, self.heard.elapsed()) != Some(reason) {
                tracing::debug!(position, first = %first, then = %current, "The API server's version was behind the watch's once, not twice; watching on");
                return None;
            }
        }
        Some(Stall { reason, position: position.to_string(), current })
    }

    /// The watch is given up (see `check`): the stall goes out, a list is next.
    fn stalled(&mut self, stall: Stall) -> Option<Observed> {
        self.settling = false;
        self.state = State::List;
        Some(Observed::Stalled(stall))
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

/// The API server's current version for the watch of `request`; `None` (logged) when it
/// cannot be read.
async fn current_version(client: &Client, request: &Request, settings: &Settings) -> Option<String> {
    match position::version_at(client, request, settings.label_selector.clone(), settings.field_selector.clone()).await {
        Ok(current) => Some(current),
        Err(e) => {
            tracing::debug!(error = %e, "Could not read the API server's current version; watching on");
            None
        }
    }
}

/// Starts a watch from `version`.
async fn watch(client: &Client, request: &Request, params: &WatchParams, version: &str) -> Result<Events, WatchError> {
    let mut req = request.watch(params, version).map_err(|e| WatchError::WatchStartFailed(kube::Error::BuildRequest(e)))?;
    req.extensions_mut().insert("watch");
    let events = lines::request_events(client, req).await.map_err(WatchError::WatchStartFailed)?;
    Ok(events.boxed())
}

/// Requests a page of the list (the first when `token` is `None`).
async fn page(client: Client, request: Request, settings: Settings, token: Option<String>) -> Result<Page, WatchError> {
    let mut params = ListParams { label_selector: settings.label_selector.clone(), field_selector: settings.field_selector.clone(), ..ListParams::default() }
        .limit(settings.page_size);
    // The first page names no version: a consistent read (client-go's relist after its
    // version is gone). A version of "0" would be served from a watch cache as it stands,
    // which on a lagging API server is older than what was already shipped.
    if let Some(t) = &token {
        params = params.continue_token(t);
    }
    let mut req = request.list(&params).map_err(|e| WatchError::InitialListFailed(kube::Error::BuildRequest(e)))?;
    req.extensions_mut().insert("list");
    client.request(req).await.map_err(WatchError::InitialListFailed)
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
    use crate::model::StallReason;
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
    ) -> (impl Stream<Item = Result<Observed, WatchError>>, Arc<Mutex<Vec<String>>>) {
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
    async fn first(stream: impl Stream<Item = Result<Observed, WatchError>>, n: usize) -> Vec<String> {
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
                Observed::Stalled(s) => format!("stalled {} {}>{}", s.reason.as_str(), s.position, s.current),
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
    async fn the_next_page_is_requested_while_the_objects_of_the_page_before_it_are_handled() {
        let lists = vec![
            json!({"metadata": {"resourceVersion": "10", "continue": "next"}, "items": [cm("a", "3"), cm("b", "4"), cm("c", "5")]}),
            json!({"metadata": {"resourceVersion": "10"}, "items": [cm("d", "6")]}),
        ];
        let (stream, seen) = watch(scripted(lists, vec![]), settings(), None);
        let mut stream = std::pin::pin!(stream);
        assert!(matches!(stream.next().await, Some(Ok(Observed::Init))));
        assert!(matches!(stream.next().await, Some(Ok(Observed::InitApply(_)))), "the first page's first object");
        // The page's other objects are still to be handled; the next page's request goes out
        // on its own task meanwhile.
        tokio::time::timeout(Duration::from_secs(5), async {
            while seen.lock().unwrap().len() < 2 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the second page requested before the first page's objects were all handled");
        assert!(seen.lock().unwrap()[1].contains("continue=next"));
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

    fn version(v: &str) -> serde_json::Value {
        json!({"metadata": {"resourceVersion": v}, "items": []})
    }

    /// The requests a scripted API server received.
    type Seen = Arc<Mutex<Vec<String>>>;

    /// A list-watch of the scripted API server (`lists` answer its version checks and
    /// lists) already watching from `version` on a connection that stays silent.
    fn silent(lists: Vec<serde_json::Value>, version: &str) -> (ListWatch<impl FnMut(WatchedObject) -> Option<Object>>, Seen) {
        let (client, request, seen) = scripted(lists, Vec::new());
        let decoder = Decoder::new(&configmaps(), crate::json::Scanner::new(&[], &[]).unwrap(), &[], Redactor::default());
        let now = Instant::now();
        let mut lw = ListWatch {
            client,
            request,
            settings: settings(),
            decode: move |o: WatchedObject| decoder.decode(&o.0).ok(),
            state: State::List,
            failures: 0,
            settling: false,
            held: None,
            heard: now,
            check_at: now + stall::CHECK_AFTER,
        };
        lw.watching(version.to_string(), futures::stream::pending().boxed());
        (lw, seen)
    }

    fn stall_of(observed: Result<Observed, WatchError>) -> Stall {
        match observed {
            Ok(Observed::Stalled(stall)) => stall,
            other => panic!("expected a stall, got {other:?}"),
        }
    }

    /// etcd restored from a backup under a silent watch: the first check finds the API
    /// server behind the watch's position, and the watch lists again (a consistent read).
    #[tokio::test(start_paused = true)]
    async fn a_silent_watch_ahead_of_the_api_server_is_given_up_at_the_first_check() {
        let (mut lw, seen) = silent(vec![version("420"), version("421"), json!({"metadata": {"resourceVersion": "422"}, "items": [cm("a", "5")]})], "500");
        let start = Instant::now();
        let stall = stall_of(lw.next().await);
        assert_eq!(stall, Stall { reason: StallReason::Ahead, position: "500".into(), current: "421".into() });
        assert_eq!(start.elapsed(), stall::CHECK_AFTER + stall::CONFIRM_AFTER, "asked after the check period of silence, and again to confirm");
        let mut after = Vec::new();
        for _ in 0..4 {
            after.push(lw.next().await.unwrap());
        }
        assert_eq!(first(futures::stream::iter(after.into_iter().map(Ok)), 4).await, ["init", "listed a", "at 422", "listed"]);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.iter().map(|u| query(u)).collect::<Vec<_>>(), vec![pairs(&[("limit", "1")]); 3], "two consistent reads, then a consistent list");
    }

    /// An API server that answers once with a version behind the watch's, and then with
    /// one past it, has not lost its history: the watch goes on.
    #[tokio::test(start_paused = true)]
    async fn one_answer_behind_the_watch_is_not_a_replaced_history() {
        let (mut lw, seen) = silent(vec![version("1"), version("501")], "500");
        let pending = tokio::time::timeout(stall::CHECK_AFTER * 2 - Duration::from_millis(1), lw.next()).await;
        assert!(pending.is_err(), "no stall, and nothing else: {pending:?}");
        assert_eq!(seen.lock().unwrap().len(), 2, "the read, and the one that did not confirm it");
    }

    /// A watch that hears nothing while the API server's version moves on: checked each
    /// period, given up at the first check past the silence limit.
    #[tokio::test(start_paused = true)]
    async fn a_watch_silent_past_the_limit_while_the_api_server_moved_on_lists_again() {
        let (mut lw, seen) = silent(vec![version("600"), version("600"), version("600"), version("610"), version("611")], "500");
        let start = Instant::now();
        let stall = stall_of(lw.next().await);
        assert_eq!((stall.reason, stall.current.as_str()), (StallReason::Silent, "610"));
        assert_eq!(start.elapsed(), stall::CHECK_AFTER * 4, "the fourth check is the first past {:?}", stall::SILENCE_LIMIT);
        assert_eq!(seen.lock().unwrap().len(), 4, "one read per check");
        assert!(matches!(lw.next().await, Ok(Observed::Init)), "a list follows");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_hears_bookmarks_is_never_checked() {
        let bookmark = |v: &str| {
            Ok(WatchEvent::Bookmark(serde_json::from_value(json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": v}})).unwrap()))
        };
        let (mut lw, seen) = silent(Vec::new(), "500");
        // A bookmark each minute, for ten minutes.
        let events = futures::stream::iter((1..=10).map(move |i| bookmark(&(500 + i).to_string())))
            .then(|e| async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                e
            })
            .chain(futures::stream::pending());
        lw.watching("500".into(), events.boxed());
        for i in 1..=10 {
            assert!(matches!(lw.next().await, Ok(Observed::Bookmark(v)) if v == (500 + i).to_string()));
        }
        assert!(seen.lock().unwrap().is_empty(), "no check while bookmarks come");
    }

    /// Right after a failure the API server may have come back on another history: the
    /// reconnected watch asks at once.
    #[tokio::test(start_paused = true)]
    async fn a_watch_reconnected_after_a_failure_asks_the_api_server_at_once() {
        let (mut lw, _) = silent(vec![version("420"), version("420")], "500");
        lw.failures = 1;
        lw.watching("500".into(), futures::stream::pending().boxed());
        let start = Instant::now();
        assert_eq!(stall_of(lw.next().await).reason, StallReason::Ahead);
        assert!(start.elapsed() < stall::CONFIRM_AFTER + Duration::from_secs(2), "after the backoff and the confirmation only: {:?}", start.elapsed());
    }

    fn too_large() -> serde_json::Value {
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 504, "reason": "Timeout",
            "message": "Timeout: Too large resource version: 500, current: 420", "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]}}})
    }

    /// "Too large resource version" from an API server behind the watch is a replaced
    /// history; from one whose current version has it (a lagging cache), an error to retry.
    #[tokio::test(start_paused = true)]
    async fn a_watch_refused_as_too_large_is_given_up_only_when_the_api_server_is_behind() {
        let lists = vec![version("420"), version("420"), json!({"metadata": {"resourceVersion": "421"}, "items": []})];
        let (stream, _) = watch(scripted(lists, vec![vec![too_large()]]), settings(), Some("500".into()));
        assert_eq!(first(stream, 3).await, ["stalled too_large 500>420", "init", "at 421"]);
        let watches = vec![vec![too_large()], vec![json!({"type": "ADDED", "object": cm("n", "501")})]];
        let (stream, seen) = watch(scripted(vec![version("600")], watches), settings(), Some("500".into()));
        let mut stream = std::pin::pin!(stream);
        assert!(matches!(stream.next().await, Some(Err(WatchError::ErrorEvent(s))) if s.code == 504), "the error, retried");
        assert!(matches!(stream.next().await, Some(Ok(Observed::Resumed))));
        assert!(seen.lock().unwrap()[2].contains("resourceVersion=500"), "retried from the same version");
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
