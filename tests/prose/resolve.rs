//! Rust paths written in prose (`change::Classifier`, `Observed::Bookmark`), resolved as Rust
//! resolves them, over the modules and items that `items` read from the sources.

use std::collections::BTreeSet;

use super::items::{Index, Item};
use super::support::docs::root;

/// Crates whose library is named otherwise than their package (as prose writes them).
const LIBRARY_NAMES: &[&str] = &["cloudevents"]; // the cloudevents-sdk package

/// The Rust sources' modules and items, looked up as Rust resolves paths.
pub struct Resolver {
    index: Index,
    types: BTreeSet<String>,
    crates: BTreeSet<String>,
}

/// What a path resolved to so far.
#[derive(Debug)]
enum Found {
    Module(Vec<String>),
    Type(String),
    /// A function, value, macro or member: nothing is inside it.
    Leaf,
    /// Something of another crate: not looked into.
    Outside,
}

impl Resolver {
    pub fn new(index: Index) -> Resolver {
        let types = index.modules.values().flat_map(|m| m.items.iter().filter(|(_, i)| **i == Item::Type).map(|(n, _)| n.clone())).collect();
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        let mut crates: BTreeSet<String> = ["std", "core", "alloc"].map(String::from).into();
        let mut in_dependencies = false;
        for line in manifest.lines() {
            if line.starts_with('#') {
                continue;
            } else if line.starts_with('[') {
                in_dependencies = line.ends_with("dependencies]");
            } else if let Some((name, _)) = line.split_once('=').filter(|_| in_dependencies) {
                crates.insert(name.trim().replace('-', "_"));
            }
        }
        Resolver { index, types, crates }
    }

    /// `name` in the module `module`.
    fn lookup(&self, module: &[String], name: &str, depth: usize) -> Option<Found> {
        if depth > 16 {
            return None; // a circle of imports
        }
        let mut child = module.to_vec();
        child.push(name.to_string());
        if self.index.modules.contains_key(&child) {
            return Some(Found::Module(child));
        }
        let m = self.index.modules.get(module)?;
        match m.items.get(name) {
            Some(Item::Type) => return Some(Found::Type(name.to_string())),
            Some(Item::Fn | Item::Value | Item::Macro) => return Some(Found::Leaf),
            Some(Item::Use(path)) => return Some(self.follow(module, path, depth + 1)),
            None => {}
        }
        m.globs.iter().filter(|_| depth < 8).find_map(|g| match self.follow(module, g, depth + 1) {
            Found::Module(g) => self.lookup(&g, name, depth + 1),
            _ => None,
        })
    }

    /// Where a `use` path written in `module` leads.
    fn follow(&self, module: &[String], path: &[String], depth: usize) -> Found {
        let mut at = match path.first().map(String::as_str) {
            Some("crate") => module[..1].to_vec(),
            Some("deltaship") => vec!["src".to_string()],
            _ => module.to_vec(),
        };
        let mut rest = path;
        if matches!(path.first().map(String::as_str), Some("crate" | "deltaship" | "self")) {
            rest = &path[1..];
        }
        while rest.first().is_some_and(|s| s == "super") {
            at.pop();
            rest = &rest[1..];
        }
        let mut found = Found::Module(at);
        for name in rest {
            found = match found {
                Found::Module(m) => match self.lookup(&m, name, depth) {
                    Some(f) => f,
                    None => return Found::Outside,
                },
                Found::Type(_) => Found::Leaf,
                other => return other,
            };
        }
        found
    }

    /// Whether the path `segments`, written in module `module`, names something; if not, why.
    pub fn resolve(&self, module: &[String], segments: &[String]) -> Result<(), String> {
        let first = segments[0].as_str();
        let (mut found, mut rest) = match first {
            "crate" => (Found::Module(module[..1].to_vec()), &segments[1..]),
            "deltaship" => (Found::Module(vec!["src".to_string()]), &segments[1..]),
            "self" | "super" => (self.follow(module, &segments[..1], 0), &segments[1..]),
            _ => {
                let scopes = (1..=module.len()).rev().map(|n| module[..n].to_vec()).chain([vec!["src".to_string()]]);
                let found = scopes.into_iter().find_map(|s| self.lookup(&s, first, 0));
                match found {
                    Some(found) => (found, &segments[1..]),
                    None if self.types.contains(first) => (Found::Type(first.to_string()), &segments[1..]),
                    None if self.crates.contains(first) || LIBRARY_NAMES.contains(&first) => return Ok(()),
                    None => return Err(format!("`{first}` is no module or item of deltaship seen from here, nor a crate it uses")),
                }
            }
        };
        let mut so_far = segments[..segments.len() - rest.len()].join("::");
        while let Some((name, more)) = rest.split_first() {
            found = match found {
                Found::Module(m) => self.lookup(&m, name, 0).ok_or_else(|| format!("`{so_far}` has no `{name}`"))?,
                Found::Type(t) if self.index.members.get(&t).is_some_and(|m| m.contains(name)) => Found::Leaf,
                Found::Type(t) => return Err(format!("`{t}` has no variant, field, method or associated item `{name}`")),
                Found::Leaf => return Err(format!("`{so_far}` is a function or value: nothing named `{name}` is in it")),
                Found::Outside => return Ok(()),
            };
            so_far = format!("{so_far}::{name}");
            rest = more;
        }
        Ok(())
    }
}
