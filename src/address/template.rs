//! Name templates for topics and subjects, such as `deltaship.{cluster}.{group}.{plural}`.

use crate::model::ResourceType;

use super::subject::encode_token;

/// A name template such as `deltaship.{cluster}.{group}.{plural}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Cluster,
    Group,
    Version,
    Kind,
    Plural,
    Namespace,
    Name,
}

/// How values are written into a rendered name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Kafka topics: values as they are, `core` for the core group.
    Topic,
    /// NATS subjects: every value encoded to stay exactly one token (see `encode_token`),
    /// `_` for the core group and for the namespace of cluster-scoped objects.
    Subject,
}

/// The values a template can use.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    pub cluster: &'a str,
    pub resource: &'a ResourceType,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl Template {
    pub const HELP: &'static str = "use text and the placeholders {cluster}, {group}, {version}, {kind}, {plural} (subjects also {namespace}, {name}), e.g. `deltaship.{cluster}.{group}.{plural}`";

    pub fn parse(s: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("`{s}` has a `{{` without a closing `}}`"))?;
            let part = match &rest[open + 1..open + close] {
                "cluster" => Part::Cluster,
                "group" => Part::Group,
                "version" => Part::Version,
                "kind" => Part::Kind,
                "plural" => Part::Plural,
                "namespace" => Part::Namespace,
                "name" => Part::Name,
                other => return Err(format!("`{s}` uses the unknown placeholder `{{{other}}}`")),
            };
            parts.push(part);
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        if parts.is_empty() {
            return Err("the template is empty".into());
        }
        Ok(Template { parts })
    }

    pub fn render(&self, style: Style, names: &Names) -> String {
        let r = names.resource;
        let mut out = String::new();
        for p in &self.parts {
            let value: Option<String> = match p {
                Part::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Part::Cluster => Some(names.cluster.to_string()),
                Part::Group => Some(r.group.clone()).filter(|g| !g.is_empty()),
                Part::Version => Some(r.version.clone()),
                Part::Kind => Some(r.kind.to_ascii_lowercase()),
                Part::Plural => Some(r.plural.clone()),
                Part::Namespace => names.namespace.map(str::to_string),
                Part::Name => names.name.map(str::to_string),
            };
            match style {
                Style::Topic if *p == Part::Group => out.push_str(value.as_deref().unwrap_or("core")),
                Style::Topic => out.push_str(value.as_deref().unwrap_or_default()),
                Style::Subject => out.push_str(&encode_token(value.as_deref())),
            }
        }
        out
    }

    /// Whether the template uses `{namespace}` or `{name}` (one name per object).
    pub fn names_object(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Namespace | Part::Name))
    }

    /// Whether every resource gets a name of its own from this template (group and kind
    /// or plural both appear). If not, several resources may share one topic.
    pub fn names_resource(&self) -> bool {
        let has = |want: &Part| self.parts.contains(want);
        has(&Part::Group) && (has(&Part::Plural) || has(&Part::Kind))
    }
}
