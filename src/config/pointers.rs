//! JSON pointers given as options (`ignore_fields`, `filter.changed_paths`).

use super::problem::{Problem, problem};

/// JSON pointers (RFC 6901) at `key[j]`: each starts with `/`, and `~` only escapes as
/// `~0` (`~`) or `~1` (`/`). The empty pointer (the whole object) is valid JSON but
/// refused: ignoring or watching the whole object is never what is meant.
pub(super) fn check_pointers(out: &mut Vec<Problem>, key: &str, pointers: &[String], example: &str) {
    for (j, p) in pointers.iter().enumerate() {
        let bad_escape = p.match_indices('~').any(|(i, _)| !matches!(p.as_bytes().get(i + 1), Some(b'0' | b'1')));
        if !p.starts_with('/') {
            out.push(problem(format!("{key}[{j}]"), format!("`{p}` is not a JSON pointer"), format!("start it with `/`, e.g. {example}")));
        } else if bad_escape {
            out.push(problem(
                format!("{key}[{j}]"),
                format!("`{p}` is not a JSON pointer: `~` must be followed by `0` or `1`"),
                "write `~0` for `~` and `~1` for `/` inside a name (RFC 6901)",
            ));
        }
    }
}
