//! Names rendered from a template (`config::Template`) for one resource or object.

use crate::config::{Piece, Template};
use crate::model::ResourceType;

use crate::model::subject::encode_token;

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

/// `template` filled in with `names`, written in `style`.
pub fn render(template: &Template, style: Style, names: &Names) -> String {
    let r = names.resource;
    let mut out = String::new();
    for p in template.parts() {
        let value: Option<String> = match p {
            Piece::Text(t) => {
                out.push_str(t);
                continue;
            }
            Piece::Cluster => Some(names.cluster.to_string()),
            Piece::Group => Some(r.group.clone()).filter(|g| !g.is_empty()),
            Piece::Version => Some(r.version.clone()),
            Piece::Kind => Some(r.kind.to_ascii_lowercase()),
            Piece::Plural => Some(r.plural.clone()),
            Piece::Namespace => names.namespace.map(str::to_string),
            Piece::Name => names.name.map(str::to_string),
        };
        match style {
            Style::Topic if *p == Piece::Group => out.push_str(value.as_deref().unwrap_or("core")),
            Style::Topic => out.push_str(value.as_deref().unwrap_or_default()),
            Style::Subject => out.push_str(&encode_token(value.as_deref())),
        }
    }
    out
}
