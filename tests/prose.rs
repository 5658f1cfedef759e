//! The prose names only what exists: every repository path, Rust module path and item
//! written in backticks exists, in the comments of the code (src/, tests/, benches/,
//! build.rs) and of the scripts and consumers (tests/, deploy/, .ci/, consumers/, vectors/:
//! whole-line `#` or `//` comments), and in every markdown page. No test server is needed.
//!
//! What counts, so that nothing else is mistaken for a name:
//! - A path: a span of path characters only (`a-z A-Z 0-9 _ - . / *`), not starting with
//!   `/`, `~` or `-`, that holds a `/` after a first name that is an entry of the root, of
//!   `src/` or of a folder above the text (`src/watch/`, `sink/kafka/resend.rs`, `.ci/run`),
//!   or ends with `/`, or names a file by its extension. It must exist from the root, `src/`
//!   or a folder above the text; a `*` is a glob that must match. A bare file name is a
//!   claim for code only (`hex.rs`, `json.go`: a file of that name anywhere); others
//!   (`index.json`) are often files a program writes. `:LINE` or `:FROM-TO` after a file
//!   must be within it. `GENERATED` lists what is written at run time.
//! - A Rust path: names joined by `::` (`change::Classifier`, `Observed::Bookmark`,
//!   `deltaship::CONTRACT_VERSION`, a trailing `()` allowed). It resolves as Rust would from
//!   the module the comment is in (then its ancestors, then the crate's root): to a module,
//!   an item (`fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`, macro, `use`), or
//!   a member of a type (variant, field, method, associated item; members of types of one
//!   name are pooled). A first name that is no module or item of deltaship must be a type
//!   defined in it or a crate it depends on (written in full: `std::io::Error`).
//! - In a span with spaces (a command, a message), each word with a `/` that is a path as
//!   above (`tests/env/kube/ctl restart`).
//! - Not names: words with `=`, `<..>`, `$`, `:`, `@`, or a segment in capitals (`REGISTRY`):
//!   placeholders, URLs, settings; single words (`Observed`, a Kubernetes kind, a key like
//!   `delivery.queue_capacity`, a metric, a flag).

#[path = "prose/items.rs"]
mod items;
#[path = "prose/resolve.rs"]
mod resolve;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use items::{Index, Item};
use resolve::Resolver;
use support::docs::{pages, prose, root};

/// Paths written at run time, named in the prose but not committed.
const GENERATED: &[&str] = &["tests/env/.state/", "target/"];

/// Extensions of code: a bare file name with one must be a file of the repository.
const CODE: &[&str] = &["rs", "go", "py", "java"];

/// File extensions that make a span with a `/` a file name.
const EXTENSIONS: &[&str] = &["rs", "md", "go", "py", "sh", "toml", "yaml", "yml", "json", "java", "properties", "xml", "tpl", "txt", "lock"];

/// Folders not read for prose nor looked in for file names.
fn skipped(path: &Path) -> bool {
    let rel = path.strip_prefix(root()).unwrap_or(path).to_string_lossy().replace('\\', "/");
    matches!(rel.as_str(), ".git" | "target" | "tests/env/.state")
        || rel.ends_with("/node_modules")
        || rel.ends_with("/target")
        || rel.ends_with("/__pycache__")
}

/// Every file under `dir` (relative to the root), relative to the root, in order.
fn files_under(dir: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            if skipped(&path) {
                continue;
            } else if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path.strip_prefix(root()).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), &mut out);
    out.sort();
    out
}

/// A paragraph of prose: consecutive lines of one comment or page, fenced code left out.
struct Text {
    file: PathBuf,
    line: usize,
    text: String,
}

/// Consecutive numbered lines as paragraphs, without fenced code blocks.
fn paragraphs(file: &Path, lines: impl IntoIterator<Item = (usize, String)>) -> Vec<Text> {
    let mut out: Vec<Text> = Vec::new();
    let (mut last, mut in_code) = (0, false);
    for (line, text) in lines {
        if text.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || text.trim().is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(p) if line == last + 1 => {
                p.text.push('\n');
                p.text.push_str(&text);
            }
            _ => out.push(Text { file: file.to_path_buf(), line, text }),
        }
        last = line;
    }
    out
}

/// The comments of a script: whole lines starting with `marker`.
fn script_comments(file: &Path, marker: &str) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(root().join(file)).unwrap_or_default();
    text.lines().enumerate().filter_map(|(n, l)| Some((n + 1, l.trim_start().strip_prefix(marker)?.to_string()))).filter(|(_, l)| !l.starts_with('!')).collect()
}

/// The comment marker of a script, if `file` is one.
fn script_marker(file: &Path) -> Option<&'static str> {
    let name = file.file_name()?.to_string_lossy();
    let ext = file.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
    match ext.as_str() {
        "go" | "java" => Some("//"),
        "sh" | "py" | "yaml" | "yml" | "properties" => Some("#"),
        "" if name == "Dockerfile" => Some("#"),
        "" => std::fs::read(root().join(file)).ok()?.starts_with(b"#!").then_some("#"),
        _ => None,
    }
}

/// The Rust sources read: each with the module it is (`["src", "watch", "stream"]`).
fn rust_files() -> Vec<(PathBuf, Vec<String>)> {
    let mut out = vec![(PathBuf::from("build.rs"), vec!["build.rs".to_string()])];
    for tree in ["src", "tests", "benches"] {
        for file in files_under(tree).into_iter().filter(|f| f.extension().is_some_and(|e| e == "rs")) {
            let mut module: Vec<String> = file.with_extension("").iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) && module.len() > 1 {
                module.pop();
            }
            out.push((file, module));
        }
    }
    out
}

/// All prose, each paragraph with the module its Rust paths resolve from; and the index of
/// the Rust sources' modules and items.
fn everything() -> (Vec<(Text, Vec<String>)>, Index) {
    let mut index = Index::default();
    let mut out = Vec::new();
    for (file, module) in rust_files() {
        let lexed = items::lex(&std::fs::read_to_string(root().join(&file)).unwrap());
        assert!(index.add(&module, &lexed.code), "{}: this reader of Rust lost its way in the file's items", file.display());
        out.extend(paragraphs(&file, lexed.comments).into_iter().map(|t| (t, module.clone())));
    }
    let crate_root = vec!["src".to_string()];
    for dir in ["tests", "deploy", ".ci", "consumers", "vectors"] {
        for file in files_under(dir) {
            if let Some(marker) = script_marker(&file) {
                out.extend(paragraphs(&file, script_comments(&file, marker)).into_iter().map(|t| (t, crate_root.clone())));
            }
        }
    }
    let other_pages = files_under("").into_iter().filter(|f| f.extension().is_some_and(|e| e == "md") && !pages().contains(f));
    for page in pages().into_iter().chain(other_pages) {
        out.extend(paragraphs(&page, prose(&page)).into_iter().map(|t| (t, crate_root.clone())));
    }
    (out, index)
}

/// What a span in backticks claims exists.
#[derive(Debug, PartialEq)]
enum Claim {
    Path { path: String, lines: Option<(usize, usize)> },
    Rust(Vec<String>),
}

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `dispatch.rs:112` or `dispatch.rs:112-225` as the file and its lines.
fn line_reference(span: &str) -> (&str, Option<(usize, usize)>) {
    let Some((file, lines)) = span.rsplit_once(':') else { return (span, None) };
    let (from, to) = lines.split_once('-').unwrap_or((lines, lines));
    match (from.parse(), to.parse()) {
        (Ok(from), Ok(to)) if file.contains('.') => (file, Some((from, to))),
        _ => (span, None),
    }
}

/// What `span`, written in `file`, claims: `firsts` are the names a relative path may begin
/// with (the entries of the root, of `src/` and of the folders above `file`).
fn claim(span: &str, firsts: &BTreeSet<String>) -> Option<Claim> {
    let span = span.trim().trim_end_matches(['.', ',', ';']);
    let span = span.strip_suffix(':').unwrap_or(span);
    let rust = span.strip_suffix("()").unwrap_or(span);
    if rust.contains("::") {
        let segments: Vec<String> = rust.split("::").map(str::to_string).collect();
        return segments.iter().all(|s| is_ident(s)).then_some(Claim::Rust(segments));
    }
    let (path, lines) = line_reference(span);
    let first = path.split('/').next().unwrap_or("");
    if path.is_empty()
        || path.starts_with(['/', '~', '-'])
        || path.starts_with('.') && !firsts.contains(first)
        || !path.chars().all(|c| c.is_ascii_alphanumeric() || "_-./*".contains(c))
        || path.contains("..")
    {
        return None;
    }
    // A segment in capitals is a placeholder (`PATH-OR-URL/config.schema.json`).
    if path
        .split('/')
        .any(|s| s.contains(|c: char| c.is_ascii_uppercase()) && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-' || c == '_'))
    {
        return None;
    }
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let ext = last.rsplit_once('.').filter(|(stem, _)| !stem.is_empty()).map(|(_, ext)| ext);
    let names_file = ext.is_some_and(|ext| if path.contains('/') { EXTENSIONS.contains(&ext) } else { CODE.contains(&ext) });
    let in_tree = path.contains('/') && (firsts.contains(first) || path.ends_with('/'));
    (names_file || in_tree).then(|| Claim::Path { path: path.to_string(), lines })
}

/// What a span claims: itself, or when it holds spaces (a command, a message), each word
/// of it with a `/` that is a path of the repository (`tests/env/kube/ctl restart`).
fn claims(span: &str, firsts: &BTreeSet<String>) -> Vec<Claim> {
    if !span.contains(char::is_whitespace) {
        return claim(span, firsts).into_iter().collect();
    }
    span.split_whitespace().filter(|w| w.contains('/')).filter_map(|w| claim(w, firsts)).filter(|c| matches!(c, Claim::Path { .. })).collect()
}

/// The files and folders a path may be relative to when written in `file`: the root,
/// `src/`, and the folders above `file`.
fn bases(file: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::new(), PathBuf::from("src")];
    out.extend(file.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()).map(Path::to_path_buf));
    out
}

/// The names a relative path may begin with, written in `file`.
fn firsts(file: &Path) -> BTreeSet<String> {
    bases(file)
        .iter()
        .flat_map(|b| std::fs::read_dir(root().join(b)).into_iter().flatten())
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !skipped(p))
        .filter_map(|p| Some(p.file_name()?.to_string_lossy().into_owned()))
        .collect()
}

/// The files and folders `path`, written in `file`, names (every match of a glob).
fn matches(path: &str, file: &Path, names: &BTreeMap<String, Vec<PathBuf>>) -> Vec<PathBuf> {
    if !path.contains('/') {
        return names.iter().filter(|(n, _)| glob(path, n)).flat_map(|(_, p)| p.clone()).collect();
    }
    let mut out = Vec::new();
    for base in bases(file) {
        let full = base.join(path.trim_end_matches('/'));
        let (dir, pattern) = (full.parent().unwrap_or(Path::new("")), full.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if glob(&pattern, &name) && (!path.ends_with('/') || entry.path().is_dir()) {
                out.push(dir.join(name));
            }
        }
    }
    out
}

/// Whether `name` matches `pattern`, where `*` stands for any text.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((before, after)) => name.strip_prefix(before).is_some_and(|rest| (0..=rest.len()).any(|k| rest.is_char_boundary(k) && glob(after, &rest[k..]))),
    }
}

/// What is wrong with the path claim, if anything.
fn missing_path(path: &str, lines: Option<(usize, usize)>, file: &Path, names: &BTreeMap<String, Vec<PathBuf>>) -> Option<String> {
    if GENERATED.iter().any(|g| path.starts_with(g) || path == g.trim_end_matches('/')) {
        return None;
    }
    let found = matches(path, file, names);
    if found.is_empty() {
        return Some("no such file or folder".to_string());
    }
    let (from, to) = lines?;
    let longest = found.iter().map(|f| std::fs::read_to_string(root().join(f)).map_or(0, |t| t.lines().count())).max().unwrap_or(0);
    (from == 0 || from > to || to > longest).then(|| format!("lines {from}-{to} are not within it ({longest} lines)"))
}

/// Every file name of the repository, with the files that have it.
fn file_names() -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in files_under("") {
        out.entry(file.file_name().unwrap().to_string_lossy().into_owned()).or_default().push(file);
    }
    out
}

/// The spans in backticks of a paragraph, each with its line.
fn spans(text: &Text) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for (n, piece) in text.text.split('`').enumerate() {
        if n % 2 == 1 {
            let line = text.line + text.text[..offset].matches('\n').count();
            out.push((line, piece.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        offset += piece.len() + 1;
    }
    out
}

/// What the prose names that does not exist, and how many paths and Rust paths it names.
fn check(prose: &[(Text, Vec<String>)], resolver: &Resolver) -> (Vec<String>, usize, usize) {
    let names = file_names();
    let mut firsts_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let (mut wrong, mut paths, mut rust) = (Vec::new(), 0, 0);
    for (text, module) in prose {
        let firsts = firsts_of.entry(text.file.clone()).or_insert_with(|| firsts(&text.file));
        for (line, span) in spans(text) {
            for c in claims(&span, firsts) {
                let why = match c {
                    Claim::Path { path, lines } => {
                        paths += 1;
                        missing_path(&path, lines, &text.file, &names)
                    }
                    Claim::Rust(segments) => {
                        rust += 1;
                        resolver.resolve(module, &segments).err()
                    }
                };
                if let Some(why) = why {
                    wrong.push(format!("{}:{line}: `{span}`: {why}", text.file.display()));
                }
            }
        }
    }
    (wrong, paths, rust)
}

#[test]
fn every_path_module_and_item_named_in_backticks_exists() {
    let (prose, index) = everything();
    let resolver = Resolver::new(index);
    let (wrong, paths, rust) = check(&prose, &resolver);
    assert!(wrong.is_empty(), "names in backticks that do not exist (fix the prose, or see what counts at the top of tests/prose.rs):\n{}", wrong.join("\n"));
    println!("{} paragraphs of prose; {paths} paths and {rust} Rust paths in backticks, all found", prose.len());
    assert!(paths > 300 && rust > 80, "only {paths} paths and {rust} Rust paths: the prose's shape or this reader changed");
}

#[test]
fn a_wrong_name_is_found() {
    let (_, index) = everything();
    let resolver = Resolver::new(index);
    let planted = |file: &str, module: &[&str], line: &str| {
        let text = Text { file: PathBuf::from(file), line: 1, text: line.to_string() };
        check(&[(text, module.iter().map(|s| s.to_string()).collect())], &resolver).0
    };
    let src = |line: &str| planted("src/json/scan.rs", &["src", "json", "scan"], line);
    // Names that exist, seen from the module the comment is in.
    assert_eq!(src("`json::Fingerprinter`, `Scanner::new`, `crate::watch::stall::judge`, `Observed::Bookmark`, `super::tree`"), Vec::<String>::new());
    assert_eq!(
        planted("src/watch/stream.rs", &["src", "watch", "stream"], "`stall::judge`, `position.rs`, `src/watch/`, `dispatch.rs:112`"),
        Vec::<String>::new()
    );
    assert_eq!(
        planted("tests/support/history.rs", &["tests", "support", "history"], "`state::api_configmaps`, `support::env()`, `deltaship::CONTRACT_VERSION`"),
        Vec::<String>::new()
    );
    // Names that do not.
    for wrong in ["`change::Fingerprinter`", "`Observed::Gone`", "`stall::judge`", "`crate::route`", "`watch::observe::x`", "`route::Route`"] {
        assert_eq!(src(wrong).len(), 1, "{wrong} is found");
    }
    for wrong in ["`src/route/`", "`tests/support/kubes.rs`", "`dispatch.rs:99999`", "`no_such_file.rs`", "`sink/kafka/nowhere.rs`"] {
        assert_eq!(src(wrong).len(), 1, "{wrong} is found");
    }
    // Not names: a key, a URL, a command, a metric, a flag, a kind, a placeholder.
    let firsts = firsts(Path::new("src/json/scan.rs"));
    for not in [
        "delivery.queue_capacity",
        "https://example.com/a/b",
        "go run ./cmd/deltaship-rebuild",
        "deltaship run --config config/<name>",
        "deltaship_events_total",
        "--config",
        "ConfigMap",
        "config/<name>",
        "apps/Deployment",
        "namespace/name",
        "PATH-OR-URL/config.schema.json",
        "index.json",
    ] {
        assert_eq!(claims(not, &firsts), [], "{not}");
    }
    assert_eq!(claims("tests/env/kube/ctl restart", &firsts), [Claim::Path { path: "tests/env/kube/ctl".into(), lines: None }], "a command's path");
    assert_eq!(src("`tests/env/.state/env.sh`, `tests/node*.rs`"), Vec::<String>::new(), "generated paths and globs");
}

#[test]
fn the_lexer_sets_comments_and_literals_apart() {
    let lexed = items::lex("let s = \"// not a comment\"; // a `comment`\nlet c = '\"'; let r = r#\"/* \"# ; /// doc\nfn f<'a>() {}\n");
    assert_eq!(lexed.comments, vec![(1, " a `comment`".to_string()), (2, " doc".to_string())]);
    assert!(lexed.code.contains("fn f<'a>() {}") && !lexed.code.contains("not a comment"));
    let mut index = Index::default();
    index.add(&["t".to_string()], "pub enum E { A, #[x] B(u8) } struct S { pub f: u8 } impl Tr for S { fn m(&self) {} } use a::{b as c, d::{self}};");
    assert_eq!(index.members["E"], BTreeSet::from(["A".to_string(), "B".to_string()]));
    assert_eq!(index.members["S"], BTreeSet::from(["f".to_string(), "m".to_string()]));
    let items = &index.modules[&vec!["t".to_string()]].items;
    assert_eq!(items.get("c"), Some(&Item::Use(vec!["a".into(), "b".into()])));
    assert_eq!(items.get("d"), Some(&Item::Use(vec!["a".into(), "d".into()])));
}
