//! Every relative link of the documentation (README.md, CONTRIBUTING.md, docs/) leads to a
//! file of the repository, and to a heading of it when it names one; every metric named in
//! backticks is one deltaship exports (the paths in backticks: tests/prose.rs). No test
//! server is needed.

mod support;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use support::docs::{pages, prose, root};

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks).
fn anchors(file: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in std::fs::read_to_string(file).unwrap().lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            let mut a = anchor(line.trim_start_matches('#'));
            // Repeated headings get -1, -2, ... on GitHub.
            let base = a.clone();
            let mut n = 0;
            while out.contains(&a) {
                n += 1;
                a = format!("{base}-{n}");
            }
            out.insert(a);
        }
    }
    out
}

/// `a/b/../c` as `a/c`, without asking the file system.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The targets of the markdown links `[text](target)` of a text.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

/// What is wrong with a relative link `target` written in `page`, if anything.
fn broken_link(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() { page.to_path_buf() } else { normal(&page.parent().unwrap().join(path)) };
    let full = root().join(&file);
    if !full.exists() {
        return Some(format!("{target}: no file {}", file.display()));
    }
    if !fragment.is_empty() {
        if full.extension().is_none_or(|e| e != "md") {
            return Some(format!("{target}: a fragment of a file that is not markdown"));
        }
        if !anchors(&full).contains(fragment) {
            return Some(format!("{target}: {} has no heading #{fragment}", file.display()));
        }
    }
    None
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for (line, text) in prose(&page) {
            for target in link_targets(&text) {
                checked += 1;
                if let Some(why) = broken_link(&page, &target) {
                    broken.push(format!("{}:{line}: {why}", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 100, "only {checked} links: the pages' shape changed");
}

#[test]
fn a_broken_link_is_found() {
    let page = Path::new("docs/reference/cli.md");
    assert!(broken_link(page, "configuration.md").is_none());
    assert!(broken_link(page, "configuration.md#environment-variables").is_some());
    assert!(broken_link(page, "../setup/no-such-page.md").is_some());
    assert!(broken_link(page, "https://cloudevents.io").is_none());
    assert_eq!(anchor("Syncs, ordering and how to rebuild state"), "syncs-ordering-and-how-to-rebuild-state");
    assert_eq!(anchor("Files of a vector (`vectors/<name>/`)"), "files-of-a-vector-vectorsname");
}

/// The spans written in backticks in a line of prose.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_metric_named_in_backticks_is_one_deltaship_declares() {
    let code = support::docs::rust_sources("src");
    let mut unknown = BTreeSet::new();
    let mut checked = 0;
    for page in pages() {
        for (line, text) in prose(&page) {
            for span in code_spans(&text) {
                let name = span.split(['{', ' ', '=']).next().unwrap();
                if name.starts_with("deltaship_") && name.len() > "deltaship_".len() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    checked += 1;
                    if !code.contains(&format!("\"{name}\"")) {
                        unknown.insert(format!("{}:{line}: `{name}`", page.display()));
                    }
                }
            }
        }
    }
    assert!(unknown.is_empty(), "metrics the code does not declare:\n{}", unknown.into_iter().collect::<Vec<_>>().join("\n"));
    assert!(checked > 50, "only {checked} metric names: the pages' shape changed");
}
