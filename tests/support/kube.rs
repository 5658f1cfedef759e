//! Kubernetes helpers: a client for the test API server, namespaces, and waits (`eventually`,
//! `until_done`).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

pub async fn client() -> Client {
    super::env();
    Client::try_default().await.expect("a client for the test API server (KUBECONFIG)")
}

/// Creates a fresh namespace, `<prefix>-<unique>` (retried through an API server restart,
/// which other test binaries cause), and returns at once: it does not wait for its default
/// ServiceAccount (the controller-manager creates it a moment later; Pods are not admitted
/// before), so a test that creates Pods in it waits for that itself.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = super::unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let (api, ns) = (&Api::<Namespace>::all(client.clone()), &ns);
    until_done("create the test namespace", 409, || async move { api.create(&PostParams::default(), ns).await.map(|_| ()) }).await;
    name
}

/// Deletes the namespace `name` (retried through an API server restart; gone already is done).
pub async fn delete_namespace(client: &Client, name: &str) {
    let api = &Api::<Namespace>::all(client.clone());
    until_done("delete the test namespace", 404, || async move { api.delete(name, &DeleteParams::default()).await.map(|_| ()) }).await;
}

/// Polls `f` every 200 ms until it returns Some, at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Retries `op` until it succeeds (then returns its value) or fails with `done_code` (an
/// idempotent outcome: 404 on a delete, 409 on a create; 0 for none; then None), for as
/// long as an API server restart may take.
pub async fn until_done<T, F, Fut>(what: &str, done_code: u16, mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let err = match tokio::time::timeout(Duration::from_secs(10), op()).await {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(kube::Error::Api(s))) if s.code == done_code => return None,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within 10 s".to_string(),
        };
        assert!(Instant::now() < deadline, "{what} still failing after 120 s: {err}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
