//! A watched resource as discovery resolved it: the names every stage derives from.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl ResourceType {
    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The CloudEvents `source`: `//<cluster>/api/v1/<plural>` for the core group,
    /// `//<cluster>/apis/<group>/<version>/<plural>` otherwise (the API server's paths).
    pub fn source(&self, cluster: &str) -> String {
        if self.group.is_empty() {
            format!("//{cluster}/api/{}/{}", self.version, self.plural)
        } else {
            format!("//{cluster}/apis/{}/{}/{}", self.group, self.version, self.plural)
        }
    }

    /// `plural` for the core group, `plural.group` otherwise, as kubectl names resources.
    /// Used as the `resource` metric label (bounded: one per configured resource).
    pub fn label(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// The group as a name token: `core` for the core group.
    pub fn group_token(&self) -> &str {
        if self.group.is_empty() { "core" } else { &self.group }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::ResourceType;

    pub fn configmaps() -> ResourceType {
        ResourceType { group: String::new(), version: "v1".into(), kind: "ConfigMap".into(), plural: "configmaps".into(), namespaced: true }
    }

    pub fn deployments() -> ResourceType {
        ResourceType { group: "apps".into(), version: "v1".into(), kind: "Deployment".into(), plural: "deployments".into(), namespaced: true }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;

    #[test]
    fn source_follows_api_server_paths() {
        assert_eq!(configmaps().source("c1"), "//c1/api/v1/configmaps");
        assert_eq!(deployments().source("c1"), "//c1/apis/apps/v1/deployments");
        assert_eq!(deployments().label(), "deployments.apps");
        assert_eq!(configmaps().api_version(), "v1");
    }
}
