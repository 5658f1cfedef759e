//! The plan: configured resources, as discovery resolved them, expanded into watch scopes
//! with their routes. `run` and `check` share it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, SinkConfig};
use crate::resource::Resource;
use crate::route::{Route, Template, check_topic_name};
use crate::watch::Scope;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("resources[{index}].topic: {problem}; fix the template")]
    Topic { index: usize, problem: String },
    #[error("topic {topic} would hold both {a} and {b} with the same keys; put {{plural}} and {{group}} in the template or give each resource its own `topic`")]
    SharedTopic { topic: String, a: String, b: String },
}

/// The topic template of the sink (stdout uses the default one: its topic only names
/// the lane of an object).
fn sink_template(config: &Config) -> String {
    match &config.sink {
        SinkConfig::Kafka(k) => k.topic_template.clone(),
        SinkConfig::Stdout => "deltaship.{cluster}.{group}.{plural}".into(),
    }
}

pub fn scopes(config: &Config, resources: &[Resource]) -> Result<Vec<Arc<Scope>>, PlanError> {
    let default_template = sink_template(config);
    let mut out = Vec::new();
    let mut owners: HashMap<String, (String, String)> = HashMap::new();
    for (index, (rc, resource)) in config.resources.iter().zip(resources).enumerate() {
        let template = Template::parse(rc.topic.as_deref().unwrap_or(&default_template))
            .map_err(|problem| PlanError::Topic { index, problem })?;
        let route = Route::new(&config.cluster, resource, &template);
        if matches!(config.sink, SinkConfig::Kafka(_)) {
            check_topic_name(&route.topic).map_err(|problem| PlanError::Topic { index, problem })?;
        }
        // Two resources in one topic are fine when their keys are prefixed; the same
        // resource configured twice into one topic with unprefixed keys is not.
        if let Some((other, prefix)) = owners.get(&route.topic)
            && *other != resource.label()
            && prefix.is_empty()
        {
            return Err(PlanError::SharedTopic {
                topic: route.topic.clone(),
                a: other.clone(),
                b: resource.label(),
            });
        }
        owners.insert(route.topic.clone(), (resource.label(), route.key_prefix.clone()));
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
                route: route.clone(),
            }));
        }
    }
    Ok(out)
}

/// The distinct topics of `scopes`.
pub fn topics(scopes: &[Arc<Scope>]) -> Vec<String> {
    let mut t: Vec<String> = scopes.iter().map(|s| s.route.topic.clone()).collect();
    t.sort();
    t.dedup();
    t
}
