//! One watched resource (`resources[]`): its watch scope, how its events are shaped and
//! which changes are shipped.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::bounds;
use super::problem::{Problem, problem};
use super::redact::{KEY_FIX, RedactAction, RedactField};
use super::template::{self, Template};
use super::{names, pointers};
use crate::model::{ChangeType, SyncMode};

/// One watched resource, with its watch scope and how its events are shaped.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Namespaces to watch, one watch each. Left out (the default): all namespaces with one
    /// watch; an empty list is refused (omit the key to watch every namespace). Must be
    /// left out for cluster-scoped kinds.
    #[serde(default, deserialize_with = "listed_namespaces", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1))]
    pub namespaces: Vec<String>,
    /// Label selector, e.g. `app=web,tier!=cache`. Default: none.
    pub label_selector: Option<String>,
    /// Field selector, e.g. `metadata.name=foo`. Default: none.
    pub field_selector: Option<String>,
    /// What `data` carries: `object` (default), `reference`, or `patch` (updates carry an
    /// RFC 6902 JSON Patch from the previously shipped content; the index then keeps each
    /// object's shipped content).
    #[serde(default)]
    pub payload: PayloadMode,
    /// How a relist (after a watch could not resume) is shipped: `diff` (default: only
    /// differences against the index) or `full` (every object as `synced`, plus deletes).
    #[serde(default)]
    pub relist: SyncMode,
    /// Resync period of this resource in seconds, overriding `kubernetes.resync_secs`;
    /// 0 turns resyncs off for it. The index then keeps each object's shipped content.
    #[schemars(transform = &bounds::RESOURCE_RESYNC_SECS)]
    pub resync_secs: Option<u64>,
    /// Redact before shipping: drop managedFields, digest Secret values and a Secret's
    /// last-applied annotation. Default: true. Turning it off ships Secret values.
    #[serde(default = "default_true")]
    pub redact: bool,
    /// Field rules applied before shipping, whatever `redact` says: `{ path, action }`,
    /// `path` a JSON pointer (`*` for every item or member), `action` `drop`, `mask` or
    /// `hash`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_fields: Vec<RedactField>,
    /// JSON pointers left out of the change fingerprint: an update that only touches
    /// these is skipped as a no-op. `/metadata/resourceVersion` and
    /// `/metadata/managedFields` are always ignored. Default: none.
    #[serde(default)]
    pub ignore_fields: Vec<String>,
    /// Topic (Kafka) for this resource, overriding `sink.topic_template`. Same placeholders.
    pub topic: Option<Template>,
    /// Subject (NATS) of this resource's objects, overriding `sink.subject_template`.
    pub subject: Option<Template>,
    /// The shape of object events: `deltaship` (default) or `knative` (as Knative's
    /// ApiServerSource: types `dev.knative.apiserver.resource.add|update|delete`, or
    /// `dev.knative.apiserver.ref.*` with an ObjectReference as data when `payload` is
    /// `reference`; `source` = the API server URL, `subject` = the object's API path), so
    /// existing Knative Triggers and functions work unchanged. Markers keep deltaship's shape.
    #[serde(default)]
    pub format: EventFormat,
    /// Which changes are shipped (default: all). For triggers and audits of selected
    /// changes; a filtered stream cannot rebuild state. Filtered changes are counted in
    /// `deltaship_filtered_events_total` and still tracked by the index.
    #[serde(default)]
    pub filter: FilterConfig,
    /// Start this resource's watches from the routes' checkpoints (`resume.enabled`
    /// on). False: every start is a full initial sync for it. Default: true.
    #[serde(default = "default_true")]
    pub resume: bool,
}

impl ResourceConfig {
    /// The problems of `resources[i]`; `digest_key`: whether `redaction.digest_key_file` is
    /// set, which `hash` rules need.
    pub(super) fn validate(&self, out: &mut Vec<Problem>, i: usize, digest_key: bool) {
        let at = |field: &str| format!("resources[{i}].{field}");
        if self.version.trim().is_empty() {
            out.push(problem(at("version"), "is empty", "set the API version, e.g. `v1`"));
        }
        if self.kind.trim().is_empty() {
            out.push(problem(at("kind"), "is empty", "set the kind, e.g. `Deployment`"));
        }
        for (j, ns) in self.namespaces.iter().enumerate() {
            if !names::is_dns_label(ns) {
                out.push(problem(
                    at(&format!("namespaces[{j}]")),
                    format!("`{ns}` is not a valid namespace name"),
                    "use a lowercase DNS label (letters, digits, `-`), or remove `namespaces` to watch all",
                ));
            }
        }
        for (name, sel) in [("label_selector", &self.label_selector), ("field_selector", &self.field_selector)] {
            if let Some(sel) = sel
                && sel.split(',').any(|term| term.trim().is_empty())
            {
                out.push(problem(
                    at(name),
                    format!("`{sel}` has an empty term"),
                    "write comma-separated terms such as `app=web,tier!=cache`, or remove the key",
                ));
            }
        }
        if let Some(secs) = self.resync_secs {
            bounds::RESOURCE_RESYNC_SECS.check(out, &format!("resources[{i}]"), secs);
        }
        pointers::check_pointers(out, &at("filter.changed_paths"), &self.filter.changed_paths, "`/spec/template`");
        pointers::check_pointers(out, &at("ignore_fields"), &self.ignore_fields, "`/status` or `/metadata/annotations/example.com~1note`");
        if let Some(t) = &self.topic {
            template::check_per_resource(out, at("topic"), t);
        }
        if !digest_key {
            for (j, _) in self.redact_fields.iter().enumerate().filter(|(_, r)| r.action == RedactAction::Hash) {
                out.push(problem(
                    at(&format!("redact_fields[{j}].action")),
                    "is `hash` without a digest key: an unkeyed digest of a short value (a PIN, a password) is recovered by hashing guesses",
                    format!("set redaction.digest_key_file ({KEY_FIX}), or use `mask`"),
                ));
            }
        }
    }
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PayloadMode {
    /// The whole (redacted) object.
    #[default]
    Object,
    /// apiVersion, kind, namespace, name, uid and resourceVersion only.
    Reference,
    /// Like `object`, but `updated` events carry a JSON Patch (RFC 6902) from the previous
    /// event's content, with `datacontenttype: application/json-patch+json`.
    Patch,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventFormat {
    #[default]
    Deltaship,
    Knative,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// Ship only these object event types (`added`, `updated`, `deleted`, `synced`).
    /// Markers are always shipped. Default: all.
    pub types: Option<Vec<ChangeType>>,
    /// Ship an `updated` only when one of these JSON pointers changed, e.g.
    /// `/spec/template` of a Deployment (so status churn never wakes a function).
    #[serde(default)]
    pub changed_paths: Vec<String>,
    /// Ship an `updated` only when `metadata.generation` changed (a spec change).
    #[serde(default)]
    pub generation_changed: bool,
}

/// `namespaces` as listed; an empty list is refused: it looks like "none" and would watch
/// every namespace, which leaving the key out says.
fn listed_namespaces<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let listed = Vec::<String>::deserialize(d)?;
    if listed.is_empty() {
        return Err(serde::de::Error::custom(
            "is an empty list, which would watch every namespace; fix: omit the key to watch every namespace, or list the namespaces to watch",
        ));
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_namespace_list_is_refused_and_a_missing_one_watches_all() {
        let parse = |v: serde_json::Value| serde_json::from_value::<ResourceConfig>(v);
        let e = parse(serde_json::json!({"version": "v1", "kind": "ConfigMap", "namespaces": []})).unwrap_err().to_string();
        assert!(e.contains("is an empty list") && e.contains("fix: omit the key to watch every namespace"), "{e}");
        let all = parse(serde_json::json!({"version": "v1", "kind": "ConfigMap"})).unwrap();
        assert!(all.namespaces.is_empty());
        assert!(serde_json::to_value(&all).unwrap().get("namespaces").is_none(), "printed as it is read back");
        assert_eq!(parse(serde_json::json!({"version": "v1", "kind": "ConfigMap", "namespaces": ["a"]})).unwrap().namespaces, ["a"]);
    }
}
