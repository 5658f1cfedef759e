//! The plan: configured resources, as discovery resolved them, expanded into watch scopes
//! with their routes. `run` and `check` share it.

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use crate::change::{Filter, SyncMode};
use crate::config::{Config, EventFormat, RelistMode, ResourceConfig, SinkConfig};
use crate::resource::Resource;
use crate::route::{Route, Template, check_topic_name};
use crate::watch::Scope;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("resources[{index}]: {problem}; fix its topic or subject template")]
    Template { index: usize, problem: String },
    #[error("topic {topic} would hold both {a} and {b} with the same keys; put {{plural}} and {{group}} in the template or give each resource its own `topic`")]
    SharedTopic { topic: String, a: String, b: String },
}

/// The stdout sink has no topics; the default template only names an object's lane.
const STDOUT_TEMPLATE: &str = "deltaship.{cluster}.{group}.{plural}";

fn parse(index: usize, t: &str) -> Result<Template, PlanError> {
    Template::parse(t).map_err(|problem| PlanError::Template { index, problem })
}

/// The route of `resources[index]` for the configured sink.
fn route(config: &Config, index: usize, rc: &ResourceConfig, resource: &Resource) -> Result<Route, PlanError> {
    let cluster = &config.cluster;
    match &config.sink {
        SinkConfig::Stdout => Ok(Route::topic(cluster, resource, &parse(index, STDOUT_TEMPLATE)?)),
        SinkConfig::Kafka(k) => {
            let route = Route::topic(cluster, resource, &parse(index, rc.topic.as_deref().unwrap_or(&k.topic_template))?);
            check_topic_name(&route.marker_destination()).map_err(|problem| PlanError::Template { index, problem })?;
            Ok(route)
        }
        SinkConfig::Nats(n) => {
            let objects = parse(index, rc.subject.as_deref().unwrap_or(&n.subject_template))?;
            Ok(Route::subject(cluster, resource, &objects, &parse(index, &n.marker_subject_template)?))
        }
    }
}

/// The watch scopes of `config`; `api_server` is the API server's URL (the `source` of
/// Knative-shaped events).
pub fn scopes(config: &Config, resources: &[Resource], api_server: &str) -> Result<Vec<Arc<Scope>>, PlanError> {
    let mut out = Vec::new();
    let mut owners: HashMap<Arc<str>, (String, String)> = HashMap::new();
    for (index, (rc, resource)) in config.resources.iter().zip(resources).enumerate() {
        let route = route(config, index, rc, resource)?;
        // Two resources in one topic are fine when their keys are prefixed; two
        // resources whose markers would share a destination with unprefixed keys are not.
        let shared = route.marker_destination();
        if let Some((other, prefix)) = owners.get(&shared)
            && *other != resource.label()
            && prefix.is_empty()
        {
            return Err(PlanError::SharedTopic {
                topic: shared.to_string(),
                a: other.clone(),
                b: resource.label(),
            });
        }
        owners.insert(shared, (resource.label(), route.key_prefix.clone()));
        let namespaces: Vec<Option<String>> = if rc.namespaces.is_empty() {
            vec![None]
        } else {
            rc.namespaces.iter().cloned().map(Some).collect()
        };
        for namespace in namespaces {
            out.push(Arc::new(Scope {
                index,
                resource: resource.clone(),
                namespace,
                label_selector: rc.label_selector.clone(),
                field_selector: rc.field_selector.clone(),
                payload: rc.payload,
                redact: rc.redact,
                ignore_fields: rc.ignore_fields.clone(),
                relist: match rc.relist {
                    RelistMode::Diff => SyncMode::Diff,
                    RelistMode::Full => SyncMode::Full,
                },
                resync: Some(rc.resync_secs.unwrap_or(config.kubernetes.resync_secs))
                    .filter(|s| *s > 0)
                    .map(Duration::from_secs),
                filter: Filter::new(&rc.filter),
                knative_source: (rc.format == EventFormat::Knative).then(|| api_server.into()),
                route: route.clone(),
            }));
        }
    }
    Ok(out)
}

/// The distinct marker destinations of `scopes`: for Kafka, every topic.
pub fn topics(scopes: &[Arc<Scope>]) -> Vec<String> {
    let mut t: Vec<String> = scopes.iter().map(|s| s.route.marker_destination().to_string()).collect();
    t.sort();
    t.dedup();
    t
}
