//! Routing: the topic of an event and its partition key.

use crate::resource::Resource;

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
}

impl Template {
    pub const HELP: &'static str = "use text and the placeholders {cluster}, {group}, {version}, {kind}, {plural}, e.g. `deltaship.{cluster}.{group}.{plural}`";

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

    pub fn render(&self, cluster: &str, r: &Resource) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Cluster => out.push_str(cluster),
                Part::Group => out.push_str(r.group_token()),
                Part::Version => out.push_str(&r.version),
                Part::Kind => out.push_str(&r.kind.to_ascii_lowercase()),
                Part::Plural => out.push_str(&r.plural),
            }
        }
        out
    }

    /// Whether every resource gets a name of its own from this template (group and kind
    /// or plural both appear). If not, several resources may share one topic.
    pub fn names_resource(&self) -> bool {
        let has = |want: &Part| self.parts.contains(want);
        has(&Part::Group) && (has(&Part::Plural) || has(&Part::Kind))
    }
}

/// Kafka topic names: ASCII letters, digits, `.`, `_`, `-`, at most 249 characters.
pub fn check_topic_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a valid Kafka topic name (ASCII letters, digits, `.`, `_`, `-`, at most 249)"
        ))
    }
}

/// Where the events of one watched resource go and how they are keyed.
#[derive(Debug, Clone)]
pub struct Route {
    pub topic: String,
    /// Prepended to object keys when several resources may share the topic, so that a
    /// ConfigMap and a Secret of the same name never share a key (compaction would merge
    /// them): `<plural>.<group>/`, empty otherwise.
    pub key_prefix: String,
    /// The key of marker records: it starts with `/`, which no object key can (namespace
    /// and object names never contain `/` and are never empty).
    pub marker_key: String,
}

impl Route {
    pub fn new(cluster: &str, resource: &Resource, template: &Template) -> Route {
        let key_prefix = if template.names_resource() {
            String::new()
        } else {
            format!("{}/", resource.label())
        };
        Route {
            topic: template.render(cluster, resource),
            key_prefix,
            marker_key: format!("/deltaship/sync/{}", resource.label()),
        }
    }

    /// The partition key of an object: `namespace/name` or `name`, with the prefix.
    pub fn key(&self, object_key: &str) -> String {
        format!("{}{}", self.key_prefix, object_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::fixtures::*;

    #[test]
    fn default_template_gives_one_topic_per_resource() {
        let t = Template::parse("deltaship.{cluster}.{group}.{plural}").unwrap();
        assert_eq!(t.render("prod", &configmaps()), "deltaship.prod.core.configmaps");
        assert_eq!(t.render("prod", &deployments()), "deltaship.prod.apps.deployments");
        let r = Route::new("prod", &deployments(), &t);
        assert_eq!(r.key("ns/web"), "ns/web");
        assert_eq!(r.marker_key, "/deltaship/sync/deployments.apps");
    }

    #[test]
    fn shared_topic_prefixes_keys_with_the_resource() {
        let t = Template::parse("k8s-{cluster}").unwrap();
        assert!(!t.names_resource());
        let r = Route::new("c", &configmaps(), &t);
        assert_eq!(r.topic, "k8s-c");
        assert_eq!(r.key("ns/a"), "configmaps/ns/a");
    }

    #[test]
    fn bad_templates_are_explained() {
        assert!(Template::parse("x.{nope}").unwrap_err().contains("{nope}"));
        assert!(Template::parse("x.{cluster").unwrap_err().contains("closing"));
        assert!(Template::parse("").is_err());
        assert!(check_topic_name("a/b").is_err());
        assert!(check_topic_name("deltaship.c.core.configmaps").is_ok());
    }
}
