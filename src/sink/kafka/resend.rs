//! Sending again without writing twice. A record whose delivery report leaves open whether
//! the broker wrote it (kafka::delivery's `Possibly`, `Unconfirmed`, a dropped report), or,
//! on a fenced route, whose transaction's commit was in doubt when its producer was replaced
//! (kafka::transaction's `InDoubt`), is recorded as doubtful; the dispatcher's retry of its
//! event first reads the log for it (kafka::lookup, read committed) and sends it again only
//! if it is absent. Records of an event delivered while another of its records failed (a
//! marker's copies, the event before its tombstone) are not sent again. A record of an
//! aborted transaction is never read, so it is simply sent again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ledger::{self, Before, Doubt, Ledger, Part};
use super::lookup;
use crate::config::KafkaConfig;
use crate::model::Placement;
use crate::sink::{ErrorKind, Failure, SendError};
use crate::telemetry::meters::DoubtMeters;

/// How far before a record's hand-over to librdkafka the log is read for it: records carry
/// the producer's clock (CreateTime), or the broker's on a topic with LogAppendTime, which
/// may lag behind.
const CLOCK_SKEW: Duration = Duration::from_secs(5);

pub struct Resend {
    ledger: Mutex<Ledger>,
    /// Whether the ledger holds anything: the one check every send makes.
    held: AtomicBool,
    /// One read of the log at a time; it settles every doubt recorded before it.
    reading: tokio::sync::Mutex<()>,
    /// How to read the log.
    config: KafkaConfig,
    meters: DoubtMeters,
}

impl Resend {
    pub fn new(config: KafkaConfig) -> Resend {
        Resend { ledger: Mutex::default(), held: AtomicBool::new(false), reading: tokio::sync::Mutex::new(()), config, meters: DoubtMeters::default() }
    }

    pub fn has_records(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Ledger) -> R) -> R {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut ledger);
        self.held.store(!ledger.is_empty(), Ordering::Release);
        r
    }

    pub fn record_doubt(&self, id: &str, part: Part, topic: &str, since_ms: i64) {
        tracing::debug!(id, ?part, topic, "A record failed after it was sent: its retry reads the log for it first");
        self.with(|l| l.doubt(id, Doubt { part, topic: topic.to_string(), since_ms }));
    }

    pub fn record_delivered(&self, id: &str, part: Part, at: Placement) {
        self.with(|l| l.delivered(id, part, at));
    }

    /// Event `id` was delivered whole.
    pub fn forget(&self, id: &str) {
        if self.has_records() {
            self.with(|l| l.forget(id));
        }
    }

    /// Whether record `part` of event `id` is to be sent, or was delivered (where); a
    /// doubtful one is looked for in the log first. While the log cannot be read, a
    /// retryable error: nothing in doubt is sent.
    pub async fn before_send(&self, id: &str, part: Part) -> Result<Option<Placement>, SendError> {
        loop {
            match self.with(|l| l.before(id, part)) {
                Before::Send => return Ok(None),
                Before::Skip(at) => return Ok(Some(at)),
                Before::LookUp => self.read_log().await?,
            }
        }
    }

    /// Reads the log once for every doubtful record.
    async fn read_log(&self) -> Result<(), SendError> {
        let _one = self.reading.lock().await;
        let doubts = self.with(|l| l.doubts());
        if doubts.is_empty() {
            return Ok(());
        }
        let (config, wanted) = (self.config.clone(), doubts.clone());
        let found = tokio::task::spawn_blocking(move || lookup::find(&config, &wanted))
            .await
            .map_err(|e| SendError::Retryable { kind: ErrorKind::Broker, source: Failure::Blocking(e) })?
            .map_err(|e| SendError::Retryable { kind: ErrorKind::Broker, source: Failure::Lookup(Box::new(e)) })?;
        let (written, absent) = ledger::outcome(&doubts, &found);
        self.meters.resolved(written, absent);
        tracing::info!(written, absent, "Read the log for records whose delivery was in doubt: those written are not sent again");
        self.with(|l| l.resolve(&doubts, &found));
        Ok(())
    }
}

/// The floor of a record's timestamp, taken before it is handed to librdkafka.
pub fn stamp_floor() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().saturating_sub(CLOCK_SKEW);
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}
