//! The consumer `rebuild` drives: the protocol's state, and the records skipped on the way.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::error::RebuildError;
use super::position::Position;
use super::protocol::ConsumerState;
use super::step::{Bad, Reason, Step};

/// A record skipped as bad: where, why, what exactly.
#[derive(Debug, Serialize)]
pub struct Skipped {
    #[serde(flatten)]
    pub at: Position,
    pub reason: Reason,
    pub problem: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record {}: {}: {}", self.at, self.reason, self.problem)
    }
}

/// The protocol's state and what was skipped on the way.
pub(super) struct Consumer {
    pub(super) state: ConsumerState,
    /// Stop at the first bad record instead of skipping it.
    strict: bool,
    pub(super) skipped: Vec<Skipped>,
    /// Whether a record was applied since the state was last written (`--follow`).
    pub(super) changed: bool,
    /// How many of the state's mismatches were reported on stderr.
    reported: usize,
}

impl Consumer {
    pub(super) fn new(state: ConsumerState, strict: bool) -> Consumer {
        Consumer { state, strict, skipped: Vec::new(), changed: false, reported: 0 }
    }

    /// One record read at `at`: applied, or, when bad, skipped and recorded (an error
    /// under `strict`).
    pub(super) fn record(&mut self, at: impl FnOnce() -> Position, step: Result<Step, Bad>) -> Result<(), RebuildError> {
        self.changed = true;
        let applied = match step.and_then(|s| self.state.step(s)) {
            Ok(()) => Ok(()),
            Err(bad) => self.skip(at(), bad),
        };
        // Reported as found: `--follow` may run for days.
        for check in &self.state.mismatches[self.reported..] {
            eprintln!("state mismatch at {check}");
        }
        self.reported = self.state.mismatches.len();
        applied
    }

    /// The state document, with what was skipped.
    pub(super) fn document(&mut self) -> Value {
        let mut document = self.state.document();
        document["skipped"] = serde_json::to_value(&self.skipped).expect("skipped records serialize");
        document
    }

    fn skip(&mut self, at: Position, bad: Bad) -> Result<(), RebuildError> {
        if self.strict {
            return Err(RebuildError::BadRecord { at, bad });
        }
        *self.state.summary.skipped.entry(bad.reason).or_default() += 1;
        self.skipped.push(Skipped { at, reason: bad.reason, problem: bad.problem });
        Ok(())
    }
}
