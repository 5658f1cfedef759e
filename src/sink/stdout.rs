//! The stdout sink: structured CloudEvents as JSON lines.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::{ErrorKind, Failure, SendError};
use crate::event::Envelope;

/// Writes one JSON line per event. Logs go to stderr, so stdout holds events only.
#[derive(Clone)]
pub struct StdoutSink {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Default for StdoutSink {
    fn default() -> Self {
        StdoutSink::to(Box::new(std::io::stdout()))
    }
}

impl StdoutSink {
    pub fn to(out: Box<dyn Write + Send>) -> StdoutSink {
        StdoutSink { out: Arc::new(Mutex::new(out)) }
    }

    pub fn send(&self, env: &Envelope) -> Result<(), SendError> {
        let mut line = super::encode::structured_bytes(&env.attributes.to_event(), &env.data);
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // Flush per event: a reader of a pipe sees each event as soon as it is "acked".
        out.write_all(&line).and_then(|_| out.flush()).map_err(|e| SendError::Fatal { kind: ErrorKind::Io, source: Failure::Stdout(e) })
    }
}
