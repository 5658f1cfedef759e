//! Filters per resource: which object changes are shipped. The index tracks every change
//! whatever the filter says, so relists and resyncs stay correct; markers always pass.

use super::{Change, ChangeType, Payload};
use crate::config::FilterConfig;

#[derive(Debug, Clone, Default)]
pub struct Filter {
    types: Option<Vec<ChangeType>>,
    changed_paths: Vec<String>,
    generation_changed: bool,
}

impl Filter {
    pub fn new(cfg: &FilterConfig) -> Filter {
        Filter {
            types: cfg.types.clone(),
            changed_paths: cfg.changed_paths.clone(),
            generation_changed: cfg.generation_changed,
        }
    }

    /// Whether deciding needs each object's previously shipped content.
    pub fn needs_previous(&self) -> bool {
        !self.changed_paths.is_empty() || self.generation_changed
    }

    /// Whether `change` is shipped. `updated` changes must differ from the previous content
    /// at one of the `changed_paths` and, with `generation_changed`, in
    /// `metadata.generation`; an update whose previous content is unknown passes.
    pub fn passes(&self, change: &Change) -> bool {
        let Change::Object(c) = change else { return true };
        if let Some(types) = &self.types
            && !types.contains(&c.change)
        {
            return false;
        }
        if c.change != ChangeType::Updated {
            return true;
        }
        let (Some(previous), Payload::Object(now)) = (&c.previous, &c.payload) else {
            return true;
        };
        let differs = |pointer: &str| previous.pointer(pointer) != now.value.pointer(pointer);
        (self.changed_paths.is_empty() || self.changed_paths.iter().any(|p| differs(p)))
            && (!self.generation_changed || differs("/metadata/generation"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::change::fixtures::configmap;
    use crate::change::ObjectChange;

    fn update(before: serde_json::Value, after: serde_json::Value) -> Change {
        let mut now = configmap("a", "u", "2", json!({}));
        now.value = after;
        Change::Object(ObjectChange {
            change: ChangeType::Updated,
            payload: Payload::Object(now),
            sync_id: None,
            previous: Some(Arc::new(before)),
        })
    }

    fn filter(cfg: serde_json::Value) -> Filter {
        Filter::new(&serde_json::from_value(cfg).unwrap())
    }

    #[test]
    fn changed_paths_pass_only_updates_touching_them() {
        let f = filter(json!({"changed_paths": ["/spec/template"]}));
        assert!(f.needs_previous());
        let image = update(json!({"spec": {"template": {"image": "a"}}, "status": 1}), json!({"spec": {"template": {"image": "b"}}, "status": 1}));
        let status = update(json!({"spec": {"template": {"image": "a"}}, "status": 1}), json!({"spec": {"template": {"image": "a"}}, "status": 2}));
        assert!(f.passes(&image));
        assert!(!f.passes(&status));
    }

    #[test]
    fn generation_and_type_filters() {
        let f = filter(json!({"generation_changed": true, "types": ["updated", "deleted"]}));
        assert!(f.passes(&update(json!({"metadata": {"generation": 1}}), json!({"metadata": {"generation": 2}}))));
        assert!(!f.passes(&update(json!({"metadata": {"generation": 1}}), json!({"metadata": {"generation": 1}}))));
        let added = Change::Object(ObjectChange {
            change: ChangeType::Added,
            payload: Payload::Object(configmap("a", "u", "1", json!({}))),
            sync_id: None,
            previous: None,
        });
        assert!(!f.passes(&added));
        assert!(Filter::default().passes(&added));
    }
}
