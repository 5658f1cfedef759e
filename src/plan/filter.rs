//! Filters per resource and route: which object changes are shipped. The index tracks
//! every change whatever the filter says, so relists and resyncs stay correct; markers
//! always pass (the worker does not ask).

use serde_json::Value;

use crate::config::FilterConfig;
use crate::model::ChangeType;

/// What a filter looks at in an object change.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub change: ChangeType,
    /// The content shipped before, when the index keeps it.
    pub previous: Option<&'a Value>,
    /// The object now; `None` for a change that carries only a reference.
    pub now: Option<&'a Value>,
}

#[derive(Debug, Clone, Default)]
pub struct Filter {
    types: Option<Vec<ChangeType>>,
    changed_paths: Vec<String>,
    generation_changed: bool,
}

impl Filter {
    pub fn new(cfg: &FilterConfig) -> Filter {
        Filter { types: cfg.types.clone(), changed_paths: cfg.changed_paths.clone(), generation_changed: cfg.generation_changed }
    }

    /// Whether it lets every change pass.
    pub fn is_empty(&self) -> bool {
        self.types.is_none() && self.changed_paths.is_empty() && !self.generation_changed
    }

    /// Whether deciding needs each object's previously shipped content.
    pub fn needs_previous(&self) -> bool {
        !self.changed_paths.is_empty() || self.generation_changed
    }

    /// Whether `change` is shipped. `updated` changes must differ from the previous content
    /// at one of the `changed_paths` and, with `generation_changed`, in
    /// `metadata.generation`; an update whose previous content is unknown passes.
    pub fn passes(&self, c: Candidate) -> bool {
        if let Some(types) = &self.types
            && !types.contains(&c.change)
        {
            return false;
        }
        if c.change != ChangeType::Updated {
            return true;
        }
        let (Some(previous), Some(now)) = (c.previous, c.now) else {
            return true;
        };
        let differs = |pointer: &str| previous.pointer(pointer) != now.pointer(pointer);
        (self.changed_paths.is_empty() || self.changed_paths.iter().any(|p| differs(p))) && (!self.generation_changed || differs("/metadata/generation"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn update<'a>(before: &'a Value, after: &'a Value) -> Candidate<'a> {
        Candidate { change: ChangeType::Updated, previous: Some(before), now: Some(after) }
    }

    fn filter(cfg: Value) -> Filter {
        Filter::new(&serde_json::from_value(cfg).unwrap())
    }

    #[test]
    fn changed_paths_pass_only_updates_touching_them() {
        let f = filter(json!({"changed_paths": ["/spec/template"]}));
        assert!(f.needs_previous());
        let before = json!({"spec": {"template": {"image": "a"}}, "status": 1});
        let image = json!({"spec": {"template": {"image": "b"}}, "status": 1});
        let status = json!({"spec": {"template": {"image": "a"}}, "status": 2});
        assert!(f.passes(update(&before, &image)));
        assert!(!f.passes(update(&before, &status)));
        assert!(f.passes(Candidate { change: ChangeType::Updated, previous: None, now: Some(&status) }), "unknown previous content passes");
    }

    #[test]
    fn generation_and_type_filters() {
        let f = filter(json!({"generation_changed": true, "types": ["updated", "deleted"]}));
        let (one, two) = (json!({"metadata": {"generation": 1}}), json!({"metadata": {"generation": 2}}));
        assert!(f.passes(update(&one, &two)));
        assert!(!f.passes(update(&one, &one)));
        let added = Candidate { change: ChangeType::Added, previous: None, now: Some(&one) };
        assert!(!f.passes(added));
        assert!(Filter::default().passes(added));
    }
}
