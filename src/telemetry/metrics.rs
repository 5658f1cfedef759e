//! Metric names (`deltaship_<noun>_<unit>[_total]`), their label keys and their
//! descriptions. Labels come from bounded sets only: resource, type, reason, sink, route,
//! error_kind, and the watch_namespace of a watch (a namespace of the config's `namespaces`,
//! empty for a watch of every namespace or of a cluster-scoped kind). The owners of the
//! series are in `telemetry/meters/`.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

pub const EVENTS: &str = "deltaship_events_total";
pub const DEDUPE_SKIPS: &str = "deltaship_dedupe_skips_total";
pub const STALE_EVENTS: &str = "deltaship_stale_events_total";
pub const FILTERED: &str = "deltaship_filtered_events_total";
pub const SYNCS: &str = "deltaship_syncs_total";
pub const RELISTS: &str = "deltaship_relists_total";
pub const RESYNCS_DEFERRED: &str = "deltaship_resyncs_deferred_total";
pub const WATCH_ERRORS: &str = "deltaship_watch_errors_total";
pub const WATCH_STALLS: &str = "deltaship_watch_stalls_total";
pub const BAD_OBJECTS: &str = "deltaship_bad_objects_total";
pub const REDACTED_FIELDS: &str = "deltaship_redacted_fields_total";
pub const DROPPED: &str = "deltaship_events_dropped_total";
pub const TRUNCATED: &str = "deltaship_events_truncated_total";
pub const SINK_ERRORS: &str = "deltaship_sink_errors_total";
pub const SINK_RECOVERIES: &str = "deltaship_sink_recoveries_total";
pub const SINK_DOUBTFUL: &str = "deltaship_sink_doubtful_records_total";
pub const SINK_TRANSACTIONS: &str = "deltaship_sink_transactions_total";
pub const PUBLISH_LATENCY: &str = "deltaship_publish_latency_seconds";
pub const IN_FLIGHT: &str = "deltaship_in_flight_events";
pub const HELD: &str = "deltaship_held_events";
pub const QUEUED: &str = "deltaship_queued_events";
pub const INDEXED: &str = "deltaship_indexed_objects";
pub const READY: &str = "deltaship_ready";
pub const SINK_REACHABLE: &str = "deltaship_sink_reachable";
pub const LEADER: &str = "deltaship_leader";
pub const ROUTE_HELD_ELSEWHERE: &str = "deltaship_route_held_elsewhere";
pub const LEASE_ERRORS: &str = "deltaship_lease_errors_total";
pub const RESUME_FALLBACKS: &str = "deltaship_resume_fallbacks_total";
pub const RESUME_TAILS: &str = "deltaship_resume_tail_reads_total";
pub const RESUME_TAIL_IGNORED: &str = "deltaship_resume_tail_records_ignored_total";
pub const CHECKPOINT_WRITES: &str = "deltaship_checkpoint_writes_total";
pub const CHECKPOINT_RECORDS: &str = "deltaship_checkpoint_records_total";
pub const CHECKPOINT_PENDING: &str = "deltaship_checkpoint_pending_events";
pub const CHECKPOINT_UNWRITTEN: &str = "deltaship_checkpoint_unwritten_records";
pub const BUILD_INFO: &str = "deltaship_build_info";
pub const WATCH_LAST_EVENT: &str = "deltaship_watch_last_event_timestamp_seconds";
pub const WATCH_LAST_SYNC: &str = "deltaship_watch_last_sync_timestamp_seconds";
pub const EVENT_LAG: &str = "deltaship_event_lag_seconds";
pub const KUBE_REQUESTS: &str = "deltaship_kube_requests_total";

/// The label keys.
pub mod label {
    pub const RESOURCE: &str = "resource";
    pub const TYPE: &str = "type";
    pub const ROUTE: &str = "route";
    pub const SINK: &str = "sink";
    pub const REASON: &str = "reason";
    pub const ERROR_KIND: &str = "error_kind";
    pub const OUTCOME: &str = "outcome";
    pub const ACTION: &str = "action";
    /// The namespace of `namespaces` a watch covers (not `namespace`, which Prometheus
    /// gives the pod's own).
    pub const WATCH_NAMESPACE: &str = "watch_namespace";
    pub const VERB: &str = "verb";
    pub const CODE: &str = "code";
    pub const VERSION: &str = "version";
    pub const REVISION: &str = "revision";
}

/// Bucket bounds of the publish latency histogram, in seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// Bucket bounds of the lag histogram, in seconds: from a few milliseconds (a live event on
/// an idle bridge) to minutes (an initial sync of a large cluster, a sink outage).
pub const LAG_BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// The commit deltaship was built from (`build.rs`), `unknown` outside a git checkout.
pub const REVISION: &str = env!("BUILD_REVISION");

pub fn describe() {
    describe_gauge!(BUILD_INFO, "Always 1; the labels name the build: version and revision (the commit).");
    describe_gauge!(
        WATCH_LAST_EVENT,
        Unit::Seconds,
        "Unix time of the last thing a watch received from the API server (an object of a list, a change, a bookmark), by resource and watch_namespace."
    );
    describe_gauge!(
        WATCH_LAST_SYNC,
        Unit::Seconds,
        "Unix time a watch last completed a sync (initial, relist, resync, resume), by resource and watch_namespace."
    );
    describe_histogram!(EVENT_LAG, Unit::Seconds, "Time from the watch event's arrival to the sink's acknowledgement of the event built from it, by route.");
    describe_counter!(
        KUBE_REQUESTS,
        "Requests to the API server, by verb (discovery, list, watch, get, create, update, patch, delete) and code (the HTTP status, or error when no answer came; 429 means throttled)."
    );
    describe_counter!(EVENTS, "Events acknowledged by the sink, by resource, type and route.");
    describe_counter!(
        DEDUPE_SKIPS,
        "Updates not shipped because nothing visible changed or consumers already received them, by resource and reason (resource_version, fingerprint, delivered)."
    );
    describe_counter!(
        STALE_EVENTS,
        "Object events not shipped because they are older than the object's state already shipped (a lagging API server), by resource."
    );
    describe_counter!(
        RESYNCS_DEFERRED,
        "Periodic resyncs not run because the index held objects whose shipped content it had not seen since a checkpoint (a list supplies it), by resource."
    );
    describe_counter!(FILTERED, "Object events not shipped because of a filter (the resource's or the route's), by resource, type and route.");
    describe_counter!(SYNCS, "Completed syncs, by resource and reason (initial, relist, resync, resume), and state markers (state).");
    describe_counter!(
        RESUME_FALLBACKS,
        "Watches that started with a full initial sync instead of resuming from their routes' checkpoints, by resource and reason (missing, corrupt, foreign, incomplete, unreadable, no_store, bad_version, ahead, other_cluster, unverified, disabled, several_routes, rewound, unproven)."
    );
    describe_counter!(
        RESUME_TAIL_IGNORED,
        "Records of a log's tail not taken as delivered at start-up, by resource and reason (ahead: a resourceVersion past the API server's current one, never written by this cluster's bridge)."
    );
    describe_counter!(
        RESUME_TAILS,
        "Reads, by a watch resuming from a checkpoint, of what its log stored after the checkpoint, by resource and outcome (read; failed or untracked: the watch resumes from the checkpoint alone)."
    );
    describe_counter!(CHECKPOINT_WRITES, "Writes of acknowledged progress to the route's checkpoint store, by route and outcome (ok, failed).");
    describe_counter!(CHECKPOINT_RECORDS, "Checkpoint records written, by route.");
    describe_gauge!(CHECKPOINT_PENDING, "Events of the route not yet acknowledged, so not yet in its checkpoint, by route.");
    describe_gauge!(CHECKPOINT_UNWRITTEN, "Checkpoint records acknowledged and not yet written to the route's store, by route.");
    describe_counter!(RELISTS, "Relists after a watch could not resume (e.g. 410 Gone), by resource.");
    describe_counter!(WATCH_ERRORS, "Watch errors (each followed by a backoff and a restart of the watch), by resource and error_kind.");
    describe_counter!(WATCH_STALLS, "Watches given up and listed again while they looked connected, by resource and reason (silent, ahead, too_large).");
    describe_counter!(BAD_OBJECTS, "Objects that could not be decoded and were skipped, by resource and reason.");
    describe_counter!(REDACTED_FIELDS, "Fields redacted by the resource's redact_fields rules, by resource and action (drop, mask, hash).");
    describe_counter!(DROPPED, "Events the sink refused and that were skipped by policy, by resource, reason and route.");
    describe_counter!(TRUNCATED, "Events too large for the sink, shipped as truncated references, by resource and route.");
    describe_counter!(SINK_ERRORS, "Failed sends (retried or not), by sink, route and error_kind.");
    describe_counter!(
        SINK_RECOVERIES,
        "Sink clients replaced because they held events without any report (on a fenced Kafka route: without their transaction's outcome) while the brokers answered a new client, by sink and route."
    );
    describe_counter!(
        SINK_DOUBTFUL,
        "Records whose delivery report left open whether the broker wrote them, looked for in the log before a retry, by sink and outcome (written: not sent again; absent: sent again)."
    );
    describe_counter!(
        SINK_TRANSACTIONS,
        "Transactions of a fenced Kafka route ended, by sink, route and outcome (committed; aborted: its records are sent again; failed: the producer was fenced or failed for good)."
    );
    describe_histogram!(PUBLISH_LATENCY, Unit::Seconds, "Time from send to the sink's acknowledgement, by sink and route.");
    describe_gauge!(IN_FLIGHT, "Events sent and not yet acknowledged, by route.");
    describe_gauge!(HELD, "Events waiting behind an earlier event of the same object, by route.");
    describe_gauge!(QUEUED, "Events queued between the watches and the route's sink, by route.");
    describe_gauge!(INDEXED, "Objects in the index, by resource and watch_namespace.");
    describe_counter!(
        LEASE_ERRORS,
        "Failed Lease API calls of leader election, retried, by error_kind (throttled, server_error, timeout, connection, rejected)."
    );
    describe_gauge!(LEADER, "With leader election: 1 while this replica leads, 0 while it stands by.");
    describe_gauge!(
        ROUTE_HELD_ELSEWHERE,
        "1 while this start does not lead the route because another deployment with another configuration holds it, by route."
    );
    describe_gauge!(READY, "1 when every route delivered its initial syncs and its sink is reachable.");
    describe_gauge!(SINK_REACHABLE, "1 while the route's sink answers probes, by route.");
}
