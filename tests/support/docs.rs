//! The documentation as the tests read it: README.md, CONTRIBUTING.md and every page under
//! docs/, with their fenced code blocks and the `<!-- KIND: NAME -->` marks that name them.

use std::path::{Path, PathBuf};

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every page of the documentation, relative to the repository's root, in a stable order.
pub fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("CONTRIBUTING.md")];
    let mut found = Vec::new();
    markdown_under(&root().join("docs"), &mut found);
    found.sort();
    pages.extend(found.into_iter().map(|p| p.strip_prefix(root()).unwrap().to_path_buf()));
    pages
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

pub fn read(page: &Path) -> String {
    std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

/// The text of a page outside its fenced code blocks, line by line with line numbers.
pub fn prose(page: &Path) -> Vec<(usize, String)> {
    let mut in_code = false;
    let mut out = Vec::new();
    for (i, line) in read(page).lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            out.push((i + 1, line.to_string()));
        }
    }
    out
}

/// A fenced code block of a page.
pub struct Fence {
    pub page: PathBuf,
    /// The line of the opening fence, from 1.
    pub line: usize,
    pub lang: String,
    pub text: String,
    /// `config: routes` for a block right after `<!-- config: routes -->` (blank lines may
    /// stand between).
    pub mark: Option<String>,
}

/// The fenced code blocks of `page`, in order.
pub fn fences(page: &Path) -> Vec<Fence> {
    let text = read(page);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            let indent = lines[i].len() - trimmed.len();
            let start = i;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim_start() != "```" {
                body.push(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
                i += 1;
            }
            let mark = lines[..start]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().strip_prefix("<!-- ")?.strip_suffix(" -->").map(str::to_string));
            out.push(Fence { page: page.to_path_buf(), line: start + 1, lang: lang.trim().to_string(), text: body.join("\n") + "\n", mark });
        }
        i += 1;
    }
    out
}

/// Every fenced block of every page.
pub fn all_fences() -> Vec<Fence> {
    pages().iter().flat_map(|p| fences(p)).collect()
}

/// The `lang` block marked `<!-- MARK -->` (e.g. `config: routes`, `toml`), wherever in the
/// documentation it stands: the examples are tested as written. Exactly one block has a mark.
pub fn block(mark: &str, lang: &str) -> String {
    let found: Vec<Fence> = all_fences().into_iter().filter(|f| f.mark.as_deref() == Some(mark)).collect();
    match found.as_slice() {
        [one] => {
            assert_eq!(one.lang, lang, "<!-- {mark} --> in {} marks a {} block, not {lang}", one.page.display(), one.lang);
            one.text.clone()
        }
        [] => panic!("no page of the documentation has a block marked <!-- {mark} -->"),
        many => panic!("<!-- {mark} --> marks {} blocks: {:?}", many.len(), many.iter().map(|f| f.page.display().to_string()).collect::<Vec<_>>()),
    }
}

/// The names of the blocks marked `<!-- KIND: NAME -->`, with their pages.
pub fn marked(kind: &str) -> Vec<(String, PathBuf)> {
    let prefix = format!("{kind}: ");
    all_fences().into_iter().filter_map(|f| Some((f.mark?.strip_prefix(&prefix)?.to_string(), f.page))).collect()
}

/// Every Rust source under `dir` (relative to the repository's root), one after another: what
/// the documentation's quotes and names are looked up in.
pub fn rust_sources(dir: &str) -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(&root().join(dir), &mut out);
    out
}
