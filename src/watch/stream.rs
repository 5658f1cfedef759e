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
use kube::ResourceExt;
use kube::api::{Api, ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher::Error;
use rand::Rng;

use super::WatchedObject;

/// What the list and watch yield before decoding.
pub enum Raw {
    /// A (re)list starts.
    Init,
    InitApply(WatchedObject),
    /// The list is complete (right after its version, as a `Bookmark`).
    InitDone,
    Apply(WatchedObject),
    Delete(WatchedObject),
    /// The watch stands at this resourceVersion with nothing left to deliver before it: a
    /// list's own version (right before its `InitDone`), then each bookmark of the watch.
    Bookmark(String),
    /// The API server accepted the checkpoint's version: nothing was missed.
    Resumed,
}

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

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

type Events = BoxStream<'static, kube::Result<WatchEvent<WatchedObject>>>;

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

struct ListWatch {
    api: Api<WatchedObject>,
    settings: Settings,
    state: State,
    /// Failures in a row, for the backoff before the next request.
    failures: u32,
    /// Resuming from a checkpoint and not yet known to work: the first watch's events wait
    /// until `Raw::Resumed` went out.
    settling: bool,
    /// An item held back while `Raw::Resumed` goes first.
    held: Option<Raw>,
}

/// The list and watch of `api`; with `resume_from`, a watch from that version first (see
/// the module's documentation). Errors are yielded and followed by a backoff (client-go's:
/// 0.8 s doubling to 30 s, with jitter); the stream never ends.
pub fn list_watch(api: Api<WatchedObject>, settings: Settings, resume_from: Option<String>) -> impl Stream<Item = Result<Raw, Error>> + Send {
    let (state, settling) = match resume_from {
        Some(version) => (State::Connect(version), true),
        None => (State::List, false),
    };
    let lw = ListWatch { api, settings, state, failures: 0, settling, held: None };
    futures::stream::unfold(lw, |mut lw| async move {
        let item = lw.next().await;
        Some((item, lw))
    })
}

impl ListWatch {
    async fn next(&mut self) -> Result<Raw, Error> {
        if let Some(held) = self.held.take() {
            return Ok(held);
        }
        if self.failures > 0 {
            tokio::time::sleep(backoff(self.failures)).await;
        }
        loop {
            match self.step().await {
                Ok(Some(raw)) => {
                    self.failures = 0;
                    return Ok(raw);
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
    async fn step(&mut self) -> Result<Option<Raw>, Error> {
        match std::mem::replace(&mut self.state, State::List) {
            State::List if self.settings.streaming => {
                let params = self.watch_params().initial_events();
                let events = self.api.watch(&params, "0").await.map_err(Error::WatchStartFailed)?;
                self.state = State::Streaming(events.boxed());
                Ok(Some(Raw::Init))
            }
            State::List => {
                self.state = page(&self.api, &self.settings, None).await?;
                Ok(Some(Raw::Init))
            }
            State::Paging { mut items, next, version } => {
                if let Some(item) = items.pop_front() {
                    self.state = State::Paging { items, next, version };
                    return Ok(Some(Raw::InitApply(item)));
                }
                match next {
                    Some(token) => self.state = page(&self.api, &self.settings, Some(token)).await?,
                    None => {
                        self.state = State::Listed(version.clone());
                        return Ok(Some(Raw::Bookmark(version)));
                    }
                }
                Ok(None)
            }
            State::Streaming(mut events) => match events.next().await {
                Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                    self.state = State::Streaming(events);
                    Ok(Some(Raw::InitApply(o)))
                }
                Some(Ok(WatchEvent::Bookmark(b))) if b.metadata.annotations.contains_key(INITIAL_EVENTS_END) => {
                    self.state = State::Watching { version: b.metadata.resource_version.clone(), events };
                    self.held = Some(Raw::InitDone);
                    Ok(Some(Raw::Bookmark(b.metadata.resource_version)))
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
                Ok(Some(Raw::InitDone))
            }
            State::Connect(version) => match self.api.watch(&self.watch_params(), &version).await {
                Ok(events) => {
                    self.state = State::Watching { version, events: events.boxed() };
                    Ok(None)
                }
                Err(kube::Error::Api(s)) if s.code == 410 => Ok(self.expired(&version)),
                Err(e) => {
                    self.state = State::Connect(version);
                    Err(Error::WatchStartFailed(e))
                }
            },
            State::Watching { version, mut events } => {
                let item = if self.settling {
                    match tokio::time::timeout(SETTLE, events.next()).await {
                        Ok(item) => item,
                        Err(_) => {
                            self.settling = false;
                            self.state = State::Watching { version, events };
                            return Ok(Some(Raw::Resumed));
                        }
                    }
                } else {
                    events.next().await
                };
                let raw = match item {
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => Raw::Apply(o),
                    Some(Ok(WatchEvent::Deleted(o))) => Raw::Delete(o),
                    Some(Ok(WatchEvent::Bookmark(b))) => Raw::Bookmark(b.metadata.resource_version),
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
                let version = match &raw {
                    Raw::Apply(o) | Raw::Delete(o) => o.resource_version().unwrap_or(version),
                    Raw::Bookmark(v) => v.clone(),
                    _ => version,
                };
                self.state = State::Watching { version, events };
                if std::mem::take(&mut self.settling) {
                    self.held = Some(raw);
                    return Ok(Some(Raw::Resumed));
                }
                Ok(Some(raw))
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
    fn expired(&mut self, version: &str) -> Option<Raw> {
        tracing::info!(resource_version = %version, "The API server no longer has this version; listing");
        self.settling = false;
        self.state = State::List;
        None
    }
}

/// Requests a page of the list (the first when `token` is `None`).
async fn page(api: &Api<WatchedObject>, settings: &Settings, token: Option<String>) -> Result<State, Error> {
    let mut params = ListParams { label_selector: settings.label_selector.clone(), field_selector: settings.field_selector.clone(), ..ListParams::default() }
        .limit(settings.page_size);
    params = match &token {
        Some(t) => params.continue_token(t),
        // Served from the API server's watch cache: cheap for it, and the watch then
        // continues from the list's version, so nothing is missed.
        None => params.at("0").matching(VersionMatch::NotOlderThan),
    };
    let list = api.list(&params).await.map_err(Error::InitialListFailed)?;
    let version = list.metadata.resource_version.filter(|v| !v.is_empty()).ok_or(Error::NoResourceVersion)?;
    let next = list.metadata.continue_.filter(|t| !t.is_empty());
    Ok(State::Paging { items: list.items.into(), next, version })
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
    use kube::Client;
    use kube::api::ApiResource;
    use serde_json::json;

    use super::*;

    /// An API server that answers each request with the next scripted body of its kind
    /// (list or watch), and notes every request's path and query.
    fn scripted(lists: Vec<serde_json::Value>, watches: Vec<Vec<serde_json::Value>>) -> (Api<WatchedObject>, Arc<Mutex<Vec<String>>>) {
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
        let resource =
            ApiResource { group: String::new(), version: "v1".into(), api_version: "v1".into(), kind: "ConfigMap".into(), plural: "configmaps".into() };
        (Api::namespaced_with(Client::new(service, "ns"), "ns", &resource), seen)
    }

    fn cm(name: &str, rv: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv}})
    }

    fn settings() -> Settings {
        Settings { label_selector: None, field_selector: None, page_size: 1, streaming: false }
    }

    /// The first `n` items, each as `kind name-or-version`.
    async fn first(stream: impl Stream<Item = Result<Raw, Error>>, n: usize) -> Vec<String> {
        let name = |o: WatchedObject| o.value["metadata"]["name"].as_str().unwrap_or_default().to_string();
        stream
            .take(n)
            .map_ok(|raw| match raw {
                Raw::Init => "init".to_string(),
                Raw::InitApply(o) => format!("listed {}", name(o)),
                Raw::InitDone => "listed".to_string(),
                Raw::Apply(o) => format!("apply {}", name(o)),
                Raw::Delete(o) => format!("delete {}", name(o)),
                Raw::Bookmark(v) => format!("at {v}"),
                Raw::Resumed => "resumed".to_string(),
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
        let (api, seen) = scripted(lists, watches);
        let items = first(list_watch(api, settings(), None), 7).await;
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
        let (api, seen) = scripted(lists, watches);
        let items = first(list_watch(api, settings(), None), 8).await;
        assert_eq!(items, ["init", "at 2", "listed", "delete a", "init", "listed c", "at 40", "listed"]);
        let seen = seen.lock().unwrap();
        assert!(seen[1].contains("resourceVersion=2") && seen[2].contains("resourceVersion=7"), "renewed from the delete's version: {seen:?}");
    }

    #[tokio::test]
    async fn a_resume_watches_from_the_checkpoint_and_says_so_before_the_first_event() {
        let (api, seen) = scripted(Vec::new(), vec![vec![json!({"type": "ADDED", "object": cm("n", "8")})]]);
        let items = first(list_watch(api, settings(), Some("7".into())), 2).await;
        assert_eq!(items, ["resumed", "apply n"]);
        assert!(seen.lock().unwrap()[0].contains("resourceVersion=7"));
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old", "reason": "Expired", "code": 410}});
        let (api, _) = scripted(vec![json!({"metadata": {"resourceVersion": "9"}, "items": [cm("n", "8")]})], vec![vec![gone]]);
        let items = first(list_watch(api, settings(), Some("7".into())), 4).await;
        assert_eq!(items, ["init", "listed n", "at 9", "listed"], "the version is gone: a list, and no `resumed`");
    }

    #[tokio::test]
    async fn a_streaming_list_ends_at_its_bookmark() {
        let watches = vec![vec![
            json!({"type": "ADDED", "object": cm("a", "3")}),
            json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "12", "annotations": {INITIAL_EVENTS_END: "true"}}}}),
            json!({"type": "MODIFIED", "object": cm("a", "13")}),
        ]];
        let (api, seen) = scripted(Vec::new(), watches);
        let items = first(list_watch(api, Settings { streaming: true, ..settings() }, None), 5).await;
        assert_eq!(items, ["init", "listed a", "at 12", "listed", "apply a"]);
        assert!(seen.lock().unwrap()[0].contains("sendInitialEvents=true"));
    }
}
