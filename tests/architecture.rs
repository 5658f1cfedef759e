//! The layering of docs/architecture.md, checked on the source: every `crate::` path in a
//! module's code (its test code aside) names a module of a lower layer, so no import goes
//! up a layer. No import goes round anywhere: between the files of `src/`, each path
//! followed through the `use` that re-exports it to the file that defines it, no file
//! reaches back to itself. Inside a folder held to it (`FOLDERS`), no file reaches up to the
//! folder's `mod.rs`, which only declares, re-exports and holds the entry points. No type
//! name that another file can name is defined in two files: one name, one thing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of the library and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[
    ("model", 0),
    ("hex", 0),
    ("json", 0),
    ("config", 1),
    ("telemetry", 2),
    ("address", 2),
    ("redact", 3),
    ("memory", 3),
    ("plan", 4),
    ("watch", 5),
    ("broker", 5),
    ("change", 6),
    ("event", 7),
    ("sink", 8),
    ("leader", 9),
    ("checkpoint", 9),
    ("rebuild", 9),
    ("pipeline", 10),
    ("check", 11),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The code of a file as the compiler reads it, for finding paths: comments gone, string and
/// character literals emptied, and every `#[cfg(test)]` item (unit tests, test fixtures)
/// left out.
fn code(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // The end of a string whose opening quote is at `open`, raw with `hashes` when Some.
    let string_end = |open: usize, hashes: Option<usize>| {
        let mut j = open + 1;
        while j < s.len() {
            match (s[j], hashes) {
                ('\\', None) => j += 1,
                ('"', None) => return j + 1,
                ('"', Some(n)) if s[j + 1..].iter().take(n).filter(|c| **c == '#').count() == n => return j + 1 + n,
                _ => {}
            }
            j += 1;
        }
        s.len()
    };
    while i < s.len() {
        let after_ident = i > 0 && is_ident(s[i - 1]);
        let next = |k: usize| s.get(i + k).copied().unwrap_or(' ');
        match s[i] {
            '/' if next(1) == '/' => {
                while i < s.len() && s[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next(1) == '*' => {
                let mut depth = 0;
                let mut j = i;
                while j + 1 < s.len() {
                    if s[j] == '/' && s[j + 1] == '*' {
                        depth += 1;
                        j += 1;
                    } else if s[j] == '*' && s[j + 1] == '/' {
                        depth -= 1;
                        j += 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    j += 1;
                }
                i = j + 1;
            }
            '"' => {
                i = string_end(i, None);
                out.push_str("\"\"");
            }
            'b' | 'r' | 'c' if !after_ident && (next(1) == '"' || (s[i] == 'b' && next(1) == 'r') || (s[i] == 'r' && next(1) == '#')) => {
                let mut j = i + 1;
                if s[i] == 'b' && next(1) == 'r' {
                    j += 1;
                }
                let raw = s[i] == 'r' || s[i + 1] == 'r';
                let hashes = s[j..].iter().take_while(|c| **c == '#').count();
                if s.get(j + hashes) == Some(&'"') {
                    i = string_end(j + hashes, raw.then_some(hashes));
                    out.push_str("\"\"");
                } else {
                    out.push(s[i]);
                    i += 1;
                }
            }
            '\'' if next(1) == '\\' => {
                let mut j = i + 3;
                while j < s.len() && s[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            }
            '\'' if next(2) == '\'' => {
                i += 3;
                out.push_str("' '");
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    const TEST: &str = "#[cfg(test)]";
    while let Some(at) = out.find(TEST) {
        let mut depth = 0;
        let mut end = out.len();
        for (j, c) in out[at + TEST.len()..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + TEST.len() + j + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = at + TEST.len() + j + 1;
                    break;
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
    }
    out
}

/// The modules a piece of code names through `crate::<module>`.
fn imports(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::").map(|(i, _)| code[i + "crate::".len()..].chars().take_while(|c| is_ident(*c)).collect()).collect()
}

/// Every `.rs` file under `dir`, by its path relative to `dir`, with its text.
fn sources(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.insert(path.strip_prefix(root).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn every_import_goes_down_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for (rel, text) in sources(&src) {
        let first = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        if first == "lib" || first == "main" {
            continue;
        }
        let Some(from) = layer(&first) else {
            wrong.push(format!("src/{rel}: the module `{first}` has no layer; add it to LAYERS and docs/architecture.md"));
            continue;
        };
        seen.insert(first.clone());
        for to in imports(&code(&text)) {
            if to == first {
                continue;
            }
            match layer(&to) {
                Some(l) if l < from => {}
                Some(l) => wrong.push(format!("src/{rel}: `{first}` (layer {from}) imports `{to}` (layer {l})")),
                None => wrong.push(format!("src/{rel}: imports `crate::{to}`, a module without a layer")),
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layering of docs/architecture.md:\n{}", wrong.join("\n"));
    let listed: BTreeSet<String> = LAYERS.iter().map(|(m, _)| m.to_string()).collect();
    assert_eq!(seen, listed, "LAYERS lists exactly the library's modules");
}

#[test]
fn the_check_sees_an_upward_import() {
    let upward = "use crate::sink::Sink;\n#[cfg(test)]\nmod tests {\n    use crate::pipeline::Worker;\n}\n";
    assert_eq!(imports(&code(upward)), BTreeSet::from(["sink".to_string()]), "unit tests aside");
    let shared = "use crate::sink::Sink;\n#[cfg(test)]\n// helpers for the folder's tests\npub(super) mod tests {\n    use crate::pipeline::Worker;\n}\n";
    assert_eq!(imports(&code(shared)), BTreeSet::from(["sink".to_string()]), "shared unit tests aside");
    let quoted = "// crate::pipeline in a comment\nconst A: &str = \"crate::pipeline\";\nconst B: &str = r#\"crate::check\"#;\nfn f<'a>(c: char) -> bool { c == '\"' }\nuse crate::event::X;\n";
    assert_eq!(imports(&code(quoted)), BTreeSet::from(["event".to_string()]), "comments and literals aside");
    assert!(layer("sink") > layer("event"));
}

/// One module of the library: the file it is in, and the modules declared in it.
struct Module {
    file: String,
    children: BTreeSet<String>,
}

/// A path as written (as crate::a::B, super::x or child::y), with the name it binds when it
/// is a `use` (its last segment or its `as` name; None for a glob).
struct Written {
    segments: Vec<String>,
    binds: Option<String>,
}

/// The paths of `code` that start with `crate`, `super`, `self` or one of `children` (a path
/// preceded by `::` is another's tail), each `{...}` group spread into its paths.
fn written(code: &str, children: &BTreeSet<String>) -> Vec<(Written, bool)> {
    let s: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if !is_ident(s[i]) || (i > 0 && (is_ident(s[i - 1]) || s[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let word: String = s[i..].iter().take_while(|c| is_ident(**c)).collect();
        let end = i + word.len();
        let starts = matches!(word.as_str(), "crate" | "super" | "self") || children.contains(&word);
        if starts && s.get(end) == Some(&':') && s.get(end + 1) == Some(&':') {
            let before: String = s[i.saturating_sub(12)..i].iter().collect();
            let is_use = before.trim_end().strip_suffix("use").is_some_and(|b| !b.ends_with(is_ident));
            i = tree(&s, i, Vec::new(), &mut |w| out.push((w, is_use)));
        } else {
            i = end.max(i + 1);
        }
    }
    out
}

/// Reads the path tree at `i` (after `prefix`), handing each path to `found`; returns where it
/// ends.
fn tree(s: &[char], mut i: usize, mut prefix: Vec<String>, found: &mut impl FnMut(Written)) -> usize {
    let skip_space = |mut i: usize| {
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        i = skip_space(i);
        match s.get(i) {
            Some('{') => {
                i += 1;
                loop {
                    i = skip_space(i);
                    match s.get(i) {
                        Some('}') => return i + 1,
                        Some(',') => i += 1,
                        Some(_) => i = tree(s, i, prefix.clone(), found),
                        None => return i,
                    }
                }
            }
            Some('*') => {
                found(Written { segments: prefix, binds: None });
                return i + 1;
            }
            Some(c) if is_ident(*c) => {
                let word: String = s[i..].iter().take_while(|c| is_ident(**c)).collect();
                i += word.len();
                if word == "self" && !prefix.is_empty() {
                    // `a::{self}`: `a` itself
                } else {
                    prefix.push(word);
                }
                if s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
                    i += 2;
                    continue;
                }
                let rest: String = s[skip_space(i)..].iter().take(40).collect();
                let alias = rest.strip_prefix("as ").map(|r| r.trim_start().chars().take_while(|c| is_ident(*c)).collect::<String>());
                if alias.is_some() {
                    i = skip_space(i) + 3;
                    i = skip_space(i);
                    i += s[i..].iter().take_while(|c| is_ident(**c)).count();
                }
                let binds = alias.or_else(|| prefix.last().cloned());
                found(Written { segments: prefix, binds });
                return i;
            }
            _ => return i,
        }
    }
}

/// The library's module tree from `lib.rs`, each `mod` declaration followed to its file
/// (test modules aside), and the inline modules; by module path (`["watch", "stream"]`).
fn modules(files: &BTreeMap<String, String>) -> BTreeMap<Vec<String>, Module> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(Vec::<String>::new(), "lib.rs".to_string())];
    while let Some((path, file)) = todo.pop() {
        let Some(text) = files.get(&file) else { continue };
        let code = code(text);
        let dir = match file.rsplit_once('/') {
            _ if file == "lib.rs" => String::new(),
            Some((dir, "mod.rs")) => format!("{dir}/"),
            Some((dir, name)) => format!("{dir}/{}/", name.trim_end_matches(".rs")),
            None => format!("{}/", file.trim_end_matches(".rs")),
        };
        let mut children = BTreeSet::new();
        for (at, _) in code.match_indices("mod ") {
            if at > 0 && is_ident(code[..at].chars().last().unwrap()) {
                continue;
            }
            let name: String = code[at + 4..].chars().take_while(|c| is_ident(*c)).collect();
            let after = code[at + 4 + name.len()..].trim_start();
            if name.is_empty() {
                continue;
            }
            let mut child = path.clone();
            child.push(name.clone());
            if after.starts_with(';') {
                let file = [format!("{dir}{name}.rs"), format!("{dir}{name}/mod.rs")].into_iter().find(|f| files.contains_key(f));
                if let Some(file) = file {
                    todo.push((child, file));
                }
            } else if after.starts_with('{') {
                out.insert(child, Module { file: file.clone(), children: BTreeSet::new() });
            }
            children.insert(name);
        }
        out.insert(path, Module { file, children });
    }
    out
}

/// The text of each module's own code: a file's without its inline modules, and each inline
/// module's block.
fn regions(files: &BTreeMap<String, String>, modules: &BTreeMap<Vec<String>, Module>) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    for (path, module) in modules {
        let is_file = path.is_empty() || modules.get(&path[..path.len() - 1]).is_none_or(|parent| parent.file != module.file);
        if !is_file {
            continue;
        }
        let mut code = code(&files[&module.file]);
        let mut inline = Vec::new();
        while let Some((at, name)) = module.children.iter().find_map(|name| {
            let decl = format!("mod {name} {{");
            code.find(&decl).filter(|at| *at == 0 || !is_ident(code[..*at].chars().last().unwrap())).map(|at| (at, name.clone()))
        }) {
            let open = at + code[at..].find('{').unwrap();
            let mut depth = 0;
            let mut end = code.len();
            for (j, c) in code[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + j + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut child = path.clone();
            child.push(name);
            inline.push((child, code[open + 1..end - 1].to_string()));
            code.replace_range(at..end, "");
        }
        out.push((path.clone(), code));
        out.extend(inline);
    }
    out
}

/// The file-level import graph of a library (its files by path relative to `src/`): from each
/// file to the files whose items it names, a re-exported item followed to where it is
/// defined; and, for each module, the files that take an item from its own code through a
/// path (super::Name or crate::folder::Name), as `file: path`.
struct Graph {
    arrows: BTreeMap<String, BTreeSet<String>>,
    /// For each arrow, the first path that makes it.
    why: BTreeMap<(String, String), String>,
    reach_up: BTreeMap<Vec<String>, Vec<String>>,
}

fn graph(files: &BTreeMap<String, String>) -> Graph {
    let modules = modules(files);
    let regions = regions(files, &modules);
    // What each module's `use`s bind: name to absolute path; and its globs.
    let mut binds: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut uses = Vec::new();
    for (path, code) in &regions {
        let children = &modules[path].children;
        for (w, is_use) in written(code, children) {
            let Some(absolute) = absolute(path, &w.segments) else { continue };
            if is_use && let Some(name) = &w.binds {
                binds.entry(path.clone()).or_default().insert(name.clone(), absolute.clone());
            }
            uses.push((path.clone(), w.segments.join("::"), absolute));
        }
    }
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut reach_up: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    let mut why = BTreeMap::new();
    for module in modules.values() {
        arrows.entry(module.file.clone()).or_default();
    }
    for (from, written, absolute) in uses {
        let file = &modules[&from].file;
        let (first, _) = module_of(&modules, &absolute);
        if let Some(first) = first.filter(|m| absolute.len() > m.len() && from.starts_with(m) && from != *m) {
            reach_up.entry(first).or_default().push(format!("src/{file}: `{written}`"));
        }
        if let Some(to) = resolve(&modules, &binds, absolute, 0)
            && to != *file
        {
            why.entry((file.clone(), to.clone())).or_insert(written);
            arrows.get_mut(file).unwrap().insert(to);
        }
    }
    Graph { arrows, why, reach_up }
}

/// `segments` written in module `at`, as a path from the crate's root; None for another crate's.
fn absolute(at: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut out = at.to_vec();
    let mut rest = segments;
    match segments.first().map(String::as_str) {
        Some("crate") => {
            out.clear();
            rest = &segments[1..];
        }
        Some("self") => rest = &segments[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                out.pop()?;
                rest = &rest[1..];
            }
        }
        _ => {}
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

/// The longest prefix of `path` that is a module, and the item named after it.
fn module_of(modules: &BTreeMap<Vec<String>, Module>, path: &[String]) -> (Option<Vec<String>>, Option<String>) {
    (0..=path.len()).rev().find(|n| modules.contains_key(&path[..*n])).map_or((None, None), |n| (Some(path[..n].to_vec()), path.get(n).cloned()))
}

/// The file that defines what `path` names: a name a module's `use` binds is followed.
fn resolve(
    modules: &BTreeMap<Vec<String>, Module>,
    binds: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    path: Vec<String>,
    depth: usize,
) -> Option<String> {
    let (Some(module), item) = module_of(modules, &path) else { return None };
    let through = item.and_then(|item| binds.get(&module)?.get(&item).cloned()).filter(|to| *to != path && depth < 16);
    match through {
        Some(to) => resolve(modules, binds, to, depth + 1).or_else(|| Some(modules[&module].file.clone())),
        None => Some(modules[&module].file.clone()),
    }
}

/// A circle among `arrows`, as the files around it, if there is one.
fn circle(arrows: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(at: &str, arrows: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_string());
            return Some(found);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for to in arrows.get(at).into_iter().flatten() {
            if let Some(found) = visit(to, arrows, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    arrows.keys().find_map(|start| visit(start, arrows, &mut Vec::new(), &mut done))
}

/// The groups of files that reach each other through `arrows`, each with one way round it.
fn circles(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<(BTreeSet<String>, Vec<String>)> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(at) = todo.pop() {
            for to in arrows.get(&at).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = arrows.keys().map(|f| (f, reach(f))).collect();
    let mut grouped = BTreeSet::new();
    let mut out = Vec::new();
    for (file, from_it) in &reached {
        if grouped.contains(*file) || !from_it.contains(*file) {
            continue;
        }
        let group: BTreeSet<String> = from_it.iter().filter(|other| reached[other].contains(*file)).cloned().collect();
        let inside: BTreeMap<String, BTreeSet<String>> =
            group.iter().map(|f| (f.clone(), arrows[f].iter().filter(|t| group.contains(*t)).cloned().collect())).collect();
        out.push((group.clone(), circle(&inside).expect("files that reach each other go round")));
        grouped.extend(group);
    }
    out
}

fn library() -> Graph {
    graph(&sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")))
}

#[test]
fn no_import_goes_round_between_the_files_of_the_library() {
    let graph = library();
    let mut found = Vec::new();
    for (group, way) in circles(&graph.arrows) {
        let files: Vec<&str> = group.iter().map(String::as_str).collect();
        let steps: String = way.windows(2).map(|w| format!("src/{} -> (`{}`) ", w[0], graph.why[&(w[0].clone(), w[1].clone())])).collect();
        found.push(format!(
            "{steps}src/{}
  (the files that reach each other: {files:?})",
            way[0]
        ));
    }
    assert!(
        found.is_empty(),
        "import circles (a file reaches itself through these imports; a re-exported name counts as the file that defines it): \
         move what both sides need to a file of its own, below both:\n{}",
        found.join("\n")
    );
}

/// The folders of `src/` whose files never reach up to their `mod.rs`.
const FOLDERS: &[&str] = &["config"];

#[test]
fn inside_a_folder_no_file_reaches_up_to_its_face() {
    let graph = library();
    for folder in FOLDERS {
        let up = graph.reach_up.get(&vec![folder.to_string()]).cloned().unwrap_or_default();
        assert!(
            up.is_empty(),
            "files that take these from src/{folder}/mod.rs, which only declares and re-exports: import them from the file that defines them, \
             or move them to a file of their own:\n{}",
            up.join("\n")
        );
    }
}

#[test]
fn the_circle_check_sees_a_circle_in_a_folder_through_a_face_and_an_arrow_up() {
    let library = |files: &[(&str, &str)]| graph(&files.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect());
    let folder = [
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a/mod.rs", "mod x;\nmod y;\npub use x::X;\npub use y::Y;\npub fn face() {}\n"),
        ("a/x.rs", "use super::y::Y;\npub struct X;\n"),
        ("a/y.rs", "use crate::a::X;\npub struct Y;\n"),
        ("b.rs", "use crate::a::{X, y::{self as why}};\n#[cfg(test)]\nmod tests {\n    use crate::a::face;\n}\n"),
    ];
    let g = library(&folder);
    assert_eq!(g.arrows["a/y.rs"], BTreeSet::from(["a/x.rs".to_string()]), "a re-export followed to its file");
    assert_eq!(g.arrows["b.rs"], BTreeSet::from(["a/x.rs".to_string(), "a/y.rs".to_string()]), "groups, `self`; test code aside");
    let x_and_y = (BTreeSet::from(["a/x.rs".to_string(), "a/y.rs".to_string()]), ["a/x.rs", "a/y.rs", "a/x.rs"].map(String::from).to_vec());
    assert_eq!(circles(&g.arrows), vec![x_and_y], "x and y, through the face's re-export");
    assert_eq!(g.reach_up[&vec!["a".to_string()]], ["src/a/y.rs: `crate::a::X`"]);

    let drawer =
        [("lib.rs", "mod a;\n"), ("a/mod.rs", "mod x;\npub fn helper() {}\npub fn run() { x::go() }\n"), ("a/x.rs", "pub fn go() { super::helper() }\n")];
    let face_and_x = (BTreeSet::from(["a/mod.rs".to_string(), "a/x.rs".to_string()]), ["a/mod.rs", "a/x.rs", "a/mod.rs"].map(String::from).to_vec());
    assert_eq!(circles(&library(&drawer).arrows), vec![face_and_x], "a child calling into its face");

    let inline = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", "mod inner {\n    use super::super::b::B;\n}\npub struct A;\n"), ("b.rs", "pub struct B;\n")];
    assert_eq!(library(&inline).arrows["a.rs"], BTreeSet::from(["b.rs".to_string()]), "`super` in an inline module");

    let line = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", "use crate::b::B;\n"), ("b.rs", "pub struct B;\n")];
    assert!(circles(&library(&line).arrows).is_empty());
}

/// Where metrics are registered: one struct per owner (a route's dispatcher, a watch's
/// worker...), each with the handles of its own series.
const OWNERS: &str = "telemetry/meters/";

/// The arguments of each metric macro (`counter!`, `gauge!`, `histogram!`) in `code`.
fn metric_macros(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for name in ["counter!", "gauge!", "histogram!"] {
        for (at, _) in code.match_indices(name) {
            if code[..at].chars().last().is_some_and(is_ident) {
                continue; // describe_counter! and the like
            }
            let args = code[at + name.len()..].trim_start();
            let Some(args) = args.strip_prefix('(') else { continue };
            let mut depth = 1;
            let end = args
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '(' | '[' | '{' => depth += 1,
                        ')' | ']' | '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(args.len(), |(i, _)| i);
            out.push(args[..end].split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}

/// What is wrong with where and how `files` (by path relative to `src/`) register metrics:
/// a metric macro outside the owners, a name or a label key written as a literal, a metric
/// registered by more than one owner.
fn metric_problems(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in files {
        for args in metric_macros(&code(text)) {
            // `code` empties literals: `"route" => x` reads `"" => x`.
            let name = args.split(',').next().unwrap_or_default().trim();
            if !file.starts_with(OWNERS) {
                problems.push(format!("src/{file}: `{args}` registers a metric outside its owner: add it to the owner's struct in src/{OWNERS}"));
            }
            if name.starts_with('"') {
                problems.push(format!("src/{file}: `{args}` names a metric by a literal: use its constant of telemetry::metrics"));
            }
            if args.contains("\"\" =>") {
                problems.push(format!("src/{file}: `{args}` has a literal label key: use a constant of telemetry::metrics::label"));
            }
            // By the constant's name, however its path is written.
            owners.entry(name.rsplit("::").next().unwrap_or(name).to_string()).or_default().insert(file.clone());
        }
    }
    for (name, files) in owners.iter().filter(|(_, files)| files.len() > 1) {
        problems.push(format!("`{name}` is registered in {files:?}: one owner writes each series"));
    }
    problems
}

#[test]
fn every_metric_is_registered_by_its_one_owner_with_label_keys_as_constants() {
    let problems = metric_problems(&sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")));
    assert!(problems.is_empty(), "metrics registered against the owners' rule (src/{OWNERS}mod.rs; string literals shown empty):\n{}", problems.join("\n"));
}

#[test]
fn the_metric_check_sees_a_stray_macro_a_literal_key_and_a_second_owner() {
    let files = |list: &[(&str, &str)]| list.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect::<BTreeMap<_, _>>();
    let owner = "fn new(route: &str) -> Gauge {\n    metrics::gauge!(m::QUEUED, label::ROUTE => route.to_string())\n}\n";
    let described = "fn describe() { describe_gauge!(QUEUED, \"Events queued.\"); }\n";
    let tests = "#[cfg(test)]\nmod tests {\n    fn f() { metrics::counter!(\"x\", \"k\" => \"v\"); }\n}\n";
    assert!(metric_problems(&files(&[("telemetry/meters/dispatch.rs", owner), ("telemetry/metrics.rs", described), ("pipeline/worker.rs", tests)])).is_empty());

    let stray = "fn f(route: String) {\n    metrics::counter!(m::DROPPED, \"route\" => route).increment(1);\n}\n";
    let found = metric_problems(&files(&[("pipeline/dispatch.rs", stray)]));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("outside its owner") && found[1].contains("literal label key"), "{found:?}");

    let literal_name = "fn f() { counter!(\"deltaship_x_total\").increment(1); }\n";
    assert!(metric_problems(&files(&[("telemetry/meters/x.rs", literal_name)]))[0].contains("names a metric by a literal"));

    let second = "fn g(route: &str) -> Gauge { gauge!(metrics::QUEUED, label::ROUTE => route.to_string()) }\n";
    let found = metric_problems(&files(&[("telemetry/meters/dispatch.rs", owner), ("telemetry/meters/worker.rs", second)]));
    assert_eq!(found, ["`QUEUED` is registered in {\"telemetry/meters/dispatch.rs\", \"telemetry/meters/worker.rs\"}: one owner writes each series"]);
}

/// The types `code` defines among its module's items (and those of the modules written
/// inside it), not in a function, an impl or a trait: each with whether it is visible
/// beyond its file (`pub`, `pub(crate)`, `pub(super)`, `pub(in ...)`).
fn type_names(code: &str) -> Vec<(String, bool)> {
    // An item's header: the code since the last `;`, `{` or `}`, its attributes left out.
    let definition = |header: &str| -> Option<(String, bool)> {
        let mut text = String::new();
        let mut depth = 0;
        let mut chars = header.chars().peekable();
        while let Some(c) = chars.next() {
            if depth == 0 && c == '#' {
                chars.next_if_eq(&'!');
                if chars.next_if_eq(&'[').is_some() {
                    depth = 1;
                    continue;
                }
            }
            match c {
                '[' if depth > 0 => depth += 1,
                ']' if depth > 0 => depth -= 1,
                _ if depth == 0 => text.push(c),
                _ => {}
            }
        }
        let text = text.trim_start();
        let (visible, rest) = match text.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => (true, &rest[rest.find(')')? + 1..]),
            Some(rest) if rest.starts_with(char::is_whitespace) => (true, rest),
            _ => (false, text),
        };
        let mut words = rest.split_whitespace();
        let keyword = words.next()?;
        let name: String = words.next()?.chars().take_while(|c| is_ident(*c)).collect();
        let is_type = ["struct", "enum", "union", "trait", "type"].contains(&keyword) && name.starts_with(|c: char| c.is_ascii_uppercase());
        (is_type || keyword == "mod").then_some((if keyword == "mod" { String::new() } else { name }, visible))
    };
    let mut found = Vec::new();
    // Per brace open: whether it opened a module, whose items count.
    let mut open: Vec<bool> = Vec::new();
    let mut header = String::new();
    for c in code.chars() {
        if matches!(c, '{' | ';' | '}') {
            let item = definition(&header).filter(|_| open.iter().all(|module| *module));
            match c {
                '{' => open.push(item.as_ref().is_some_and(|(name, _)| name.is_empty())),
                '}' => drop(open.pop()),
                _ => {}
            }
            found.extend(item.filter(|(name, _)| !name.is_empty()));
            header.clear();
        } else {
            header.push(c);
        }
    }
    found
}

/// Type names defined in two files or more of `files` (by path relative to `src/`), one of
/// them visible beyond its file: a name that means two things.
fn shared_type_names(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut defined: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for (file, text) in files {
        for (name, visible) in type_names(&code(text)) {
            *defined.entry(name).or_default().entry(file.clone()).or_default() |= visible;
        }
    }
    defined
        .into_iter()
        .filter(|(_, files)| files.len() > 1 && files.values().any(|visible| *visible))
        .map(|(name, files)| {
            let files: Vec<String> = files.iter().map(|(file, visible)| format!("src/{file}{}", if *visible { "" } else { " (private)" })).collect();
            format!("`{name}`: {}", files.join(", "))
        })
        .collect()
}

#[test]
fn no_type_name_is_defined_in_two_files_when_one_is_visible_beyond_its_file() {
    let shared = shared_type_names(&sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")));
    assert!(
        shared.is_empty(),
        "type names that mean two things (a file's private types may share a name; none that \
         another file can name): give each the name of the one thing it is:\n{}",
        shared.join("\n")
    );
}

#[test]
fn the_type_name_check_sees_a_second_definition_and_not_an_impls_a_functions_or_a_tests() {
    let files = |list: &[(&str, &str)]| list.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect::<BTreeMap<_, _>>();
    let defines =
        "#![allow(dead_code)]\n#[derive(Debug)]\npub(crate) struct Progress<T> {\n    seen: T,\n}\npub mod inner {\n    pub type Found = (u8, u8);\n}\n";
    assert_eq!(type_names(defines), [("Progress".to_string(), true), ("Found".to_string(), true)]);
    let private = "struct State(u8);\nenum Stop { Now }\n";
    let nested = "impl Iterator for X {\n    type Item = u8;\n}\nfn f() {\n    struct Progress;\n}\n#[cfg(test)]\nmod tests {\n    pub struct Found;\n}\n";
    let quiet = files(&[("a.rs", defines), ("b.rs", private), ("c.rs", private), ("d.rs", nested)]);
    assert!(shared_type_names(&quiet).is_empty(), "{:?}", shared_type_names(&quiet));
    let twice = files(&[("a.rs", defines), ("b/c.rs", "/// A `struct Found` in a comment.\nenum Found {\n    A,\n}\npub enum State {}\n"), ("d.rs", private)]);
    assert_eq!(shared_type_names(&twice), ["`Found`: src/a.rs, src/b/c.rs (private)", "`State`: src/b/c.rs, src/d.rs (private)"]);
}
