//! The modules and items of Rust sources, read without a compiler: a lexer that sets comments
//! and literals apart from the code, and a scan of the code for modules, items, `use`
//! imports and the members of types (enum variants, struct fields, the functions, constants
//! and types of `impl` and `trait` blocks). Enough to say whether a path names something.

use std::collections::{BTreeMap, BTreeSet};

/// A source split in two: the code with comments and literals blanked (newlines kept), and
/// the comments' text with the line each comes from (from 1).
pub struct Lexed {
    pub code: String,
    pub comments: Vec<(usize, String)>,
}

fn ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

pub fn lex(src: &str) -> Lexed {
    let b = src.as_bytes();
    let mut code = b.to_vec();
    let mut comments = Vec::new();
    let blank = |code: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut code[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let starts: Vec<usize> = std::iter::once(0).chain(b.iter().enumerate().filter(|(_, c)| **c == b'\n').map(|(n, _)| n + 1)).collect();
    let line_of = |i: usize| starts.partition_point(|&s| s <= i);
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && ident_byte(b[i - 1]);
        let end = if b[i..].starts_with(b"//") {
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
            let text = &src[i + 2..end];
            let text = text.strip_prefix(['/', '!']).unwrap_or(text);
            comments.push((line_of(i), text.to_string()));
            end
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 1;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            let first = line_of(i);
            let body = &src[i + 2..j.saturating_sub(2).max(i + 2)];
            comments.extend(body.lines().enumerate().map(|(n, l)| (first + n, l.trim_start().trim_start_matches('*').to_string())));
            j
        } else if !prev_ident && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#") || b[i..].starts_with(b"br\"") || b[i..].starts_with(b"br#")) {
            let start = i + if b[i] == b'b' { 2 } else { 1 };
            let hashes = b[start..].iter().take_while(|&&c| c == b'#').count();
            if b.get(start + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let body = start + hashes + 1;
            b[body..].windows(close.len()).position(|w| w == close.as_slice()).map_or(b.len(), |n| body + n + close.len())
        } else if b[i] == b'"' || !prev_ident && b[i..].starts_with(b"b\"") {
            let mut j = if b[i] == b'b' { i + 2 } else { i + 1 };
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', 'é'), or else a lifetime ('a), which is code.
            let char_len = src[i + 1..].chars().next().map_or(0, char::len_utf8);
            if b.get(i + 1) == Some(&b'\\') {
                b[i + 3..].iter().position(|&c| c == b'\'').map_or(b.len(), |n| i + 4 + n)
            } else if b.get(i + 1 + char_len) == Some(&b'\'') {
                i + 2 + char_len
            } else {
                i + 1
            }
        } else {
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        if b[i] != b'\'' || end > i + 1 {
            blank(&mut code, i, end);
        }
        i = end;
    }
    Lexed { code: String::from_utf8(code).expect("blanking keeps UTF-8 (only whole literals and comments)"), comments }
}

/// The tokens of blanked code: identifiers (and numbers), `::`, `->`, `=>`, or one
/// punctuation character.
fn tokens(code: &str) -> Vec<&str> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
        } else if ident_byte(b[i]) || b[i] >= 0x80 {
            let start = i;
            while i < b.len() && (ident_byte(b[i]) || b[i] >= 0x80) {
                i += 1;
            }
            out.push(&code[start..i]);
        } else {
            let two = code.get(i..i + 2).filter(|t| matches!(*t, "::" | "->" | "=>"));
            let len = two.map_or(1, str::len);
            out.push(&code[i..i + len]);
            i += len;
        }
    }
    out
}

/// What a name in a module is.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Fn,
    /// A struct, enum, union, trait or type alias: it may have members.
    Type,
    /// A const or static.
    Value,
    Macro,
    /// A `use` import, with the path it imports.
    Use(Vec<String>),
}

#[derive(Debug, Default)]
pub struct Module {
    pub items: BTreeMap<String, Item>,
    /// The paths of its glob imports (`use x::*`).
    pub globs: Vec<Vec<String>>,
}

/// Every module of some sources by its path (`["src", "watch", "stream"]`: the first name
/// is the tree), and the members of every type by its name.
#[derive(Debug, Default)]
pub struct Index {
    pub modules: BTreeMap<Vec<String>, Module>,
    pub members: BTreeMap<String, BTreeSet<String>>,
}

impl Index {
    /// Adds the code of the module at `path` (its inline modules beneath it). False when
    /// the scan lost its way (a `}` closed more than was opened): its items are not all known.
    pub fn add(&mut self, path: &[String], code: &str) -> bool {
        for depth in 1..=path.len() {
            self.modules.entry(path[..depth].to_vec()).or_default();
        }
        let toks = tokens(code);
        let mut i = 0;
        self.items(&toks, &mut i, path);
        i == toks.len()
    }

    /// The items from `toks[*i]` to the closing `}` of their block (or the end).
    fn items(&mut self, t: &[&str], i: &mut usize, path: &[String]) {
        let at = |i: usize| t.get(i).copied().unwrap_or("");
        let add = |index: &mut Index, name: &str, item: Item| {
            index.modules.entry(path.to_vec()).or_default().items.insert(name.to_string(), item);
        };
        while *i < t.len() && t[*i] != "}" {
            match t[*i] {
                "#" => {
                    *i += 1;
                    if at(*i) == "!" {
                        *i += 1;
                    }
                    skip_group(t, i);
                }
                "pub" => {
                    *i += 1;
                    if at(*i) == "(" {
                        skip_group(t, i);
                    }
                }
                "async" | "unsafe" | "extern" | "default" => *i += 1,
                "const" if matches!(at(*i + 1), "fn" | "unsafe" | "async" | "extern") => *i += 1,
                "mod" => {
                    let name = at(*i + 1).to_string();
                    *i += 2;
                    let mut child = path.to_vec();
                    child.push(name);
                    self.modules.entry(child.clone()).or_default();
                    if at(*i) == "{" {
                        *i += 1;
                        self.items(t, i, &child);
                        *i += 1;
                    }
                }
                "fn" => {
                    add(self, at(*i + 1), Item::Fn);
                    skip_item(t, i);
                }
                "struct" | "union" | "enum" => {
                    let (kind, name) = (t[*i], at(*i + 1).to_string());
                    add(self, &name, Item::Type);
                    while *i < t.len() && !matches!(t[*i], "{" | "(" | ";") {
                        *i += 1;
                    }
                    if at(*i) == "{" {
                        let members = self.members.entry(name).or_default();
                        for part in parts(t, i) {
                            let part = skip_attributes(&part);
                            let named =
                                if kind == "enum" { part.first() } else { part.iter().position(|&x| x == ":").and_then(|n| part.get(n.wrapping_sub(1))) };
                            members.extend(named.map(|n| n.to_string()));
                        }
                    } else {
                        skip_item(t, i);
                    }
                }
                "trait" | "impl" => {
                    let header_start = *i;
                    while *i < t.len() && !matches!(t[*i], "{" | ";") {
                        *i += 1;
                    }
                    let header = &t[header_start..*i];
                    let name = if t[header_start] == "trait" { header.get(1).copied() } else { self_type(header) };
                    if t[header_start] == "trait" {
                        add(self, name.unwrap_or(""), Item::Type);
                    }
                    if at(*i) == "{" {
                        *i += 1;
                        let inner = vec!["impl block".to_string()];
                        self.items(t, i, &inner);
                        *i += 1;
                        let found = self.modules.remove(&inner).map(|m| m.items.into_keys()).into_iter().flatten();
                        self.members.entry(name.unwrap_or("").to_string()).or_default().extend(found);
                    }
                }
                "type" => {
                    add(self, at(*i + 1), Item::Type);
                    skip_item(t, i);
                }
                "const" | "static" => {
                    let name = if at(*i + 1) == "mut" { at(*i + 2) } else { at(*i + 1) };
                    add(self, name, Item::Value);
                    skip_item(t, i);
                }
                "use" => {
                    *i += 1;
                    let mut found = Vec::new();
                    let mut globs = Vec::new();
                    use_tree(t, i, Vec::new(), &mut found, &mut globs);
                    for (name, target) in found {
                        add(self, &name, Item::Use(target));
                    }
                    self.modules.entry(path.to_vec()).or_default().globs.extend(globs);
                    skip_item(t, i);
                }
                "macro_rules" => {
                    add(self, at(*i + 2), Item::Macro);
                    *i += 3;
                    skip_group(t, i);
                }
                _ if at(*i + 1) == "!" => {
                    // A macro called where items stand.
                    *i += 2;
                    skip_group(t, i);
                }
                _ => *i += 1,
            }
        }
    }
}

/// The name of the type an `impl` header is for: the last name of its path, after `for`
/// when a trait is implemented.
fn self_type<'a>(header: &[&'a str]) -> Option<&'a str> {
    let mut angle = 0i32;
    let mut start = 1;
    for (n, &tok) in header.iter().enumerate() {
        match tok {
            "<" => angle += 1,
            ">" => angle -= 1,
            "for" if angle == 0 => start = n + 1,
            _ => {}
        }
    }
    let mut angle = 0i32;
    let mut name = None;
    for &tok in &header[start..] {
        match tok {
            "<" => angle += 1,
            ">" => angle -= 1,
            "where" if angle == 0 => break,
            tok if angle == 0 && tok.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && !matches!(tok, "mut" | "dyn" | "const") => name = Some(tok),
            _ => {}
        }
    }
    name
}

/// Past a balanced `(..)`, `[..]` or `{..}` group starting at `t[*i]`.
fn skip_group(t: &[&str], i: &mut usize) {
    let mut depth = 0;
    while *i < t.len() {
        match t[*i] {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            _ => {}
        }
        *i += 1;
        if depth == 0 {
            return;
        }
    }
}

/// Past an item: its `;` or its body's closing `}`, whichever comes first outside brackets.
fn skip_item(t: &[&str], i: &mut usize) {
    while *i < t.len() {
        match t[*i] {
            ";" => {
                *i += 1;
                return;
            }
            "{" => return skip_group(t, i),
            "(" | "[" => skip_group(t, i),
            _ => *i += 1,
        }
    }
}

/// The comma-separated parts of the `{..}` group at `t[*i]`; `*i` ends past it.
fn parts<'a>(t: &[&'a str], i: &mut usize) -> Vec<Vec<&'a str>> {
    let mut out = vec![Vec::new()];
    let (mut depth, mut angle) = (0, 0);
    while *i < t.len() {
        let tok = t[*i];
        *i += 1;
        match tok {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            // Generic arguments of a field's type; not a `>` inside an attribute's expression.
            "<" if depth == 1 => angle += 1,
            ">" if depth == 1 => angle -= 1,
            _ => {}
        }
        match (tok, depth) {
            ("{", 1) => {}
            (",", 1) if angle == 0 => out.push(Vec::new()),
            (_, 0) => return out,
            _ => out.last_mut().unwrap().push(tok),
        }
    }
    out
}

/// A field or variant without its leading attributes and visibility.
fn skip_attributes<'a, 'b>(mut part: &'b [&'a str]) -> &'b [&'a str] {
    loop {
        match part {
            ["#", rest @ ..] => {
                let mut n = 0;
                skip_group(rest, &mut n);
                part = &rest[n..];
            }
            ["pub", "(", rest @ ..] => part = &rest[rest.iter().position(|&x| x == ")").map_or(rest.len(), |n| n + 1)..],
            ["pub", rest @ ..] => part = rest,
            _ => return part,
        }
    }
}

/// The names a `use` tree brings in, with their paths, and its globs.
fn use_tree(t: &[&str], i: &mut usize, mut path: Vec<String>, out: &mut Vec<(String, Vec<String>)>, globs: &mut Vec<Vec<String>>) {
    while *i < t.len() {
        match t[*i] {
            "::" => *i += 1,
            "*" => {
                *i += 1;
                globs.push(path);
                return;
            }
            "{" => {
                *i += 1;
                while *i < t.len() && t[*i] != "}" {
                    use_tree(t, i, path.clone(), out, globs);
                    if t.get(*i) == Some(&",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            name if name.starts_with(|c: char| c.is_alphanumeric() || c == '_') => {
                *i += 1;
                if t.get(*i) == Some(&"::") {
                    path.push(name.to_string());
                    continue;
                }
                let alias = if t.get(*i) == Some(&"as") {
                    *i += 2;
                    t[*i - 1]
                } else if name == "self" {
                    path.last().map_or(name, String::as_str)
                } else {
                    name
                };
                let alias = alias.to_string();
                if name != "self" {
                    path.push(name.to_string());
                }
                out.push((alias, path));
                return;
            }
            _ => return,
        }
    }
}
