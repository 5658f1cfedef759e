//! Continuing a watch from a checkpoint's resourceVersion: no list, only what changed since.
//! kube-runtime's watcher always lists first, so this is deltaship's own watch loop: watch
//! from the version, re-watch from the last version seen when the API server ends the
//! watch, back off after failures. When the API server no longer has that version (410
//! Gone), it hands over to kube-runtime's watcher, which lists: the worker then ships that
//! list as a diff against the checkpoint.

use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};

use super::WatchedObject;

/// What the resumed watch yields before decoding.
#[expect(clippy::large_enum_variant, reason = "moved once per event; a box would allocate per event")]
pub enum Raw {
    /// The API server accepted the checkpoint's version: nothing was missed.
    Resumed,
    Event(watcher::Event<WatchedObject>),
}

/// How long a freshly started watch may stay silent before it counts as resumed: an API
/// server that no longer has the version says so (410) at once.
const SETTLE: Duration = Duration::from_millis(300);

/// How long one watch request lasts; the API server ends it then and it is renewed from
/// the last version seen.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// The watch of `api` from `resource_version`, then, if that version is gone, kube-runtime's
/// watcher with `config` (a list, then a watch).
pub fn from_version(api: Api<WatchedObject>, config: watcher::Config, resource_version: String) -> impl Stream<Item = Result<Raw, watcher::Error>> + Send {
    let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
    if let Some(l) = &config.label_selector {
        params = params.labels(l);
    }
    if let Some(f) = &config.field_selector {
        params = params.fields(f);
    }
    let fallback = (api.clone(), config);
    let resuming = Resuming { api, params, resource_version, announced: false, next: None, watch: None, failures: 0 };
    stream::unfold(resuming, Resuming::step).chain(
        stream::once(async move {
            let (api, config) = fallback;
            watcher(api, config).default_backoff().map_ok(Raw::Event)
        })
        .flatten(),
    )
}

struct Resuming {
    api: Api<WatchedObject>,
    params: WatchParams,
    /// The last version seen: where the next watch request starts.
    resource_version: String,
    /// Whether `Raw::Resumed` was yielded.
    announced: bool,
    /// An item held back while `Raw::Resumed` goes first.
    next: Option<Raw>,
    watch: Option<BoxStream<'static, kube::Result<WatchEvent<WatchedObject>>>>,
    /// Failures in a row, for the backoff.
    failures: u32,
}

type Step = Option<(Result<Raw, watcher::Error>, Resuming)>;

impl Resuming {
    /// The next item; `None` when the version is gone (the fallback takes over).
    async fn step(mut self) -> Step {
        if let Some(next) = self.next.take() {
            return Some((Ok(next), self));
        }
        loop {
            let Some(watch) = self.watch.as_mut() else {
                if self.failures > 0 {
                    tokio::time::sleep(backoff(self.failures)).await;
                }
                match self.api.watch(&self.params, &self.resource_version).await {
                    Ok(w) => self.watch = Some(w.boxed()),
                    Err(kube::Error::Api(s)) if s.code == 410 => return self.expired(),
                    Err(e) => return self.failed(watcher::Error::WatchStartFailed(e)),
                }
                continue;
            };
            let item = if self.announced {
                watch.next().await
            } else {
                match tokio::time::timeout(SETTLE, watch.next()).await {
                    Ok(item) => item,
                    Err(_) => return self.announce(None),
                }
            };
            let event = match item {
                Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => self.seen(watcher::Event::Apply(o)),
                Some(Ok(WatchEvent::Deleted(o))) => self.seen(watcher::Event::Delete(o)),
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    self.resource_version = b.metadata.resource_version;
                    continue;
                }
                Some(Ok(WatchEvent::Error(s))) if s.code == 410 => return self.expired(),
                Some(Ok(WatchEvent::Error(s))) => return self.failed(watcher::Error::WatchError(s)),
                Some(Err(e)) => return self.failed(watcher::Error::WatchFailed(e)),
                None => {
                    // The API server ended the watch (its timeout): renew it.
                    self.watch = None;
                    continue;
                }
            };
            self.failures = 0;
            if !self.announced {
                return self.announce(Some(Raw::Event(event)));
            }
            return Some((Ok(Raw::Event(event)), self));
        }
    }

    /// Notes the event's version (where a renewed watch starts) and passes it on.
    fn seen(&mut self, event: watcher::Event<WatchedObject>) -> watcher::Event<WatchedObject> {
        if let watcher::Event::Apply(o) | watcher::Event::Delete(o) = &event
            && let Some(rv) = o.resource_version()
        {
            self.resource_version = rv;
        }
        event
    }

    fn announce(mut self, next: Option<Raw>) -> Step {
        self.announced = true;
        self.next = next;
        Some((Ok(Raw::Resumed), self))
    }

    fn failed(mut self, e: watcher::Error) -> Step {
        self.watch = None;
        self.failures += 1;
        Some((Err(e), self))
    }

    fn expired(self) -> Step {
        tracing::info!(resource_version = %self.resource_version, "The API server no longer has this version; listing");
        None
    }
}

/// 0.5 s doubling per failure in a row, at most 30 s.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << failures.min(6).saturating_sub(1))).min(Duration::from_secs(30))
}
