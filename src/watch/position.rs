//! Where the API server stands: its current resourceVersion for a watch scope and the
//! cluster's identity, the facts a checkpoint is checked against before it is resumed from.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::Request;
use serde::Deserialize;

use crate::plan::Scope;

/// How long one of these requests may go unanswered. The client has no read timeout of its
/// own (a watch may rightly be quiet for minutes), and a request the API server took but
/// never answered must not hold a start, or a stall check, for good: it fails as a
/// transient error instead, and its caller retries or falls back as for any other.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// `request`, or a transient error once it went unanswered for ANSWER_WITHIN.
async fn answered<T>(request: impl Future<Output = kube::Result<T>>) -> kube::Result<T> {
    match tokio::time::timeout(ANSWER_WITHIN, request).await {
        Ok(answer) => answer,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the API server did not answer within {ANSWER_WITHIN:?}"),
        )))),
    }
}

/// A list response read for its metadata alone: the items are skipped unparsed (without a
/// depth limit), so that no object, however deeply nested, can fail the read.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    metadata: ListMeta,
}

/// The API server's current resourceVersion for `scope`: a consistent list of at most one
/// object with the scope's selectors (the API server rejects a bad selector here, with 400).
pub async fn current_version(client: &Client, scope: &Scope) -> kube::Result<String> {
    let url = api(client.clone(), scope).resource_url().to_string();
    version_at(client, &Request::new(url), scope.label_selector.clone(), scope.field_selector.clone()).await
}

/// The API of the scope's resource within its namespace (or all).
pub(super) fn api(client: Client, scope: &Scope) -> Api<DynamicObject> {
    let ar = api_resource(scope);
    match &scope.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    }
}

/// The API server's current resourceVersion for the resource of `request` (its URL): a
/// consistent list of at most one object with these selectors. The start-up check and the
/// running watch's stall check (`stream.rs`) both read it so.
pub(super) async fn version_at(client: &Client, request: &Request, label_selector: Option<String>, field_selector: Option<String>) -> kube::Result<String> {
    let mut params = ListParams::default().limit(1);
    params.label_selector = label_selector;
    params.field_selector = field_selector;
    let mut req = request.list(&params).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("list");
    let head: Head = answered(client.request(req)).await?;
    Ok(head.metadata.resource_version.unwrap_or_default())
}

/// The cluster's identity: the uid of its `kube-system` namespace, which lives as long as
/// the cluster. `None` when this identity may not read it (RBAC) or it does not exist.
pub async fn cluster_uid(client: &Client) -> kube::Result<Option<String>> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match answered(namespaces.get_opt("kube-system")).await {
        Ok(ns) => Ok(ns.and_then(|ns| ns.metadata.uid)),
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The uid and resourceVersion of the object under `key` (`namespace/name`, or `name` for a
/// cluster-scoped kind) of the scope's resource now; `None` when there is none.
pub async fn object_now(client: &Client, scope: &Scope, key: &str) -> kube::Result<Option<(String, String)>> {
    let ar = api_resource(scope);
    let (api, name): (Api<DynamicObject>, &str) = match key.split_once('/') {
        Some((ns, name)) => (Api::namespaced_with(client.clone(), ns, &ar), name),
        None => (Api::all_with(client.clone(), &ar), key),
    };
    let found = answered(api.get_metadata_opt(name)).await?;
    Ok(found.and_then(|o| Some((o.metadata.uid?, o.metadata.resource_version?))))
}

/// The scope's resource as kube's dynamic API names it.
fn api_resource(scope: &Scope) -> ApiResource {
    let r = &scope.resource;
    ApiResource { group: r.group.clone(), version: r.version.clone(), api_version: r.api_version(), kind: r.kind.clone(), plural: r.plural.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_never_answered_fails_as_a_timeout_once_its_bound_has_passed() {
        let unanswered = answered(std::future::pending::<kube::Result<()>>()).await.unwrap_err();
        assert!(unanswered.to_string().contains("did not answer within 30s"), "{unanswered}");
        assert_eq!(answered(async { Ok::<_, kube::Error>(7) }).await.unwrap(), 7);
    }
}
