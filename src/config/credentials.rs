//! The credentials a sink is given: each secret once, a user with its password, a client
//! certificate with its key, and every file readable.

use std::path::{Path, PathBuf};

use super::problem::{Problem, problem};
use super::secret::regular_file;

/// What a sink's credentials give, for the checks every sink shares.
pub(super) struct Credentials<'a> {
    pub user: bool,
    /// (inline, as a file) of the password and of the token.
    pub password: (bool, bool),
    pub token: (bool, bool),
    /// Whether a client certificate and its key are set.
    pub cert_and_key: (bool, bool),
    /// (key under the sink, the file, what it holds): each must be readable.
    pub files: &'a [(&'a str, &'a Option<PathBuf>, &'a str)],
}

/// A secret given once (inline or as a file), a user with its password, a client
/// certificate with its key, and every file readable.
pub(super) fn check_credentials(out: &mut Vec<Problem>, key: &str, c: Credentials<'_>) {
    let at = |field: &str| format!("{key}.{field}");
    if c.password.0 && c.password.1 || c.token.0 && c.token.1 {
        out.push(problem(at("auth"), "sets a secret both inline and as a file", "keep only the *_file setting"));
    }
    if c.user != (c.password.0 || c.password.1) {
        out.push(problem(at("auth.user"), "user and password go together", "set both `user` and `password_file` (or `password`), or neither"));
    }
    if c.cert_and_key.0 != c.cert_and_key.1 {
        out.push(problem(at("tls.cert_file"), "a client certificate needs its key", "set both `cert_file` and `key_file`, or neither"));
    }
    for (field, path, what) in c.files {
        if let Some(path) = path {
            check_readable(out, at(field), path, what);
        }
    }
}

/// The file at `path` is a regular file that can be read now, so that a wrong path stops
/// start-up naming its key, instead of failing each connection attempt later (or blocking
/// start-up: a FIFO is refused before it is opened).
pub(super) fn check_readable(out: &mut Vec<Problem>, key: String, path: &Path, what: &str) {
    if let Err(e) = regular_file(path).and_then(|_| std::fs::File::open(path)) {
        out.push(problem(key, format!("cannot read {}: {e}", path.display()), format!("give the path of a readable file holding {what}")));
    }
}
