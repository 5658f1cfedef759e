//! The allowed range of every bounded number in the configuration: one source for the
//! loader's check (`Bound::check`, called by each section) and for the JSON Schema's
//! `minimum` and `maximum` (`#[schemars(transform = &bounds::NAME)]` on the field), so that
//! editors and the chart's `values.schema.json` refuse what the loader refuses. Larger
//! values are mistakes that would overflow a timer (tokio panics past its limits) or reach
//! a server as a negative number.

use std::fmt::Display;

use schemars::Schema;
use schemars::transform::Transform;

use super::problem::{Problem, problem};

/// One option's inclusive range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The option as the configuration reference names it, e.g. `delivery.queue_capacity`,
    /// `resources[].resync_secs` or `sink.jetstream.replicas`.
    pub key: &'static str,
    pub min: i64,
    pub max: i64,
    /// What the number counts, for the fix: `set UNIT from MIN to MAX`.
    pub unit: &'static str,
}

impl Bound {
    /// The option's own name, the last part of `key`.
    pub fn field(&self) -> &'static str {
        self.key.rsplit('.').next().unwrap_or(self.key)
    }

    /// `value` of the option under `at` (e.g. `routes[1].sink.jetstream`) within the range,
    /// else a problem naming the option, the value and the range.
    pub(super) fn check<T: Copy + Display + TryInto<i64>>(&self, out: &mut Vec<Problem>, at: &str, value: T) {
        if !value.try_into().is_ok_and(|v| (self.min..=self.max).contains(&v)) {
            out.push(problem(
                format!("{at}.{}", self.field()),
                format!("{value} is out of range"),
                format!("set {} from {} to {}", self.unit, self.min, self.max),
            ));
        }
    }
}

/// The field's schema gets the range as `minimum` and `maximum`
/// (`#[schemars(transform = &bounds::NAME)]`).
impl Transform for &Bound {
    fn transform(&mut self, schema: &mut Schema) {
        schema.insert("minimum".into(), self.min.into());
        schema.insert("maximum".into(), self.max.into());
    }
}

/// Declares each bound and `ALL`, the list of them, so that a new bound is in the list.
macro_rules! bounds {
    ($($(#[$doc:meta])* $name:ident = $key:literal, $min:expr, $max:expr, $unit:literal;)*) => {
        $($(#[$doc])* pub const $name: Bound = Bound { key: $key, min: $min, max: $max, unit: $unit };)*
        /// Every bound, for the test that the schema and the loader agree at each.
        pub const ALL: &[Bound] = &[$($name),*];
    };
}

/// One year: the longest period of resyncs, stall checks and markers.
const YEAR_SECS: i64 = 365 * 24 * 3600;
/// One day.
const DAY_SECS: i64 = 86_400;
/// One hour, in milliseconds.
const HOUR_MS: i64 = 3_600_000;

bounds! {
    PAGE_SIZE = "kubernetes.page_size", 1, 100_000, "the objects per list page (e.g. 500)";
    RESYNC_SECS = "kubernetes.resync_secs", 0, YEAR_SECS, "seconds (0 = off)";
    WATCH_FAILURE_GRACE_SECS = "kubernetes.watch_failure_grace_secs", 0, DAY_SECS, "seconds (0 = off)";
    RESOURCE_RESYNC_SECS = "resources[].resync_secs", 0, YEAR_SECS, "seconds (0 = off)";
    QUEUE_CAPACITY = "delivery.queue_capacity", 1, 1_000_000, "a number of events (e.g. 10000)";
    MAX_IN_FLIGHT = "delivery.max_in_flight", 1, 100_000, "a number of events (e.g. 1000)";
    /// The longest delay between retries.
    RETRY_MAX_MS = "delivery.retry_max_ms", 1, HOUR_MS, "milliseconds (e.g. 30000)";
    /// Kubernetes kills a pod long before.
    SHUTDOWN_TIMEOUT_SECS = "delivery.shutdown_timeout_secs", 0, DAY_SECS, "seconds (e.g. 30)";
    STALL_TIMEOUT_SECS = "delivery.stall_timeout_secs", 0, YEAR_SECS, "seconds (0 = off)";
    STATE_MARKER_SECS = "delivery.state_marker_secs", 0, YEAR_SECS, "seconds (0 = off)";
    /// Far more than any machine deltaship runs on has cores.
    WORKER_THREADS = "runtime.worker_threads", 1, 1024, "a number of threads (e.g. 2)";
    /// The longest time acknowledged progress waits to be written.
    CHECKPOINT_INTERVAL_MS = "resume.interval_ms", 1, HOUR_MS, "milliseconds (e.g. 1000)";
    /// A Lease holds seconds as a 32-bit number.
    LEASE_DURATION_SECS = "leader_election.lease_duration_secs", 1, DAY_SECS, "seconds";
    RENEW_DEADLINE_SECS = "leader_election.renew_deadline_secs", 1, DAY_SECS, "seconds";
    RETRY_PERIOD_SECS = "leader_election.retry_period_secs", 1, DAY_SECS, "seconds";
    /// A connection is a file descriptor; more is a typo.
    MAX_CONNECTIONS = "http.max_connections", 1, 65_536, "connections (e.g. 256)";
    REQUEST_TIMEOUT_SECS = "http.request_timeout_secs", 1, 3_600, "seconds (e.g. 10)";
    PARTITIONS = "sink.create_topics.partitions", 1, 10_000, "partitions per topic (e.g. 3)";
    /// Kafka's replication factor is a 16-bit number.
    REPLICATION_FACTOR = "sink.create_topics.replication_factor", 1, i16::MAX as i64, "replicas per partition, at most the number of brokers";
    /// JetStream's largest replica count.
    REPLICAS = "sink.jetstream.replicas", 1, 5, "replicas";
    /// 0 lets the server choose (2 minutes).
    DUPLICATE_WINDOW_SECS = "sink.jetstream.duplicate_window_secs", 0, YEAR_SECS, "seconds (e.g. 120)";
    MAX_MSGS_PER_SUBJECT = "sink.jetstream.max_msgs_per_subject", 0, i64::MAX, "messages (0 = keep all)";
    ACK_TIMEOUT_SECS = "sink.jetstream.ack_timeout_secs", 1, 3_600, "seconds to wait for an ack (e.g. 10)";
    /// The longest an HTTP request may take.
    HTTP_TIMEOUT_MS = "sink.timeout_ms", 1, HOUR_MS, "milliseconds (e.g. 10000)";
    HTTP_MAX_REQUESTS = "sink.max_requests", 1, 65_536, "requests (e.g. 64)";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_out_of_range_names_the_option_the_value_and_the_range() {
        let mut out = Vec::new();
        QUEUE_CAPACITY.check(&mut out, "delivery", 1_000_000usize);
        RESOURCE_RESYNC_SECS.check(&mut out, "resources[2]", u64::MAX);
        REPLICAS.check(&mut out, "routes[1].sink.jetstream", 0usize);
        let shown: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "`resources[2].resync_secs`: 18446744073709551615 is out of range; fix: set seconds (0 = off) from 0 to 31536000",
                "`routes[1].sink.jetstream.replicas`: 0 is out of range; fix: set replicas from 1 to 5",
            ]
        );
    }

    #[test]
    fn every_option_is_bounded_once_and_every_range_is_not_empty() {
        let mut keys: Vec<&str> = ALL.iter().map(|b| b.key).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), ALL.len(), "an option bounded twice");
        assert!(ALL.iter().all(|b| b.min <= b.max), "{ALL:?}");
    }
}
