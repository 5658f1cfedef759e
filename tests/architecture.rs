//! The layering of docs/architecture.md, checked on the source: every `crate::` path in a
//! module's code (its unit tests aside) names a module of a lower layer, so no import goes
//! up a layer and no two modules import each other.

use std::collections::BTreeSet;
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

/// The code of a file without its unit tests (a trailing `#[cfg(test)]` module).
fn code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests").map_or(text, |i| &text[..i])
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
    assert!(layer("sink") > layer("event"));
}
