//! Routes: several sinks fed by the same watches, each with its own selection and shape.

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::problem::{Problem, problem};
use super::resource::{EventFormat, FilterConfig, PayloadMode, ResourceConfig};
use super::sink::SinkConfig;
use super::{names, pointers};

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

/// `sink`, or `routes` with their sinks, names, selectors and filters.
pub(super) fn validate_routes(out: &mut Vec<Problem>, sink: Option<&SinkConfig>, routes: &[RouteConfig], resources: &[ResourceConfig]) {
    if let Some(sink) = sink {
        sink.validate(out, "sink");
        if !routes.is_empty() {
            out.push(problem("sink", "is set together with `routes`", "move the sink into a [[routes]] entry (with a `name`), or remove `routes`"));
        }
    }
    let mut names = HashSet::new();
    for (i, r) in routes.iter().enumerate() {
        let at = |field: &str| format!("routes[{i}].{field}");
        if !names::is_dns_label(&r.name) {
            out.push(problem(at("name"), format!("`{}` is not a valid route name", r.name), "use a lowercase DNS label, e.g. `audit`"));
        } else if !names.insert(r.name.as_str()) {
            out.push(problem(at("name"), format!("`{}` names two routes", r.name), "give each route its own name"));
        }
        r.sink.validate(out, &at("sink"));
        for (j, selector) in r.resources.iter().enumerate() {
            if !resources.iter().any(|rc| selector_matches(selector, rc)) {
                let known: Vec<String> =
                    resources.iter().map(|rc| if rc.group.is_empty() { rc.kind.clone() } else { format!("{}/{}", rc.group, rc.kind) }).collect();
                out.push(problem(
                    at(&format!("resources[{j}]")),
                    format!("`{selector}` matches none of `resources`"),
                    format!("name a configured kind as `Kind` or `group/Kind`: {}", known.join(", ")),
                ));
            }
        }
        pointers::check_pointers(out, &at("filter.changed_paths"), &r.filter.changed_paths, "`/spec/template`");
    }
    if !routes.is_empty() {
        for (i, rc) in resources.iter().enumerate() {
            if !routes.iter().any(|r| r.selects(rc)) {
                out.push(problem(
                    format!("resources[{i}]"),
                    format!("{} is shipped by no route", rc.kind),
                    "add it to a route's `resources` (or leave a route's `resources` empty to ship all), or remove it",
                ));
            }
        }
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
