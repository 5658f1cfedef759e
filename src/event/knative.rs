//! The attributes and reference data of Knative's ApiServerSource, for resources with
//! `format = "knative"`: existing Knative Triggers filter on these. Resource mode (the whole
//! object) is `payload = "object"`; Reference mode (the default of ApiServerSource) is
//! `payload = "reference"`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::model::ResourceType;
use crate::model::{ChangeType, ObjectRef};

/// (type, source, subject): `dev.knative.apiserver.resource.add|update|delete`, or
/// `dev.knative.apiserver.ref.add|update|delete` for a `reference` event, the API server's
/// URL, and the object's API path `/apis/<apiVersion>/namespaces/<ns>/<plural>/<name>` as
/// ApiServerSource writes it (with `/apis/` for the core group too). `synced` maps to `add`:
/// Knative has no sync events.
pub fn attributes(change: ChangeType, reference: bool, api_server: &Arc<str>, resource: &ResourceType, r: &ObjectRef) -> (&'static str, Arc<str>, String) {
    let ty = match (reference, change) {
        (false, ChangeType::Added | ChangeType::Synced) => "dev.knative.apiserver.resource.add",
        (false, ChangeType::Updated) => "dev.knative.apiserver.resource.update",
        (false, ChangeType::Deleted) => "dev.knative.apiserver.resource.delete",
        (true, ChangeType::Added | ChangeType::Synced) => "dev.knative.apiserver.ref.add",
        (true, ChangeType::Updated) => "dev.knative.apiserver.ref.update",
        (true, ChangeType::Deleted) => "dev.knative.apiserver.ref.delete",
    };
    let subject = match &r.namespace {
        Some(ns) => format!("/apis/{}/namespaces/{ns}/{}/{}", resource.api_version(), resource.plural, r.name),
        None => format!("/apis/{}/{}/{}", resource.api_version(), resource.plural, r.name),
    };
    (ty, api_server.clone(), subject)
}

/// The data of a Reference-mode event: a Kubernetes ObjectReference with the members
/// ApiServerSource fills, in the order Go writes them (`namespace` left out for a
/// cluster-scoped object, as Go's `omitempty` does).
pub fn reference_data(api_version: &str, resource: &ResourceType, r: &ObjectRef) -> Value {
    let mut v = json!({"kind": resource.kind});
    if let Some(ns) = &r.namespace {
        v["namespace"] = json!(ns);
    }
    v["name"] = json!(r.name);
    v["apiVersion"] = json!(api_version);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::deployments;

    #[test]
    fn knative_types_sources_and_subjects() {
        let r = ObjectRef { namespace: Some("shop".into()), name: "web".into(), uid: "u".into(), resource_version: "1".into() };
        let (ty, source, subject) = attributes(ChangeType::Updated, false, &"https://10.96.0.1:443".into(), &deployments(), &r);
        assert_eq!(ty, "dev.knative.apiserver.resource.update");
        assert_eq!(&*source, "https://10.96.0.1:443");
        assert_eq!(subject, "/apis/apps/v1/namespaces/shop/deployments/web");
        assert_eq!(attributes(ChangeType::Synced, false, &"s".into(), &deployments(), &r).0, "dev.knative.apiserver.resource.add");
        assert_eq!(attributes(ChangeType::Deleted, true, &"s".into(), &deployments(), &r).0, "dev.knative.apiserver.ref.delete");
    }

    #[test]
    fn reference_data_is_an_object_reference_in_gos_member_order() {
        let r = ObjectRef { namespace: Some("shop".into()), name: "web".into(), uid: "u".into(), resource_version: "1".into() };
        let data = serde_json::to_string(&reference_data("apps/v1", &deployments(), &r)).unwrap();
        assert_eq!(data, r#"{"kind":"Deployment","namespace":"shop","name":"web","apiVersion":"apps/v1"}"#);
        let cluster_scoped = ObjectRef { namespace: None, ..r };
        assert_eq!(
            serde_json::to_string(&reference_data("apps/v1", &deployments(), &cluster_scoped)).unwrap(),
            r#"{"kind":"Deployment","name":"web","apiVersion":"apps/v1"}"#
        );
    }
}
