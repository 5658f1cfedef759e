//! Access checks: SelfSubjectAccessReviews for list and watch of every watch scope.

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
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["list", "watch"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(scope.resource.group.clone()),
                    version: Some(scope.resource.version.clone()),
                    resource: Some(scope.resource.plural.clone()),
                    namespace: scope.namespace.clone(),
                    verb: Some(verb.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await.map_err(AccessError::ReviewFailed)?;
        let status = answer.status.unwrap_or_default();
        if !status.allowed {
            return Err(AccessError::Denied {
                verb,
                resource: scope.resource.label(),
                namespace: scope.namespace.clone(),
                reason: status.reason.unwrap_or_default(),
            });
        }
    }
    Ok(())
}
