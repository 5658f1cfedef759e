//! The layering of docs/architecture.md, checked on the source: every `crate::` path in a
//! module's code (its unit tests aside) names a module of a lower layer, so no import goes
//! up a layer and no two modules import each other. Inside a folder held to it (`FOLDERS`),
//! the files import each other by name without a circle, and none reaches up to the
//! folder's `mod.rs`, which only declares, re-exports and holds the entry points.

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

/// The code of a file without its unit tests (a trailing `#[cfg(test)]` module named
/// `tests`, whatever its visibility and the comments and attributes between).
fn code(text: &str) -> &str {
    let tests_module = |after: &str| {
        let item = after.lines().map(str::trim_start).find(|l| !l.starts_with("//") && !l.starts_with("#[")).unwrap_or("");
        let item = item.strip_prefix("pub(super) ").or_else(|| item.strip_prefix("pub(crate) ")).unwrap_or(item);
        item.starts_with("mod tests")
    };
    text.match_indices("#[cfg(test)]\n").find(|(i, m)| tests_module(&text[i + m.len()..])).map_or(text, |(i, _)| &text[..i])
}

/// The modules a piece of code names through `crate::<module>`.
fn imports(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::").map(|(i, _)| code[i + "crate::".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()).collect()
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_goes_down_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for path in all {
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if first == "lib" || first == "main" {
            continue;
        }
        let Some(from) = layer(&first) else {
            wrong.push(format!("src/{}: the module `{first}` has no layer; add it to LAYERS and docs/architecture.md", rel.display()));
            continue;
        };
        seen.insert(first.clone());
        for to in imports(code(&std::fs::read_to_string(&path).unwrap())) {
            if to == first {
                continue;
            }
            match layer(&to) {
                Some(l) if l < from => {}
                Some(l) => wrong.push(format!("src/{}: `{first}` (layer {from}) imports `{to}` (layer {l})", rel.display())),
                None => wrong.push(format!("src/{}: imports `crate::{to}`, a module without a layer", rel.display())),
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
    assert_eq!(imports(code(upward)), BTreeSet::from(["sink".to_string()]), "unit tests aside");
    let shared = "use crate::sink::Sink;\n#[cfg(test)]\n// helpers for the folder's tests\npub(super) mod tests {\n    use crate::pipeline::Worker;\n}\n";
    assert_eq!(imports(code(shared)), BTreeSet::from(["sink".to_string()]), "shared unit tests aside");
    assert!(layer("sink") > layer("event"));
}

/// The folders of `src/` whose files import each other without a circle and never reach up
/// to their `mod.rs`.
const FOLDERS: &[&str] = &["config"];

/// What a piece of code in `folder` names through `super::` or `crate::<folder>::`: the first
/// name after it, also inside a `super::{...}` group.
fn folder_imports(code: &str, folder: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for prefix in ["super::".to_string(), format!("crate::{folder}::")] {
        for (i, _) in code.match_indices(&prefix) {
            let rest = &code[i + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut start = 0;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            out.insert(ident(group[start..j].trim()));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.insert(ident(group[start..j].trim()));
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
            } else {
                out.insert(ident(rest));
            }
        }
    }
    out.remove("");
    out
}

/// The arrows between the files of `dir` (each file's name without `.rs`), and the names a
/// file takes from the folder's `mod.rs` (an arrow up), as `file: name`.
fn folder_graph(dir: &Path, folder: &str) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name != "mod" && (path.is_dir() || path.extension().is_some_and(|e| e == "rs")) {
            names.insert(name);
        }
    }
    let mut arrows = BTreeMap::new();
    let mut up = Vec::new();
    for name in &names {
        let file = dir.join(format!("{name}.rs"));
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let mut to = BTreeSet::new();
        for import in folder_imports(code(&text), folder) {
            if names.contains(&import) {
                to.insert(import);
            } else {
                up.push(format!("src/{folder}/{name}.rs: `{import}`"));
            }
        }
        to.remove(name);
        arrows.insert(name.clone(), to);
    }
    (arrows, up)
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

#[test]
fn inside_a_folder_no_file_reaches_up_to_its_face_and_no_imports_go_round() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for folder in FOLDERS {
        let (arrows, up) = folder_graph(&src.join(folder), folder);
        assert!(
            up.is_empty(),
            "files that take these from src/{folder}/mod.rs, which only declares and re-exports: import them from the file that defines them, \
             or move them to a file of their own:\n{}",
            up.join("\n")
        );
        if let Some(found) = circle(&arrows) {
            panic!("an import circle in src/{folder}/: {}; move what both need to a file of its own", found.join(" -> "));
        }
    }
}

#[test]
fn the_folder_check_sees_an_arrow_up_and_a_circle() {
    let code = "use super::{a::X, b::{Y, Z}};\nuse super::Face;\nuse crate::config::c::W;\n";
    assert_eq!(folder_imports(code, "config"), BTreeSet::from(["a", "b", "c", "Face"].map(String::from)));
    let arrows = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(circle(&arrows), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
    let line = BTreeMap::from([("a".to_string(), BTreeSet::from(["b".to_string()])), ("b".to_string(), BTreeSet::new())]);
    assert_eq!(circle(&line), None);
}
