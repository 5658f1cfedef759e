//! The plan: configured resources, as discovery resolved them, expanded into watch scopes,
//! each with the outputs of the routes that ship it. Plain data below the stages: the
//! watch, change and event stages read it, `run` and `check` build it.

mod filter;
mod output;
mod scope;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::address::Address;
use crate::config::{Config, EventFormat, ResourceConfig, RouteConfig, SinkConfig, Template, TemplateError, check_topic_name};
use crate::json::{ALWAYS_IGNORED, ScanError, Scanner};
use crate::model::ResourceType;

pub use filter::{Candidate, Filter};
pub use output::Output;
pub use scope::Scope;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("resources[{index}]: {source}; fix its topic or subject template")]
    Template {
        index: usize,
        #[source]
        source: TemplateError,
    },
    #[error("topic {topic} would hold both {a} and {b} with the same keys; put {{plural}} and {{group}} in the template or give each resource its own `topic`")]
    SharedTopic { topic: String, a: String, b: String },
    #[error(transparent)]
    Redaction(#[from] crate::redact::RedactError),
    #[error("resources[{index}].ignore_fields: {source}; fix: ignore a common parent (e.g. /status) instead of many of its fields")]
    IgnoreFields {
        index: usize,
        #[source]
        source: ScanError,
    },
}

/// Where `resources[index]` goes on a route to `sink`.
fn address(cluster: &str, sink: &SinkConfig, index: usize, rc: &ResourceConfig, resource: &ResourceType) -> Result<Address, PlanError> {
    match sink {
        // The stdout and HTTP sinks have no topics; the default template only names an
        // object's lane.
        SinkConfig::Stdout {} | SinkConfig::Http(_) => Ok(Address::topic(cluster, resource, &Template::default_topic())),
        SinkConfig::Kafka(k) => {
            let route = Address::topic(cluster, resource, rc.topic.as_ref().unwrap_or(&k.topic_template));
            check_topic_name(&route.marker_destination()).map_err(|source| PlanError::Template { index, source })?;
            Ok(route)
        }
        SinkConfig::Nats(n) => Ok(Address::subject(cluster, resource, rc.subject.as_ref().unwrap_or(&n.subject_template), &n.marker_subject_template)),
    }
}

/// The outputs of `resources[index]`: one per route that ships it.
fn outputs(
    config: &Config,
    routes: &[RouteConfig],
    index: usize,
    rc: &ResourceConfig,
    resource: &ResourceType,
    api_server: &str,
) -> Result<Vec<Output>, PlanError> {
    let mut out = Vec::new();
    for (position, route) in routes.iter().enumerate().filter(|(_, r)| r.selects(rc)) {
        out.push(Output {
            route: position,
            route_name: route.name.as_str().into(),
            payload: route.payload.unwrap_or(rc.payload),
            filters: [Filter::new(&rc.filter), Filter::new(&route.filter)],
            knative_source: (route.format.unwrap_or(rc.format) == EventFormat::Knative).then(|| api_server.into()),
            dataschema_base: config.dataschema_base.as_deref().map(Arc::from),
            address: address(&config.cluster, &route.sink, index, rc, resource)?,
        });
    }
    Ok(out)
}

/// The watch scopes of `config`; `api_server` is the API server's URL (the `source` of
/// Knative-shaped events).
pub fn scopes(config: &Config, resources: &[ResourceType], api_server: &str) -> Result<Vec<Arc<Scope>>, PlanError> {
    let routes = config.effective_routes();
    let redactions = crate::redact::for_resources(config)?;
    let mut out = Vec::new();
    // Per route and marker destination: the resource there, and its key prefix.
    let mut owners: HashMap<(usize, Arc<str>), (String, String)> = HashMap::new();
    for (index, (rc, resource)) in config.resources.iter().zip(resources).enumerate() {
        let outputs = outputs(config, &routes, index, rc, resource, api_server)?;
        for o in &outputs {
            // Two resources in one topic are fine when their keys are prefixed; two
            // resources whose markers would share a destination with unprefixed keys are not.
            let shared = (o.route, o.address.marker_destination());
            if let Some((other, prefix)) = owners.get(&shared)
                && *other != resource.label()
                && prefix.is_empty()
            {
                return Err(PlanError::SharedTopic { topic: shared.1.to_string(), a: other.clone(), b: resource.label() });
            }
            owners.insert(shared, (resource.label(), o.address.key_prefix.clone()));
        }
        let ignored: Vec<String> = ALWAYS_IGNORED.iter().map(|p| p.to_string()).chain(rc.ignore_fields.iter().cloned()).collect();
        let scanner = Scanner::new(&ignored, &[]).map_err(|source| PlanError::IgnoreFields { index, source })?;
        let namespaces: Vec<Option<String>> = if rc.namespaces.is_empty() { vec![None] } else { rc.namespaces.iter().cloned().map(Some).collect() };
        for namespace in namespaces {
            out.push(Arc::new(Scope {
                index,
                resource: resource.clone(),
                namespace,
                label_selector: rc.label_selector.clone(),
                field_selector: rc.field_selector.clone(),
                redaction: redactions[index].clone(),
                ignore_fields: rc.ignore_fields.clone(),
                scanner: scanner.clone(),
                relist: rc.relist,
                resync: Some(rc.resync_secs.unwrap_or(config.kubernetes.resync_secs)).filter(|s| *s > 0).map(Duration::from_secs),
                state_markers: Some(config.delivery.state_marker_secs).filter(|s| *s > 0).map(Duration::from_secs),
                outputs: outputs.clone(),
            }));
        }
    }
    Ok(out)
}

/// The distinct marker destinations of `route` (by position) in `scopes`: for Kafka,
/// every topic it writes.
pub fn topics(scopes: &[Arc<Scope>], route: usize) -> Vec<String> {
    let mut t: Vec<String> =
        scopes.iter().flat_map(|s| s.outputs.iter().filter(|o| o.route == route).map(|o| o.address.marker_destination().to_string())).collect();
    t.sort();
    t.dedup();
    t
}

/// Watches that feed `route` (by position): its initial syncs to deliver.
pub fn watches_of(scopes: &[Arc<Scope>], route: usize) -> usize {
    scopes.iter().filter(|s| s.outputs.iter().any(|o| o.route == route)).count()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::config::PayloadMode;
    use crate::model::SyncMode;
    use crate::model::fixtures::{configmaps, deployments};

    fn config(v: Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    const KAFKA: &str = "127.0.0.1:9092";

    #[test]
    fn each_listed_namespace_is_a_watch_with_the_resources_settings() {
        let c = config(json!({
            "kubernetes": {"resync_secs": 600},
            "resources": [
                {"version": "v1", "kind": "ConfigMap", "namespaces": ["a", "b"], "relist": "full", "label_selector": "app=x"},
                {"group": "apps", "version": "v1", "kind": "Deployment", "resync_secs": 0},
            ],
            "sink": {"type": "kafka", "brokers": KAFKA},
        }));
        let scopes = scopes(&c, &[configmaps(), deployments()], "https://api").unwrap();
        let got: Vec<_> = scopes.iter().map(|s| (s.describe(), s.relist, s.resync, s.label_selector.clone())).collect();
        let ten_minutes = Some(Duration::from_secs(600));
        assert_eq!(
            got,
            [
                ("configmaps in a".to_string(), SyncMode::Full, ten_minutes, Some("app=x".to_string())),
                ("configmaps in b".to_string(), SyncMode::Full, ten_minutes, Some("app=x".to_string())),
                ("deployments.apps".to_string(), SyncMode::Diff, None, None),
            ],
            "a resource's resync_secs = 0 turns the default off for it"
        );
        assert_eq!(topics(&scopes, 0), ["deltaship.local.apps.deployments", "deltaship.local.core.configmaps"]);
        assert_eq!(watches_of(&scopes, 0), 3);
    }

    #[test]
    fn routes_pick_their_resources_and_override_the_shape() {
        let c = config(json!({
            "resources": [
                {"version": "v1", "kind": "ConfigMap", "payload": "patch"},
                {"group": "apps", "version": "v1", "kind": "Deployment"},
            ],
            "routes": [
                {"name": "audit", "sink": {"type": "kafka", "brokers": KAFKA, "topic_template": "audit.{group}.{plural}"}},
                {"name": "functions", "resources": ["apps/Deployment"], "payload": "reference", "format": "knative", "sink": {"type": "stdout"}},
            ],
        }));
        let scopes = scopes(&c, &[configmaps(), deployments()], "https://api").unwrap();
        let routes = |i: usize| scopes[i].outputs.iter().map(|o| (o.route_name.to_string(), o.payload, o.knative_source.clone())).collect::<Vec<_>>();
        assert_eq!(routes(0), [("audit".into(), PayloadMode::Patch, None)], "ConfigMaps: only the route that selects every resource");
        assert_eq!(routes(1), [("audit".into(), PayloadMode::Object, None), ("functions".into(), PayloadMode::Reference, Some("https://api".into()))]);
        assert!(scopes[0].keeps_content(), "patch payloads need the shipped content");
        assert!(!scopes[1].keeps_content());
        assert_eq!(topics(&scopes, 0), ["audit.apps.deployments", "audit.core.configmaps"]);
        assert_eq!((watches_of(&scopes, 0), watches_of(&scopes, 1)), (2, 1));
    }

    #[test]
    fn two_resources_in_one_topic_with_the_same_keys_are_refused() {
        // Deployments' keys are unprefixed in their topic (its name names the resource);
        // ConfigMaps sent there too would be told apart by their keys only on their side.
        let c = config(json!({
            "resources": [
                {"group": "apps", "version": "v1", "kind": "Deployment", "topic": "t.{group}.{plural}"},
                {"version": "v1", "kind": "ConfigMap", "topic": "t.apps.deployments"},
            ],
            "sink": {"type": "kafka", "brokers": KAFKA},
        }));
        let e = scopes(&c, &[deployments(), configmaps()], "https://api").unwrap_err().to_string();
        assert!(e.starts_with("topic t.apps.deployments would hold both deployments.apps and configmaps with the same keys"), "{e}");
        // One topic for every resource: keys get the resource as a prefix, so it is fine.
        let c = config(json!({
            "resources": [{"version": "v1", "kind": "ConfigMap"}, {"group": "apps", "version": "v1", "kind": "Deployment"}],
            "sink": {"type": "kafka", "brokers": KAFKA, "topic_template": "all-{cluster}"},
        }));
        let scopes = scopes(&c, &[configmaps(), deployments()], "https://api").unwrap();
        assert_eq!(topics(&scopes, 0), ["all-local"]);
        assert_eq!(scopes[1].outputs[0].address.key_prefix, "deployments.apps/");
    }
}
