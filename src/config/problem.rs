//! One thing wrong with a loaded configuration: its key, what is wrong and the fix.

use std::fmt;

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `resources[1].namespaces[0]`.
    pub key: String,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}; fix: {}", self.key, self.problem, self.fix)
    }
}

pub(super) fn problem(key: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) -> Problem {
    Problem { key: key.into(), problem: problem.into(), fix: fix.into() }
}
