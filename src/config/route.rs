//! Routes: several sinks fed by the same watches, each with its own selection and shape.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Config, EventFormat, FilterConfig, PayloadMode, ResourceConfig, SinkConfig};

/// The name of the one route of a configuration with `sink` (or no sink) and no `routes`.
pub const DEFAULT_ROUTE: &str = "default";

/// One destination of events: a sink and what it receives.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Name of the route, unique: a lowercase DNS label, e.g. `audit`. The `route` label
    /// of metrics and the route's line in /readyz. Required.
    pub name: String,
    /// Where this route's events go: the same settings as `sink`. Required.
    pub sink: SinkConfig,
    /// Which of `resources` this route ships, each as `Kind` or `group/Kind` (`core/Kind`
    /// for the core group), e.g. `["ConfigMap", "apps/Deployment"]`. Default: all.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Overrides the `payload` of every resource on this route. Default: each resource's.
    pub payload: Option<PayloadMode>,
    /// Overrides the `format` of every resource on this route. Default: each resource's.
    pub format: Option<EventFormat>,
    /// Applied after the resource's own filter: a change goes to this route when both
    /// pass. Default: ships everything the resource's filter passes.
    #[serde(default)]
    pub filter: FilterConfig,
}

impl RouteConfig {
    /// Whether the route ships the events of `r`.
    pub fn selects(&self, r: &ResourceConfig) -> bool {
        self.resources.is_empty() || self.resources.iter().any(|s| selector_matches(s, r))
    }
}

/// `Kind` matches the kind in any group; `group/Kind` one group, `core/Kind` the core group.
pub fn selector_matches(selector: &str, r: &ResourceConfig) -> bool {
    let (group, kind) = match selector.rsplit_once('/') {
        Some((g, k)) => (Some(if g == "core" { "" } else { g }), k),
        None => (None, selector),
    };
    kind.eq_ignore_ascii_case(&r.kind) && group.is_none_or(|g| g.eq_ignore_ascii_case(&r.group))
}

impl Config {
    /// The routes events take: `routes`, or else one route named `default` to `sink`
    /// (stdout when unset) with every resource.
    pub fn effective_routes(&self) -> Vec<RouteConfig> {
        if !self.routes.is_empty() {
            return self.routes.clone();
        }
        vec![RouteConfig {
            name: DEFAULT_ROUTE.into(),
            sink: self.sink.clone().unwrap_or_default(),
            resources: Vec::new(),
            payload: None,
            format: None,
            filter: FilterConfig::default(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str, kind: &str) -> ResourceConfig {
        serde_json::from_value(serde_json::json!({"group": group, "version": "v1", "kind": kind})).unwrap()
    }

    #[test]
    fn selectors_match_kind_in_any_group_or_one_group() {
        let cm = resource("", "ConfigMap");
        let deploy = resource("apps", "Deployment");
        assert!(selector_matches("ConfigMap", &cm));
        assert!(selector_matches("configmap", &cm));
        assert!(selector_matches("core/ConfigMap", &cm));
        assert!(!selector_matches("apps/ConfigMap", &cm));
        assert!(selector_matches("apps/Deployment", &deploy));
        assert!(selector_matches("Deployment", &deploy));
        assert!(!selector_matches("core/Deployment", &deploy));
        assert!(!selector_matches("Secret", &cm));
    }
}
