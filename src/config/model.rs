//! The configuration tree: every option, its unit and its default.

use std::net::SocketAddr;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::model::SyncMode;

/// The whole configuration of one deltaship process.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Name of the watched cluster. Appears in `source`, in ids, in the `cluster` extension
    /// and in default topic names. Lowercase letters, digits, `-` and `.`. Default: `local`.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// How to reach the Kubernetes API server.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// The resources to watch. At least one.
    #[serde(default)]
    pub resources: Vec<ResourceConfig>,
    /// Where events go, when they go to one place. Default: stdout. Not together with
    /// `routes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<SinkConfig>,
    /// Several sinks at once, each with its own resources, filter and shape, fed by the
    /// same watches. Not together with `sink`. Default: none (one route to `sink`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<super::RouteConfig>,
    /// Queues, concurrency and retries between the watches and the sink.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// The HTTP server for /metrics, /healthz and /readyz.
    #[serde(default)]
    pub http: HttpConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// The threads that run deltaship's own work.
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// Leader election for several replicas: only the leader publishes.
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
    /// Keyed digests of redacted values (Secret values, `hash` field rules).
    #[serde(default)]
    pub redaction: super::RedactionConfig,
    /// Checkpoints of what each route acknowledged, to start from after a restart.
    #[serde(default)]
    pub resume: super::ResumeConfig,
    /// Where the JSON Schemas of the event data (the repository's `schemas/events/`) are
    /// published, a URL ending in `/`: markers and reference events then carry the
    /// CloudEvents attribute `dataschema`, e.g.
    /// `https://schemas.example.com/deltaship/events/marker.schema.json`. Default: not set
    /// (no `dataschema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataschema_base: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaderElectionConfig {
    /// Elect a leader among replicas with a Lease; only the leader watches and publishes.
    /// Default: false (a single replica publishes).
    #[serde(default)]
    pub enabled: bool,
    /// Name of the coordination.k8s.io Lease. Default: `deltaship`.
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    /// Namespace of the Lease. Default: `$POD_NAMESPACE`, else `default`.
    pub namespace: Option<String>,
    /// This replica's identity in the Lease. Default: `$HOSTNAME` plus a random suffix.
    pub identity: Option<String>,
    /// How long a lease is valid after its last renewal, in seconds. Default: 15.
    #[serde(default = "default_lease_duration_secs")]
    pub lease_duration_secs: u64,
    /// The leader stops publishing when it could not renew for this long, in seconds;
    /// shorter than the lease duration. Default: 10.
    #[serde(default = "default_renew_deadline_secs")]
    pub renew_deadline_secs: u64,
    /// Interval of renewals and of acquisition attempts, in seconds. Default: 2.
    #[serde(default = "default_retry_period_secs")]
    pub retry_period_secs: u64,
    /// Fence a deposed leader at the brokers: a new leader claims each Kafka and JetStream
    /// route before it ships anything (Kafka: a transactional producer whose id the replicas
    /// share; JetStream: a fence record every later publish expects to be the last on its
    /// subject), so a leader frozen past its lease and thawed delivers nothing more. Kafka
    /// consumers must then read with `isolation.level=read_committed`. Default: true.
    #[serde(default = "default_true")]
    pub fence: bool,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            enabled: false,
            lease_name: default_lease_name(),
            namespace: None,
            identity: None,
            lease_duration_secs: default_lease_duration_secs(),
            renew_deadline_secs: default_renew_deadline_secs(),
            retry_period_secs: default_retry_period_secs(),
            fence: true,
        }
    }
}

fn default_lease_name() -> String {
    "deltaship".into()
}
fn default_lease_duration_secs() -> u64 {
    15
}
fn default_renew_deadline_secs() -> u64 {
    10
}
fn default_retry_period_secs() -> u64 {
    2
}

fn default_cluster() -> String {
    "local".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Path of a kubeconfig file. Default: `$KUBECONFIG`, then `~/.kube/config`, then the
    /// in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use. Default: its current context.
    pub context: Option<String>,
    /// Use streaming lists (`sendInitialEvents`, WatchList) for the initial list instead of
    /// paged lists. Needs API server support. Default: false.
    #[serde(default)]
    pub streaming_lists: bool,
    /// Page size of initial lists and relists, in objects. Default: 500 (client-go's pager).
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Period of resyncs (every indexed object delivered again as `synced`, from the
    /// index, between markers with reason `resync`), in seconds, as client-go's
    /// `defaultResync`. 0 (the default) turns resyncs off. A resource's `resync_secs`
    /// overrides it.
    #[serde(default)]
    pub resync_secs: u64,
    /// /readyz fails while a watch's errors (e.g. 403 after its RBAC was revoked, or its
    /// CRD deleted) have lasted this long without the watch working again, in seconds;
    /// 0 turns the check off; at most 86400. Default: 180.
    #[serde(default = "default_watch_failure_grace_secs")]
    pub watch_failure_grace_secs: u64,
}

fn default_watch_failure_grace_secs() -> u64 {
    180
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            kubeconfig: None,
            context: None,
            streaming_lists: false,
            page_size: default_page_size(),
            resync_secs: 0,
            watch_failure_grace_secs: default_watch_failure_grace_secs(),
        }
    }
}

fn default_page_size() -> u32 {
    500
}

/// One watched resource, with its watch scope and how its events are shaped.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Namespaces to watch, one watch each. Left out (the default): all namespaces with one
    /// watch; an empty list is refused (omit the key to watch every namespace). Must be
    /// left out for cluster-scoped kinds.
    #[serde(default, deserialize_with = "listed_namespaces", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1))]
    pub namespaces: Vec<String>,
    /// Label selector, e.g. `app=web,tier!=cache`. Default: none.
    pub label_selector: Option<String>,
    /// Field selector, e.g. `metadata.name=foo`. Default: none.
    pub field_selector: Option<String>,
    /// What `data` carries: `object` (default), `reference`, or `patch` (updates carry an
    /// RFC 6902 JSON Patch from the previously shipped content; the index then keeps each
    /// object's shipped content).
    #[serde(default)]
    pub payload: PayloadMode,
    /// How a relist (after a watch could not resume) is shipped: `diff` (default: only
    /// differences against the index) or `full` (every object as `synced`, plus deletes).
    #[serde(default)]
    pub relist: SyncMode,
    /// Resync period of this resource in seconds, overriding `kubernetes.resync_secs`;
    /// 0 turns resyncs off for it. The index then keeps each object's shipped content.
    pub resync_secs: Option<u64>,
    /// Redact before shipping: drop managedFields, digest Secret values and a Secret's
    /// last-applied annotation. Default: true. Turning it off ships Secret values.
    #[serde(default = "default_true")]
    pub redact: bool,
    /// Field rules applied before shipping, whatever `redact` says: `{ path, action }`,
    /// `path` a JSON pointer (`*` for every item or member), `action` `drop`, `mask` or
    /// `hash`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_fields: Vec<super::RedactField>,
    /// JSON pointers left out of the change fingerprint: an update that only touches
    /// these is skipped as a no-op. `/metadata/resourceVersion` and
    /// `/metadata/managedFields` are always ignored. Default: none.
    #[serde(default)]
    pub ignore_fields: Vec<String>,
    /// Topic (Kafka) for this resource, overriding `sink.topic_template`. Same placeholders.
    pub topic: Option<super::Template>,
    /// Subject (NATS) of this resource's objects, overriding `sink.subject_template`.
    pub subject: Option<super::Template>,
    /// The shape of object events: `deltaship` (default) or `knative` (as Knative's
    /// ApiServerSource: types `dev.knative.apiserver.resource.add|update|delete`, or
    /// `dev.knative.apiserver.ref.*` with an ObjectReference as data when `payload` is
    /// `reference`; `source` = the API server URL, `subject` = the object's API path), so
    /// existing Knative Triggers and functions work unchanged. Markers keep deltaship's shape.
    #[serde(default)]
    pub format: EventFormat,
    /// Which changes are shipped (default: all). For triggers and audits of selected
    /// changes; a filtered stream cannot rebuild state. Filtered changes are counted in
    /// `deltaship_filtered_events_total` and still tracked by the index.
    #[serde(default)]
    pub filter: FilterConfig,
    /// Start this resource's watches from the routes' checkpoints (`resume.enabled`
    /// on). False: every start is a full initial sync for it. Default: true.
    #[serde(default = "default_true")]
    pub resume: bool,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PayloadMode {
    /// The whole (redacted) object.
    #[default]
    Object,
    /// apiVersion, kind, namespace, name, uid and resourceVersion only.
    Reference,
    /// Like `object`, but `updated` events carry a JSON Patch (RFC 6902) from the previous
    /// event's content, with `datacontenttype: application/json-patch+json`.
    Patch,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventFormat {
    #[default]
    Deltaship,
    Knative,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// Ship only these object event types (`added`, `updated`, `deleted`, `synced`).
    /// Markers are always shipped. Default: all.
    pub types: Option<Vec<crate::model::ChangeType>>,
    /// Ship an `updated` only when one of these JSON pointers changed, e.g.
    /// `/spec/template` of a Deployment (so status churn never wakes a function).
    #[serde(default)]
    pub changed_paths: Vec<String>,
    /// Ship an `updated` only when `metadata.generation` changed (a spec change).
    #[serde(default)]
    pub generation_changed: bool,
}

/// The sink, chosen by `type`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    /// Structured CloudEvents as JSON lines on standard output.
    // A struct variant, so that unknown keys beside `type` are refused (serde ignores them
    // for a unit variant).
    Stdout {},
    /// Apache Kafka.
    Kafka(Box<super::KafkaConfig>),
    /// NATS, core or JetStream.
    Nats(Box<super::NatsConfig>),
    /// HTTP: each event POSTed to a URL (CloudEvents HTTP binding), e.g. a Knative Broker.
    Http(Box<super::HttpSinkConfig>),
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig::Stdout {}
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    #[default]
    Binary,
    Structured,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// Events waiting between the watches and the sink, in events. When full, reading from
    /// the watches pauses. Each holds its object's bytes and about 1 KB more while it
    /// waits. Default: 2000.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// Events sent and not yet acknowledged by the sink, in events (one per object at a
    /// time). Default: 1000.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// First delay before retrying a failed send, in milliseconds. Doubles per attempt,
    /// with jitter. Default: 100.
    #[serde(default = "default_retry_initial_ms")]
    pub retry_initial_ms: u64,
    /// Longest delay between retries, in milliseconds. Default: 30000.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
    /// Time allowed on SIGTERM or SIGINT to send what is queued, in seconds. Default: 30.
    #[serde(default = "default_shutdown_timeout_secs")]
    pub shutdown_timeout_secs: u64,
    /// An event larger than the sink accepts: `reference` (default: shipped as a reference
    /// event with the extension `truncated = true`), `skip` (dropped), or `fail` (the
    /// bridge stops). Counted and logged in every case.
    #[serde(default)]
    pub oversize: OversizePolicy,
    /// /healthz fails when events have waited this long without any acknowledgement from
    /// the sink while the sink answered its probes (a stuck client; the restart resumes from
    /// the checkpoint), in seconds; 0 turns the check off. A sink that does not answer makes
    /// /readyz fail, not /healthz, and the wait starts again when it answers. Default: 300.
    #[serde(default = "default_stall_timeout_secs")]
    pub stall_timeout_secs: u64,
    /// How often each watch ships a state marker between syncs: a `sync.started` and
    /// `sync.completed` pair with reason `state` and no objects, whose `completed` carries
    /// the count and digest of the objects consumers hold, so that they can check their
    /// state without waiting for a sync. In seconds; 0 turns them off. Default: 300.
    #[serde(default = "default_state_marker_secs")]
    pub state_marker_secs: u64,
}

fn default_stall_timeout_secs() -> u64 {
    300
}

fn default_state_marker_secs() -> u64 {
    300
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OversizePolicy {
    #[default]
    Reference,
    Skip,
    Fail,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            queue_capacity: default_queue_capacity(),
            max_in_flight: default_max_in_flight(),
            retry_initial_ms: default_retry_initial_ms(),
            retry_max_ms: default_retry_max_ms(),
            shutdown_timeout_secs: default_shutdown_timeout_secs(),
            oversize: OversizePolicy::default(),
            stall_timeout_secs: default_stall_timeout_secs(),
            state_marker_secs: default_state_marker_secs(),
        }
    }
}

fn default_queue_capacity() -> usize {
    2_000
}
fn default_max_in_flight() -> usize {
    1_000
}
fn default_retry_initial_ms() -> u64 {
    100
}
fn default_retry_max_ms() -> u64 {
    30_000
}
fn default_shutdown_timeout_secs() -> u64 {
    30
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address of /metrics, /healthz and /readyz, IP:PORT. Default: `0.0.0.0:9090`.
    #[serde(default = "default_listen", deserialize_with = "listen_address")]
    pub listen: SocketAddr,
    /// Connections served at once, 1 to 65536. At the limit, a new connection closes the
    /// one that has waited longest for a request. Default: 256.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A connection is closed when a request has not arrived completely this long after it
    /// was opened or after its previous response (the header read and keep-alive idle
    /// timeout), in seconds, 1 to 3600. Default: 10.
    #[serde(default = "default_request_timeout_secs")]
    pub request_timeout_secs: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig { listen: default_listen(), max_connections: default_max_connections(), request_timeout_secs: default_request_timeout_secs() }
    }
}

fn default_max_connections() -> usize {
    256
}
fn default_request_timeout_secs() -> u64 {
    10
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 9090))
}

/// `http.listen`: serde's own refusal would say neither the value nor the fix.
fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    super::parse_str(d, "an address IP:PORT, e.g. `0.0.0.0:9090`", |v| {
        v.parse().map_err(|_| (format!("`{v}` is not an address"), "use IP:PORT, e.g. `0.0.0.0:9090`".into()))
    })
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (default) or `json`.
    #[serde(default)]
    pub format: LogFormat,
    /// A level (`off`, `error`, `warn` or `warning`, `info`, `debug`, `trace`) or a tracing
    /// filter of `target=level` directives, e.g. `deltaship=debug,kube=info`. `RUST_LOG`
    /// wins when set. Default: `info`.
    #[serde(default = "default_level")]
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { format: LogFormat::default(), level: default_level() }
    }
}

/// The level names a directive may end with, as tracing reads them (any case).
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

impl LogConfig {
    /// `level` as a tracing filter, `warning` read as `warn`; Err names the directive whose
    /// level is none of `LOG_LEVELS`. tracing reads a bare word as a target with every level
    /// enabled, so `warning` or a typo such as `inf` would log nothing but that target's
    /// lines, ERROR included: a bare word must be a level.
    pub fn filter(&self) -> Result<String, String> {
        let level = |word: &str| {
            let lower = word.trim().to_ascii_lowercase();
            let lower = if lower == "warning" { "warn".to_string() } else { lower };
            LOG_LEVELS.contains(&lower.as_str()).then_some(lower)
        };
        let mut directives = Vec::new();
        for directive in self.level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let normalized = match directive.rsplit_once('=') {
                Some((target, word)) => level(word).map(|l| format!("{target}={l}")),
                None => level(directive),
            };
            directives.push(normalized.ok_or_else(|| directive.to_string())?);
        }
        Ok(directives.join(","))
    }
}

/// `namespaces` as listed; an empty list is refused: it looks like "none" and would watch
/// every namespace, which leaving the key out says.
fn listed_namespaces<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let listed = Vec::<String>::deserialize(d)?;
    if listed.is_empty() {
        return Err(serde::de::Error::custom(
            "is an empty list, which would watch every namespace; fix: omit the key to watch every namespace, or list the namespaces to watch",
        ));
    }
    Ok(listed)
}

fn default_level() -> String {
    "info".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Threads that run the watches, the stages and the sends (the Kafka client has threads
    /// of its own besides, and blocking work runs apart). One keeps up with thousands of
    /// events a second and wakes the fewest threads per event; raise it when one core of
    /// `deltaship` is busy all the time. 1 to 1024. Default: 1.
    #[serde(default = "default_worker_threads")]
    pub worker_threads: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig { worker_threads: default_worker_threads() }
    }
}

fn default_worker_threads() -> usize {
    1
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(level: &str) -> Result<String, String> {
        LogConfig { format: LogFormat::default(), level: level.into() }.filter()
    }

    #[test]
    fn log_levels_take_the_common_alias_and_a_bare_word_must_be_a_level() {
        assert_eq!(filter("warning").unwrap(), "warn");
        assert_eq!(filter("WARN").unwrap(), "warn");
        assert_eq!(filter("info, deltaship=Warning,kube=debug").unwrap(), "info,deltaship=warn,kube=debug");
        // Before, tracing read these as targets: every line, ERROR included, was silenced.
        assert_eq!(filter("inf").unwrap_err(), "inf");
        assert_eq!(filter("info,deltaship").unwrap_err(), "deltaship");
        assert_eq!(filter("deltaship=loud").unwrap_err(), "deltaship=loud");
    }

    #[test]
    fn an_empty_namespace_list_is_refused_and_a_missing_one_watches_all() {
        let parse = |v: serde_json::Value| serde_json::from_value::<ResourceConfig>(v);
        let e = parse(serde_json::json!({"version": "v1", "kind": "ConfigMap", "namespaces": []})).unwrap_err().to_string();
        assert!(e.contains("is an empty list") && e.contains("fix: omit the key to watch every namespace"), "{e}");
        let all = parse(serde_json::json!({"version": "v1", "kind": "ConfigMap"})).unwrap();
        assert!(all.namespaces.is_empty());
        assert!(serde_json::to_value(&all).unwrap().get("namespaces").is_none(), "printed as it is read back");
        assert_eq!(parse(serde_json::json!({"version": "v1", "kind": "ConfigMap", "namespaces": ["a"]})).unwrap().namespaces, ["a"]);
    }
}
