//! The transactions of a fenced Kafka route (sink::fence). Once a leader claimed the route,
//! its records are produced inside transactions of a producer whose transactional id every
//! replica shares. A record counts as delivered only when its transaction committed: the
//! send waits for its delivery report, then for the commit. A committer task commits the
//! open transaction once every record in it was reported and none joined it for LINGER
//! (records that keep coming share one commit), at the latest COMMIT_EVERY after it began,
//! at once behind a barrier, and without lingering when the dispatcher holds as many events
//! as it may (nothing more can join until some are acknowledged). A transaction that cannot
//! commit is aborted and its records are sent again; a producer fenced by a successor fails
//! every send for good. A commit still unanswered when its producer is replaced may have
//! reached the coordinator: its records are told only once the new producer's
//! initialisation completed it (one way or the other), as in doubt, and their retry looks
//! for them in the log (kafka::resend) before sending them again.
//!
//! Consumers must read committed records only (`isolation.level=read_committed`, the
//! default of librdkafka-based clients): the records of an aborted transaction stay in the
//! log, marked aborted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer as _;
use tokio::sync::{Notify, RwLock, RwLockReadGuard, watch};

use crate::broker::kafka::Producer;
use crate::telemetry::meters::TransactionMeters;

/// The longest a transaction stays open while records keep joining it or being reported.
pub const COMMIT_EVERY: Duration = Duration::from_millis(100);
/// How long a transaction whose records were all reported stays open for more: a commit
/// costs the bridge as much CPU as a few dozen records (about 250 µs at 100 updates/s, in
/// BENCHMARKS.md: two round trips with the coordinator), so records that keep coming
/// milliseconds apart are committed together.
pub const LINGER: Duration = Duration::from_millis(20);
/// How long one attempt to commit or abort may take (a commit flushes the transaction's
/// records first). Attempts that time out, or fail for a reason a retry may fix (the
/// coordinator restarting), are made again, after RETRY_AFTER, until one settles the
/// transaction or the producer is replaced.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// How long initialising the transactional producer may take (it finds the coordinator and
/// fences the id's previous producer).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Committed,
    /// Aborted: its records are not visible to consumers; send them again.
    Aborted(String),
    /// Its commit was asked and its producer replaced before the answer came; the
    /// replacement's initialisation completed it, committed or aborted: the log tells which.
    InDoubt(String),
    /// The producer can no longer send: a successor fenced it, or another fatal error.
    Failed(String),
}

/// The open transaction, if any, and what the committer needs to know of it.
#[derive(Default)]
struct State {
    open: Option<Open>,
    /// The producer failed for good: what every later send is told.
    failed: Option<String>,
    /// The dispatcher was full while no transaction was open (its records had yet to
    /// enrol): the next one does not linger either.
    full_next: bool,
    /// Transactions whose commit went unanswered when their producer was replaced, with
    /// why: told `InDoubt` once the replacement is initialised.
    in_doubt: Vec<(Open, String)>,
}

struct Open {
    settled: watch::Sender<Option<Settled>>,
    /// Records produced in it whose delivery report has not been taken yet.
    unreported: usize,
    began: Instant,
    /// When the last record joined it.
    joined: Instant,
    /// A barrier waits behind it: commit at once.
    expedited: bool,
    /// The dispatcher is full: commit once every record was reported, without lingering.
    full: bool,
}

/// The route's transactions; shared by the sink's clones and the committer task.
pub struct Transactions {
    /// Shared while a record is handed to librdkafka; exclusive while a transaction commits
    /// or aborts, when librdkafka refuses new records.
    gate: RwLock<()>,
    state: Mutex<State>,
    wake: Notify,
    /// Incremented when the producer is replaced: a transaction of an earlier producer is
    /// settled as aborted, whatever that producer says.
    epoch: AtomicU64,
    meters: TransactionMeters,
}

/// One record's part in a transaction: report it (`reported`), then wait for `settled`.
pub struct Enrolment {
    txns: Arc<Transactions>,
    settled: watch::Receiver<Option<Settled>>,
    reported: bool,
}

impl Transactions {
    pub fn new(meters: TransactionMeters) -> Transactions {
        Transactions { gate: RwLock::default(), state: Mutex::default(), wake: Notify::new(), epoch: AtomicU64::default(), meters }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a transaction when none is open, and enrols one record in it. The returned
    /// guard must be held until the record is handed to librdkafka.
    pub async fn enrol(self: &Arc<Self>, producer: &Producer) -> Result<(RwLockReadGuard<'_, ()>, Enrolment), Result<KafkaError, String>> {
        let gate = self.gate.read().await;
        let mut state = self.state();
        if let Some(failed) = &state.failed {
            return Err(Err(failed.clone()));
        }
        let open = match &mut state.open {
            Some(open) => open,
            None => {
                producer.begin_transaction().map_err(Ok)?;
                let now = Instant::now();
                let full = std::mem::take(&mut state.full_next);
                state.open.insert(Open { settled: watch::channel(None).0, unreported: 0, began: now, joined: now, expedited: false, full })
            }
        };
        open.unreported += 1;
        open.joined = Instant::now();
        let settled = open.settled.subscribe();
        drop(state);
        Ok((gate, Enrolment { txns: self.clone(), settled, reported: false }))
    }

    /// Commits the open transaction at once (a barrier waits behind it).
    pub fn expedite(&self) {
        if let Some(open) = &mut self.state().open {
            open.expedited = true;
        }
        self.wake.notify_one();
    }

    /// Nothing more joins the open transaction (or, none being open, the next) until some
    /// of its records are acknowledged: it commits once they are all reported, without
    /// lingering for more.
    pub fn full(&self) {
        let mut state = self.state();
        match &mut state.open {
            Some(open) => open.full = true,
            None => state.full_next = true,
        }
        drop(state);
        self.wake.notify_one();
    }

    /// The producer was replaced, and its successor initialised: that aborted the open
    /// transaction, never asked to commit, and completed those whose commit was in doubt.
    pub fn replaced(&self) {
        let mut state = self.state();
        let mut ended: Vec<(Open, Settled)> = state.in_doubt.drain(..).map(|(open, why)| (open, Settled::InDoubt(why))).collect();
        ended.extend(state.open.take().map(|open| (open, Settled::Aborted("the producer was replaced".into()))));
        drop(state);
        for (open, how) in ended {
            self.count(&how);
            open.settled.send_replace(Some(how));
        }
    }

    /// Exclusive use of the producer, to replace it: a commit still being retried on the
    /// current one gives up first. Nothing is produced until the guard is dropped.
    pub async fn exclusive(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.gate.write().await
    }

    /// Whether the open transaction should commit now, and when to look again if not.
    fn due(&self) -> Result<(), Duration> {
        match &self.state().open {
            None => Err(COMMIT_EVERY),
            Some(open) => {
                let now = Instant::now();
                commit_due(Standing {
                    age: now - open.began,
                    quiet: now - open.joined,
                    unreported: open.unreported,
                    expedited: open.expedited,
                    full: open.full,
                })
            }
        }
    }

    /// Commits open transactions through `producer()` (the sink's current producer) until
    /// the transactions are dropped.
    pub async fn commit_until_dropped(txns: Weak<Transactions>, producer: impl Fn() -> Producer) {
        loop {
            let Some(t) = txns.upgrade() else { return };
            if let Err(wait) = t.due() {
                // Looked at again after `wait`, or when the last record is reported or the
                // transaction expedited.
                let _ = tokio::time::timeout(wait.max(Duration::from_millis(1)), t.wake.notified()).await;
                continue;
            }
            let gate = t.gate.write().await;
            let Some(open) = t.state().open.take() else { continue };
            let epoch = t.epoch.load(Ordering::Acquire);
            let settled = match settle(producer(), t.clone(), epoch).await {
                // The producer is being replaced: its successor's initialisation completes
                // the transaction, and `replaced` tells its records.
                Settled::InDoubt(e) => {
                    t.state().in_doubt.push((open, e));
                    continue;
                }
                Settled::Failed(e) if t.epoch.load(Ordering::Acquire) != epoch => {
                    t.state().in_doubt.push((open, e));
                    continue;
                }
                Settled::Failed(e) => {
                    t.state().failed = Some(e.clone());
                    Settled::Failed(e)
                }
                settled => settled,
            };
            // Records may join the next transaction before this one's are told it ended:
            // the sends woken next hand their lanes' next events straight over.
            drop(gate);
            t.count(&settled);
            open.settled.send_replace(Some(settled));
        }
    }

    fn count(&self, how: &Settled) {
        match how {
            Settled::Committed => self.meters.committed(),
            Settled::Aborted(_) => self.meters.aborted(),
            Settled::InDoubt(_) => self.meters.in_doubt(),
            Settled::Failed(_) => self.meters.failed(),
        }
    }
}

/// What the commit rule looks at in an open transaction.
#[derive(Debug, Clone, Copy)]
struct Standing {
    age: Duration,
    /// Since the last record joined.
    quiet: Duration,
    unreported: usize,
    expedited: bool,
    full: bool,
}

/// Commit now (Ok), or look again after the returned wait at the latest: at once when
/// expedited, at COMMIT_EVERY of age, or once every record was reported and none joined
/// for LINGER (at once when the dispatcher is full).
fn commit_due(t: Standing) -> Result<(), Duration> {
    let by_age = COMMIT_EVERY.saturating_sub(t.age);
    if t.expedited || by_age.is_zero() {
        return Ok(());
    }
    if t.unreported > 0 {
        // Woken when the last one is reported.
        return Err(by_age);
    }
    if t.full {
        return Ok(());
    }
    match LINGER.saturating_sub(t.quiet) {
        d if d.is_zero() => Ok(()),
        d => Err(d.min(by_age)),
    }
}

/// Commits the producer's open transaction, aborting it when it cannot commit; retries
/// what a retry may fix until the producer is replaced (`epoch` moved on).
async fn settle(producer: Producer, txns: Arc<Transactions>, epoch: u64) -> Settled {
    tokio::task::spawn_blocking(move || {
        let replaced = || txns.epoch.load(Ordering::Acquire) != epoch;
        loop {
            let e = match producer.commit_transaction(ATTEMPT_TIMEOUT) {
                Ok(()) => return Settled::Committed,
                Err(e) => e,
            };
            match outcome_of(&e) {
                Next::Fail => return Settled::Failed(e.to_string()),
                Next::Abort => return abort(&producer, &e, &replaced),
                Next::Retry if replaced() => return Settled::InDoubt(format!("{e}; the producer was replaced")),
                Next::Retry => std::thread::sleep(RETRY_AFTER),
            }
        }
    })
    .await
    .unwrap_or_else(|e| Settled::Failed(format!("the commit did not finish: {e}")))
}

/// Aborts the open transaction after `cause`, retrying what a retry may fix.
fn abort(producer: &Producer, cause: &KafkaError, replaced: &dyn Fn() -> bool) -> Settled {
    loop {
        let e = match producer.abort_transaction(ATTEMPT_TIMEOUT) {
            Ok(()) => return Settled::Aborted(cause.to_string()),
            Err(e) => e,
        };
        match outcome_of(&e) {
            Next::Retry if !replaced() => std::thread::sleep(RETRY_AFTER),
            Next::Retry => return Settled::Aborted(format!("{cause}; the producer was replaced")),
            Next::Fail | Next::Abort => return Settled::Failed(format!("{cause}; then the abort failed: {e}")),
        }
    }
}

/// What to do after a commit or abort failed with `e`.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The producer can do nothing more (fenced, or another fatal error).
    Fail,
    /// The transaction cannot commit: abort it.
    Abort,
    /// Try again (a timeout, the coordinator unavailable).
    Retry,
}

fn outcome_of(e: &KafkaError) -> Next {
    match e {
        KafkaError::Transaction(t) if t.is_fatal() => Next::Fail,
        KafkaError::Transaction(t) if t.txn_requires_abort() => Next::Abort,
        _ => Next::Retry,
    }
}

impl Enrolment {
    /// The record's delivery report was taken: the transaction may commit once every
    /// record in it was.
    pub fn reported(&mut self) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        let mut state = self.txns.state();
        // The transaction this record joined may have been abandoned meanwhile.
        if self.settled.borrow().is_none()
            && let Some(open) = &mut state.open
        {
            open.unreported = open.unreported.saturating_sub(1);
            if open.unreported == 0 {
                self.txns.wake.notify_one();
            }
        }
    }

    /// How the record's transaction ended.
    pub async fn settled(mut self) -> Settled {
        self.reported();
        match self.settled.wait_for(Option::is_some).await {
            Ok(s) => s.clone().unwrap_or(Settled::Failed("no outcome".into())),
            Err(_) => Settled::Failed("the transaction was dropped without an outcome".into()),
        }
    }
}

impl Drop for Enrolment {
    fn drop(&mut self) {
        self.reported();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn standing(age: u64, quiet: u64, unreported: usize) -> Standing {
        Standing { age: ms(age), quiet: ms(quiet), unreported, expedited: false, full: false }
    }

    #[test]
    fn a_transaction_whose_records_keep_coming_stays_open_until_they_stop_for_the_linger() {
        // Reported, and the last record joined 5 ms ago: wait for the rest of the linger.
        assert_eq!(commit_due(standing(30, 5, 0)), Err(LINGER - ms(5)));
        assert_eq!(commit_due(standing(30, LINGER.as_millis() as u64, 0)), Ok(()));
        // Records not yet reported: woken by the last report, or at COMMIT_EVERY.
        assert_eq!(commit_due(standing(30, 25, 2)), Err(COMMIT_EVERY - ms(30)));
    }

    #[test]
    fn a_transaction_commits_at_its_age_limit_even_while_records_keep_coming() {
        assert_eq!(commit_due(standing(COMMIT_EVERY.as_millis() as u64, 0, 3)), Ok(()));
        // The linger never outlasts the age limit.
        assert_eq!(commit_due(standing(COMMIT_EVERY.as_millis() as u64 - 4, 1, 0)), Err(ms(4)));
    }

    #[test]
    fn a_transaction_of_a_full_dispatcher_commits_once_reported_without_lingering() {
        let full = |unreported| Standing { full: true, ..standing(1, 0, unreported) };
        assert_eq!(commit_due(full(0)), Ok(()));
        assert_eq!(commit_due(full(2)), Err(COMMIT_EVERY - ms(1)));
    }

    #[test]
    fn a_replacement_tells_a_commit_in_doubt_as_such_and_aborts_the_transaction_never_asked_to_commit() {
        let txns = Transactions::new(TransactionMeters::new("r"));
        let open = || {
            let now = Instant::now();
            Open { settled: watch::channel(None).0, unreported: 0, began: now, joined: now, expedited: false, full: false }
        };
        let (asked, never_asked) = (open(), open());
        let (asked_rx, never_asked_rx) = (asked.settled.subscribe(), never_asked.settled.subscribe());
        txns.state().in_doubt.push((asked, "commit timed out".into()));
        txns.state().open = Some(never_asked);
        assert!(asked_rx.borrow().is_none(), "a commit in doubt is told nothing before the replacement is initialised");
        txns.replaced();
        assert_eq!(*asked_rx.borrow(), Some(Settled::InDoubt("commit timed out".into())), "its records are looked for in the log");
        assert_eq!(*never_asked_rx.borrow(), Some(Settled::Aborted("the producer was replaced".into())));
        assert!(txns.state().open.is_none() && txns.state().in_doubt.is_empty());
    }

    #[test]
    fn a_transaction_nothing_more_can_join_commits_at_once() {
        let expedited = Standing { expedited: true, ..standing(1, 0, 5) };
        assert_eq!(commit_due(expedited), Ok(()));
    }
}
