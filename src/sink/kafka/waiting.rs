//! The records a Kafka sink's producer holds: how many wait for their delivery report (on a
//! fenced route, for their transaction's outcome), and when the last one came
//! (kafka::recover tells a stuck producer by them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Records handed to the producer and not yet reported on, and when the last report
/// (delivered or failed) came.
#[derive(Debug)]
pub struct Outstanding {
    origin: Instant,
    waiting: AtomicUsize,
    last_report_ms: AtomicU64,
}

impl Default for Outstanding {
    fn default() -> Self {
        Outstanding { origin: Instant::now(), waiting: AtomicUsize::new(0), last_report_ms: AtomicU64::new(0) }
    }
}

impl Outstanding {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Records are waiting and none was reported on for `after`.
    pub fn stalled(&self, after: Duration) -> bool {
        let quiet = self.now_ms().saturating_sub(self.last_report_ms.load(Ordering::Acquire));
        self.waiting.load(Ordering::Acquire) > 0 && quiet >= after.as_millis() as u64
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// A record handed to the producer: `Tracked` reports on it when its delivery resolves
    /// or is dropped. The first record after a quiet time starts the clock.
    pub fn track<F>(self: &Arc<Self>, delivery: F) -> Tracked<F> {
        if self.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            self.last_report_ms.store(self.now_ms(), Ordering::Release);
        }
        Tracked { delivery, _report: Report(self.clone()) }
    }
}

/// A delivery and its place in `Outstanding`.
pub struct Tracked<F> {
    pub delivery: F,
    _report: Report,
}

struct Report(Arc<Outstanding>);

impl Drop for Report {
    fn drop(&mut self) {
        self.0.last_report_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_stalls_only_while_records_wait_without_a_report() {
        let p = Arc::new(Outstanding::default());
        assert!(!p.stalled(Duration::ZERO), "nothing waits");
        let tracked = p.track(());
        assert_eq!(p.waiting(), 1);
        assert!(p.stalled(Duration::ZERO));
        assert!(!p.stalled(Duration::from_secs(60)), "the clock starts with the first waiting record");
        drop(tracked);
        assert_eq!(p.waiting(), 0, "a dropped delivery counts as reported");
        assert!(!p.stalled(Duration::ZERO));
    }
}
