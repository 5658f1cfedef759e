//! The attributes of Knative's ApiServerSource (ResourceType mode), for resources with
//! `format = "knative"`: existing Knative Triggers filter on these.

use std::sync::Arc;

use crate::model::ResourceType;
use crate::model::{ChangeType, ObjectRef};

/// (type, source, subject): `dev.knative.apiserver.resource.add|update|delete`, the API
/// server's URL, and the object's API path `/apis/<apiVersion>/namespaces/<ns>/<plural>/<name>`
/// as ApiServerSource writes it (with `/apis/` for the core group too). `synced` maps to
/// `add`: Knative has no sync events.
pub fn attributes(change: ChangeType, api_server: &Arc<str>, resource: &ResourceType, r: &ObjectRef) -> (String, String, String) {
    let verb = match change {
        ChangeType::Added | ChangeType::Synced => "add",
        ChangeType::Updated => "update",
        ChangeType::Deleted => "delete",
    };
    let subject = match &r.namespace {
        Some(ns) => format!("/apis/{}/namespaces/{ns}/{}/{}", resource.api_version(), resource.plural, r.name),
        None => format!("/apis/{}/{}/{}", resource.api_version(), resource.plural, r.name),
    };
    (format!("dev.knative.apiserver.resource.{verb}"), api_server.to_string(), subject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::deployments;

    #[test]
    fn knative_types_sources_and_subjects() {
        let r = ObjectRef { namespace: Some("shop".into()), name: "web".into(), uid: "u".into(), resource_version: "1".into() };
        let (ty, source, subject) = attributes(ChangeType::Updated, &"https://10.96.0.1:443".into(), &deployments(), &r);
        assert_eq!(ty, "dev.knative.apiserver.resource.update");
        assert_eq!(source, "https://10.96.0.1:443");
        assert_eq!(subject, "/apis/apps/v1/namespaces/shop/deployments/web");
        assert_eq!(attributes(ChangeType::Synced, &"s".into(), &deployments(), &r).0, "dev.knative.apiserver.resource.add");
    }
}
