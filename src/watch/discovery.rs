//! Discovery: configured group/version/kind resolved against the API server (CRDs too).

use kube::Client;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope as ApiScope, verbs};

use crate::config::ResourceConfig;
use crate::model::ResourceType;

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("API discovery failed: {0}; check that the API server is reachable and the credentials are valid")]
    Failed(#[source] kube::Error),
    #[error("resources[{index}]: {wanted} is not served by the API server{}", suggest(.close))]
    Unknown { index: usize, wanted: String, close: Vec<String> },
    #[error("resources[{index}]: {wanted} does not support {verb}, so it cannot be watched")]
    NotWatchable { index: usize, wanted: String, verb: &'static str },
    #[error("resources[{index}]: {wanted} is cluster-scoped; remove `namespaces`")]
    NamespacesOnClusterScoped { index: usize, wanted: String },
}

fn suggest(close: &[String]) -> String {
    if close.is_empty() { "; list what is served with `kubectl api-resources`".into() } else { format!("; did you mean {}?", close.join(" or ")) }
}

/// What the API server serves, from one discovery run.
pub struct Discovered(Vec<(ApiResource, ApiCapabilities)>);

/// Attempts of a group-by-group discovery that met a vanished group.
const GROUP_BY_GROUP_ATTEMPTS: u32 = 3;

/// Aggregated discovery (Kubernetes 1.26+) where the API server offers it: two requests and
/// one consistent answer. Older servers are asked group by group, where a group removed
/// between the list of groups and its own request (a CRD deleted meanwhile) fails the run
/// with a 404: that run is tried again.
pub async fn discover(client: Client) -> Result<Discovered, DiscoveryError> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(error = %e, "Aggregated discovery unavailable; discovering group by group");
            let mut attempt = 1;
            loop {
                match Discovery::new(client.clone()).run().await {
                    Ok(d) => break d,
                    Err(kube::Error::Api(s)) if s.code == 404 && attempt < GROUP_BY_GROUP_ATTEMPTS => {
                        tracing::debug!(error = %s, attempt, "An API group vanished during discovery; discovering again");
                        attempt += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(DiscoveryError::Failed(e)),
                }
            }
        }
    };
    Ok(Discovered(discovery.groups().flat_map(|g| g.versions().flat_map(|v| g.versioned_resources(v)).collect::<Vec<_>>()).collect()))
}

impl Discovered {
    /// Resolves `resources[index]`, or explains why it cannot be watched.
    pub fn resolve(&self, index: usize, rc: &ResourceConfig) -> Result<ResourceType, DiscoveryError> {
        resolve_one(index, rc, &self.0)
    }
}

fn resolve_one(index: usize, rc: &ResourceConfig, served: &[(ApiResource, ApiCapabilities)]) -> Result<ResourceType, DiscoveryError> {
    let wanted = describe(&rc.group, &rc.version, &rc.kind);
    let Some((ar, caps)) = served.iter().find(|(ar, _)| ar.group == rc.group && ar.version == rc.version && ar.kind == rc.kind) else {
        return Err(DiscoveryError::Unknown { index, wanted, close: close_matches(rc, served) });
    };
    for verb in [verbs::LIST, verbs::WATCH] {
        if !caps.supports_operation(verb) {
            return Err(DiscoveryError::NotWatchable { index, wanted, verb });
        }
    }
    let namespaced = matches!(caps.scope, ApiScope::Namespaced);
    if !namespaced && !rc.namespaces.is_empty() {
        return Err(DiscoveryError::NamespacesOnClusterScoped { index, wanted });
    }
    Ok(ResourceType { group: ar.group.clone(), version: ar.version.clone(), kind: ar.kind.clone(), plural: ar.plural.clone(), namespaced })
}

fn describe(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() { format!("kind {kind} in core/{version}") } else { format!("kind {kind} in {group}/{version}") }
}

/// Served resources whose kind is within a small edit distance of the wanted one (case
/// ignored), or whose kind matches in another group or version; at most three.
fn close_matches(rc: &ResourceConfig, served: &[(ApiResource, ApiCapabilities)]) -> Vec<String> {
    let want = rc.kind.to_ascii_lowercase();
    let mut scored: Vec<(usize, String)> = served
        .iter()
        .map(|(ar, _)| (edit_distance(&want, &ar.kind.to_ascii_lowercase()), ar))
        .filter(|(d, _)| *d <= 2)
        .map(|(d, ar)| {
            let group_penalty = usize::from(ar.group != rc.group) + usize::from(ar.version != rc.version);
            (d * 3 + group_penalty, describe(&ar.group, &ar.version, &ar.kind))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, s)| s).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(cur).min(row[j]) };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;

    fn served() -> Vec<(ApiResource, ApiCapabilities)> {
        let caps = |scope| ApiCapabilities { scope, subresources: vec![], operations: vec![verbs::LIST.into(), verbs::WATCH.into()] };
        vec![
            (ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")), caps(ApiScope::Namespaced)),
            (ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")), caps(ApiScope::Namespaced)),
            (ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace")), caps(ApiScope::Cluster)),
        ]
    }

    fn rc(group: &str, kind: &str) -> ResourceConfig {
        serde_json::from_value(serde_json::json!({"group": group, "version": "v1", "kind": kind})).unwrap()
    }

    #[test]
    fn resolves_a_served_kind() {
        let r = resolve_one(0, &rc("apps", "Deployment"), &served()).unwrap();
        assert_eq!((r.plural.as_str(), r.namespaced), ("deployments", true));
    }

    #[test]
    fn unknown_kind_lists_close_matches() {
        let e = resolve_one(2, &rc("apps", "Deploymnet"), &served()).unwrap_err().to_string();
        assert_eq!(e, "resources[2]: kind Deploymnet in apps/v1 is not served by the API server; did you mean kind Deployment in apps/v1?");
        let e = resolve_one(0, &rc("", "Deployment"), &served()).unwrap_err().to_string();
        assert!(e.contains("did you mean kind Deployment in apps/v1"), "{e}");
        let e = resolve_one(0, &rc("", "Gizmo"), &served()).unwrap_err().to_string();
        assert!(e.contains("kubectl api-resources"), "{e}");
    }

    #[test]
    fn namespaces_on_a_cluster_scoped_kind_is_an_error() {
        let mut r = rc("", "Namespace");
        r.namespaces = vec!["a".into()];
        let e = resolve_one(0, &r, &served()).unwrap_err().to_string();
        assert!(e.contains("cluster-scoped; remove `namespaces`"), "{e}");
    }
}
