//! Name templates for topics and subjects, such as `deltaship.{cluster}.{group}.{plural}`.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::problem::{Problem, problem};

/// A name template such as `deltaship.{cluster}.{group}.{plural}`, parsed when the
/// configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// As written, for `print-config`.
    text: String,
    parts: Vec<Piece>,
}

/// A piece of a template: literal text or a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Cluster,
    Group,
    Version,
    Kind,
    Plural,
    Namespace,
    Name,
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("`{template}` has a `{{` without a closing `}}`")]
    Unclosed { template: String },
    #[error("`{template}` uses the unknown placeholder `{{{placeholder}}}`")]
    UnknownPlaceholder { template: String, placeholder: String },
    #[error("the template is empty")]
    Empty,
    /// The template parsed, but names a topic Kafka refuses once filled in.
    #[error("`{topic}` is not a valid Kafka topic name (ASCII letters, digits, `.`, `_`, `-`, at most 249)")]
    TopicName { topic: String },
}

impl Template {
    pub const HELP: &'static str = "use text and the placeholders {cluster}, {group}, {version}, {kind}, {plural} (subjects also {namespace}, {name}), e.g. `deltaship.{cluster}.{group}.{plural}`";

    pub fn parse(s: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Piece::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or_else(|| TemplateError::Unclosed { template: s.into() })?;
            let part = match &rest[open + 1..open + close] {
                "cluster" => Piece::Cluster,
                "group" => Piece::Group,
                "version" => Piece::Version,
                "kind" => Piece::Kind,
                "plural" => Piece::Plural,
                "namespace" => Piece::Namespace,
                "name" => Piece::Name,
                other => return Err(TemplateError::UnknownPlaceholder { template: s.into(), placeholder: other.into() }),
            };
            parts.push(part);
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Piece::Text(rest.to_string()));
        }
        if parts.is_empty() {
            return Err(TemplateError::Empty);
        }
        Ok(Template { text: s.into(), parts })
    }

    /// A template of the program itself, known to parse (its unit test proves it).
    fn builtin(text: &'static str) -> Template {
        Template::parse(text).expect("built-in templates parse")
    }

    /// `deltaship.{cluster}.{group}.{plural}`: one Kafka topic per resource.
    pub fn default_topic() -> Template {
        Template::builtin("deltaship.{cluster}.{group}.{plural}")
    }

    /// `deltaship.{cluster}.{group}.{kind}.{namespace}.{name}`: one NATS subject per object.
    pub fn default_subject() -> Template {
        Template::builtin("deltaship.{cluster}.{group}.{kind}.{namespace}.{name}")
    }

    /// `deltaship.{cluster}.{group}.{kind}._sync`: a resource's marker subject (`_sync`
    /// is never a namespace).
    pub fn default_marker_subject() -> Template {
        Template::builtin("deltaship.{cluster}.{group}.{kind}._sync")
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its text and placeholders, in order.
    pub fn parts(&self) -> &[Piece] {
        &self.parts
    }

    /// Whether the template uses `{namespace}` or `{name}` (one name per object).
    pub fn names_object(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Piece::Namespace | Piece::Name))
    }

    /// Whether every resource gets a name of its own from this template (group and kind
    /// or plural both appear). If not, several resources may share one topic.
    pub fn names_resource(&self) -> bool {
        let has = |want: &Piece| self.parts.contains(want);
        has(&Piece::Group) && (has(&Piece::Plural) || has(&Piece::Kind))
    }
}

impl Serialize for Template {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A string of text and placeholders (not checked by the schema: `check` does).
impl JsonSchema for Template {
    fn schema_name() -> Cow<'static, str> {
        "Template".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "minLength": 1, "description": format!("A name template: {}.", Template::HELP)})
    }
}

impl<'de> Deserialize<'de> for Template {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Template, D::Error> {
        super::parse::parse_str(d, "a name template such as `deltaship.{cluster}.{group}.{plural}`", |v| {
            Template::parse(v).map_err(|e| (e.to_string(), Template::HELP.into()))
        })
    }
}

/// Kafka topic names: ASCII letters, digits, `.`, `_`, `-`, at most 249 characters.
pub fn check_topic_name(name: &str) -> Result<(), TemplateError> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(TemplateError::TopicName { topic: name.into() }) }
}

/// A template of one name per resource (a topic, a marker subject) without `{namespace}`
/// or `{name}`, which only NATS object subjects may use. The template itself parsed when
/// the configuration was loaded.
pub(super) fn check_per_resource(out: &mut Vec<Problem>, key: String, t: &Template) {
    if t.names_object() {
        out.push(problem(key, "uses {namespace} or {name}, which name single objects", "use only {cluster}, {group}, {version}, {kind} and {plural} here"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_templates_are_explained() {
        assert_eq!(Template::parse("x.{nope}").unwrap_err().to_string(), "`x.{nope}` uses the unknown placeholder `{nope}`");
        assert!(Template::parse("x.{cluster").unwrap_err().to_string().contains("closing"));
        assert_eq!(Template::parse(""), Err(TemplateError::Empty));
    }

    #[test]
    fn the_built_in_templates_parse() {
        assert!(Template::default_topic().names_resource() && !Template::default_topic().names_object());
        assert!(Template::default_subject().names_object());
        assert!(!Template::default_marker_subject().names_object());
    }

    #[test]
    fn templates_deserialize_from_their_text_and_serialize_back_to_it() {
        let t: Template = serde_json::from_value(serde_json::json!("k8s-{cluster}.{plural}")).unwrap();
        assert_eq!(t.parts(), [Piece::Text("k8s-".into()), Piece::Cluster, Piece::Text(".".into()), Piece::Plural]);
        assert_eq!(serde_json::to_value(&t).unwrap(), "k8s-{cluster}.{plural}");
        let e = serde_json::from_value::<Template>(serde_json::json!("a.{kind")).unwrap_err().to_string();
        assert!(e.contains("`a.{kind` has a `{` without a closing `}`; fix: use text and the placeholders"), "{e}");
        assert!(serde_json::from_value::<Template>(serde_json::json!(5)).is_err());
    }

    #[test]
    fn topic_names_kafka_refuses_are_explained() {
        assert!(check_topic_name("a/b").unwrap_err().to_string().contains("`a/b` is not a valid Kafka topic name"));
        assert!(check_topic_name("deltaship.c.core.configmaps").is_ok());
    }
}
