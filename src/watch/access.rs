//! Access checks: SelfSubjectAccessReviews for list and watch of every watch scope.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use kube::Client;

use super::Scope;

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("access review failed: {0}")]
    ReviewFailed(#[source] kube::Error),
    #[error("not allowed to {verb} {resource}{}{}; grant it with a (Cluster)Role bound to this identity", scope_text(.namespace), reason_text(.reason))]
    Denied {
        verb: &'static str,
        resource: String,
        namespace: Option<String>,
        reason: String,
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

/// Checks that list and watch are allowed on `scope`.
pub async fn check(client: &Client, scope: &Scope) -> Result<(), AccessError> {
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
