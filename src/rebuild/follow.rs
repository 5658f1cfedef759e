//! `rebuild --follow`: after the end of the source, keep reading and keep the state
//! document current in a file, rewritten whole (write then rename, so a reader never sees
//! half of it) at most once a second while events change it, until stopped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::consumer::Consumer;
use super::error::RebuildError;

/// How often the state file is rewritten at most, and how long a read waits for more.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Where the followed state goes, and what stops following.
#[derive(Clone)]
pub struct Follow {
    pub out: PathBuf,
    pub stop: CancellationToken,
}

/// The state file's writer: rewrites it when events changed the state since its last write.
pub struct Writer {
    out: PathBuf,
    written: Option<Instant>,
}

impl Writer {
    pub fn new(out: &Path) -> Writer {
        Writer { out: out.to_path_buf(), written: None }
    }

    /// Writes the document if the state changed and the last write is a period old (or
    /// `now`); a write that fails stops the follow.
    pub fn maybe_write(&mut self, consumer: &mut Consumer, now: bool) -> Result<(), RebuildError> {
        let due = self.written.is_none_or(|at| at.elapsed() >= PERIOD);
        if !consumer.changed || !(due || now) {
            return Ok(());
        }
        let text = serde_json::to_vec_pretty(&consumer.document()).expect("the state serializes");
        let tmp = self.out.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &self.out))
            .map_err(|source| RebuildError::StateFile { out: self.out.clone(), source })?;
        consumer.changed = false;
        self.written = Some(Instant::now());
        Ok(())
    }
}
