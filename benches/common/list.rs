//! The floor of a sync: the same ConfigMaps read by a bare client, with nothing done to
//! them but counting. `paged` is the list deltaship makes by default (pages of
//! `kubernetes.page_size`, the first a consistent read); `streaming` is the watch it makes
//! with `kubernetes.streaming_lists` (initial events, then the bookmark that ends them).
//! Items are skipped, not decoded: what is left is the API server, etcd and the transfer.

use std::time::Instant;

use futures::StreamExt;
use kube::Client;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Request;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// deltaship's default `kubernetes.page_size`.
pub const PAGE_SIZE: u32 = 500;

/// One bare read of the namespace's ConfigMaps: wall time, CPU of this process, objects.
pub struct Read {
    pub secs: f64,
    pub cpu_secs: f64,
    pub objects: usize,
}

#[derive(Deserialize)]
struct Page {
    metadata: PageMeta,
    items: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

/// An object of a watch event, skipped.
#[derive(Clone, Deserialize)]
struct Skipped {}

fn request(ns: &str) -> Request {
    Request::new(format!("/api/v1/namespaces/{ns}/configmaps"))
}

/// Reads the ConfigMaps of `ns` page by page, the first page a consistent read.
pub async fn paged(client: &Client, ns: &str) -> Read {
    let (started, cpu) = (Instant::now(), crate::common::process_cpu());
    let (mut objects, mut token) = (0, None::<String>);
    loop {
        let mut params = ListParams::default().limit(PAGE_SIZE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page: Page = client.request(request(ns).list(&params).unwrap()).await.expect("a page of the list");
        objects += page.items.len();
        token = page.metadata.next.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    Read { secs: started.elapsed().as_secs_f64(), cpu_secs: crate::common::process_cpu() - cpu, objects }
}

/// Reads the ConfigMaps of `ns` as a streaming list: a watch from a consistent version
/// with initial events, until the bookmark that marks their end.
pub async fn streaming(client: &Client, ns: &str) -> Read {
    let (started, cpu) = (Instant::now(), crate::common::process_cpu());
    let params = WatchParams::default().initial_events();
    let mut events = client.request_events::<Skipped>(request(ns).watch(&params, "").unwrap()).await.expect("a streaming list").boxed();
    let mut objects = 0;
    while let Some(event) = events.next().await {
        match event.expect("an event of the streaming list") {
            WatchEvent::Added(_) => objects += 1,
            WatchEvent::Bookmark(b) if b.metadata.annotations.contains_key("k8s.io/initial-events-end") => break,
            WatchEvent::Bookmark(_) => {}
            other => panic!("a streaming list sent {:?}", std::mem::discriminant(&other)),
        }
    }
    Read { secs: started.elapsed().as_secs_f64(), cpu_secs: crate::common::process_cpu() - cpu, objects }
}
