//! A dpkg database in an image's root file system, as image scanners read it: the status
//! file's stanzas, each package's file list and checksums.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A package of the image's dpkg database: its status stanza's fields (continuation lines
/// kept, each after a newline), and the paths its file list names.
pub struct DebPackage {
    pub fields: BTreeMap<String, String>,
    /// As dpkg names its files: `libc6:amd64` for a package of several architectures.
    pub binary: String,
    pub listed: Vec<String>,
}

pub fn database(root: &Path) -> Vec<DebPackage> {
    let status = std::fs::read_to_string(root.join("var/lib/dpkg/status")).unwrap();
    status
        .split("\n\n")
        .filter(|s| !s.trim().is_empty())
        .map(|stanza| {
            let mut fields = BTreeMap::<String, String>::new();
            let mut last = String::new();
            for line in stanza.lines() {
                match line.strip_prefix(' ') {
                    Some(more) => fields.get_mut(&last).unwrap().push_str(&format!("\n{more}")),
                    None => {
                        let (k, v) = line.split_once(':').unwrap_or_else(|| panic!("not a field: {line}"));
                        last = k.to_owned();
                        fields.insert(last.clone(), v.trim().to_owned());
                    }
                }
            }
            let name = &fields["Package"];
            let qualified = format!("{name}:{}", fields["Architecture"]);
            let info = root.join("var/lib/dpkg/info");
            let binary = if info.join(format!("{qualified}.list")).exists() { qualified } else { name.clone() };
            let list = std::fs::read_to_string(info.join(format!("{binary}.list"))).unwrap_or_else(|e| panic!("{binary}.list: {e}"));
            DebPackage { fields, binary, listed: list.lines().map(str::to_owned).collect() }
        })
        .collect()
}

/// "digest  path" lines (dpkg's md5sums) or " /path digest" lines (a stanza's Conffiles), as
/// absolute path to digest.
pub fn checksum_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [path, digest, ..] if path.starts_with('/') => Some((path.to_owned(), digest.to_owned())),
            [digest, path] => Some((format!("/{path}"), digest.to_owned())),
            _ => None,
        })
        .collect()
}

/// Every file and symlink under `root` (not a directory), as absolute paths inside it.
pub fn files(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            walk(root, &path, out);
        } else {
            out.insert(format!("/{}", path.strip_prefix(root).unwrap().display()));
        }
    }
}
