//! Access checks: SelfSubjectAccessReviews for list and watch of every watch scope, and for
//! the `get`s a resume needs.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::plan::Scope;

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("access review failed: {0}")]
    ReviewFailed(#[source] kube::Error),
    #[error("not allowed to {verb} {resource}{}{}; grant it with a (Cluster)Role bound to this identity", scope_text(.namespace), reason_text(.reason))]
    Denied { verb: &'static str, resource: String, namespace: Option<String>, reason: String },
    #[error("resources[{index}]: the API server rejected listing {resource}: {message}; fix resources[{index}].label_selector or .field_selector")]
    Rejected { index: usize, resource: String, message: String },
    #[error("resources[{index}]: listing {resource} failed: {source}")]
    ListFailed {
        index: usize,
        resource: String,
        #[source]
        source: kube::Error,
    },
}

fn scope_text(ns: &Option<String>) -> String {
    match ns {
        Some(ns) => format!(" in namespace {ns}"),
        None => " in all namespaces".into(),
    }
}

fn reason_text(reason: &str) -> String {
    if reason.is_empty() { String::new() } else { format!(" ({reason})") }
}

/// Checks that list and watch are allowed on `scope`, then lists one object with the
/// scope's selectors, so that a selector the API server rejects is a start-up error (the
/// object itself is not parsed: none, however deep, can fail the check).
pub async fn check(client: &Client, scope: &Scope) -> Result<(), AccessError> {
    review(client, scope).await?;
    let (index, resource) = (scope.index, scope.resource.label());
    match super::position::current_version(client, scope).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 400 => Err(AccessError::Rejected { index, resource, message: e.message }),
        Err(source) => Err(AccessError::ListFailed { index, resource, source }),
    }
}

async fn review(client: &Client, scope: &Scope) -> Result<(), AccessError> {
    for verb in ["list", "watch"] {
        let (allowed, reason) = ask(client, scope_attributes(scope, verb)).await?;
        if !allowed {
            return Err(AccessError::Denied { verb, resource: scope.resource.label(), namespace: scope.namespace.clone(), reason });
        }
    }
    Ok(())
}

/// Whether `get` is allowed on `scope`'s objects: a resume looks a checkpoint's newest
/// objects up to prove that it belongs to the API server's history (without it, every start
/// is a full initial sync).
pub async fn allows_get(client: &Client, scope: &Scope) -> Result<bool, AccessError> {
    Ok(ask(client, scope_attributes(scope, "get")).await?.0)
}

/// Whether `get` is allowed on the `kube-system` namespace, whose uid is the cluster's
/// identity that checkpoints are checked against.
pub async fn allows_identity(client: &Client) -> Result<bool, AccessError> {
    let attributes = ResourceAttributes {
        version: Some("v1".into()),
        resource: Some("namespaces".into()),
        name: Some("kube-system".into()),
        verb: Some("get".into()),
        ..Default::default()
    };
    Ok(ask(client, attributes).await?.0)
}

fn scope_attributes(scope: &Scope, verb: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(scope.resource.group.clone()),
        version: Some(scope.resource.version.clone()),
        resource: Some(scope.resource.plural.clone()),
        namespace: scope.namespace.clone(),
        verb: Some(verb.into()),
        ..Default::default()
    }
}

/// A SelfSubjectAccessReview of `attributes`: allowed, and the authorizer's reason.
async fn ask(client: &Client, attributes: ResourceAttributes) -> Result<(bool, String), AccessError> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review =
        SelfSubjectAccessReview { spec: SelfSubjectAccessReviewSpec { resource_attributes: Some(attributes), ..Default::default() }, ..Default::default() };
    let answer = api.create(&PostParams::default(), &review).await.map_err(AccessError::ReviewFailed)?;
    let status = answer.status.unwrap_or_default();
    Ok((status.allowed, status.reason.unwrap_or_default()))
}
