//! The metrics of the Kafka sink: stuck producers replaced, records whose delivery was in
//! doubt, and the transactions of a fenced route.

use std::sync::OnceLock;

use metrics::Counter;

use crate::telemetry::metrics::{self as m, label};

/// The `sink` label of the Kafka sink.
const KAFKA: &str = "kafka";

/// The handle of one Kafka route's producer supervisor.
pub struct RecoveryMeters(Counter);

impl RecoveryMeters {
    pub fn new(route: &str) -> RecoveryMeters {
        RecoveryMeters(metrics::counter!(m::SINK_RECOVERIES, label::SINK => KAFKA, label::ROUTE => route.to_string()))
    }

    /// The producer was replaced.
    pub fn recovered(&self) {
        self.0.increment(1);
    }
}

/// The handles of one fenced Kafka route's transactions, by how they ended.
pub struct TransactionMeters {
    committed: Counter,
    aborted: Counter,
    in_doubt: Counter,
    failed: Counter,
}

impl TransactionMeters {
    pub fn new(route: &str) -> TransactionMeters {
        let ended =
            |outcome: &'static str| metrics::counter!(m::SINK_TRANSACTIONS, label::SINK => KAFKA, label::ROUTE => route.to_string(), label::OUTCOME => outcome);
        TransactionMeters { committed: ended("committed"), aborted: ended("aborted"), in_doubt: ended("in_doubt"), failed: ended("failed") }
    }

    pub fn committed(&self) {
        self.committed.increment(1);
    }

    pub fn aborted(&self) {
        self.aborted.increment(1);
    }

    pub fn in_doubt(&self) {
        self.in_doubt.increment(1);
    }

    pub fn failed(&self) {
        self.failed.increment(1);
    }
}

/// The handles of one Kafka sink's reads of the log for records in doubt, registered at the
/// first read.
#[derive(Default)]
pub struct DoubtMeters(OnceLock<(Counter, Counter)>);

impl DoubtMeters {
    /// A read of the log found `written` records of those in doubt, and not `absent` ones.
    pub fn resolved(&self, written: u64, absent: u64) {
        let (w, a) = self.0.get_or_init(|| {
            (
                metrics::counter!(m::SINK_DOUBTFUL, label::SINK => KAFKA, label::OUTCOME => "written"),
                metrics::counter!(m::SINK_DOUBTFUL, label::SINK => KAFKA, label::OUTCOME => "absent"),
            )
        });
        w.increment(written);
        a.increment(absent);
    }
}
