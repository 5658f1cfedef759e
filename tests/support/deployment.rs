//! The Deployment the pipeline tests create (one replica of one container, named `c`), and
//! the change of its image: a template change, which the controller-manager follows with
//! status updates.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// One replica of `image`, its pods labelled `app: <name>`.
pub fn deployment(name: &str, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": image}]}}}
    }))
    .unwrap()
}

/// Changes the image of the Deployment `name` (made by `deployment`).
pub async fn set_image(deploys: &Api<Deployment>, name: &str, image: &str) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
    deploys.patch(name, &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
}
