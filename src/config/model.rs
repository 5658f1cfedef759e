//! The configuration tree: the whole configuration and the sections without a file of
//! their own, each option with its unit, its default and, for a number, its range
//! (`bounds`); each section checks itself.

use std::net::SocketAddr;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::bounds;
use super::problem::{Problem, problem};
use super::redact::RedactionConfig;
use super::resource::{FilterConfig, ResourceConfig};
use super::resume::ResumeConfig;
use super::route::{DEFAULT_ROUTE, RouteConfig};
use super::sink::SinkConfig;

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
    pub routes: Vec<RouteConfig>,
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
    pub redaction: RedactionConfig,
    /// Checkpoints of what each route acknowledged, to start from after a restart.
    #[serde(default)]
    pub resume: ResumeConfig,
    /// Where the JSON Schemas of the event data (the repository's `schemas/events/`) are
    /// published, a URL ending in `/`: markers and reference events then carry the
    /// CloudEvents attribute `dataschema`, e.g.
    /// `https://schemas.example.com/deltaship/events/marker.schema.json`. Default: not set
    /// (no `dataschema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataschema_base: Option<String>,
}

impl Config {
    /// The routes events take: `routes`, or one route named `default` to `sink` (stdout
    /// when unset).
    pub fn effective_routes(&self) -> Vec<RouteConfig> {
        if !self.routes.is_empty() {
            return self.routes.clone();
        }
        vec![RouteConfig {
            name: DEFAULT_ROUTE.into(),
            sink: self.sink.clone().unwrap_or_default(),
            resources: Vec::new(),
            payload: None,
            format: None,
            filter: FilterConfig::default(),
        }]
    }
}

impl Config {
    /// The configuration with every secret replaced by `***`, for `print-config` and logs.
    pub fn masked(&self) -> Config {
        let mut c = self.clone();
        for sink in c.sink.iter_mut().chain(c.routes.iter_mut().map(|r| &mut r.sink)) {
            sink.mask();
        }
        c
    }
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
    #[schemars(transform = &bounds::LEASE_DURATION_SECS)]
    pub lease_duration_secs: u64,
    /// The leader stops publishing when it could not renew for this long, in seconds;
    /// shorter than the lease duration. Default: 10.
    #[serde(default = "default_renew_deadline_secs")]
    #[schemars(transform = &bounds::RENEW_DEADLINE_SECS)]
    pub renew_deadline_secs: u64,
    /// Interval of renewals and of acquisition attempts, in seconds. Default: 2.
    #[serde(default = "default_retry_period_secs")]
    #[schemars(transform = &bounds::RETRY_PERIOD_SECS)]
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

impl LeaderElectionConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        bounds::LEASE_DURATION_SECS.check(out, "leader_election", self.lease_duration_secs);
        bounds::RENEW_DEADLINE_SECS.check(out, "leader_election", self.renew_deadline_secs);
        bounds::RETRY_PERIOD_SECS.check(out, "leader_election", self.retry_period_secs);
        if !self.enabled {
            return;
        }
        if !super::names::is_dns_subdomain(&self.lease_name) {
            out.push(problem("leader_election.lease_name", format!("`{}` is not a valid name", self.lease_name), "use lowercase letters, digits, `-` and `.`"));
        }
        if !(self.retry_period_secs >= 1 && self.retry_period_secs < self.renew_deadline_secs && self.renew_deadline_secs < self.lease_duration_secs) {
            out.push(problem(
                "leader_election.renew_deadline_secs",
                format!(
                    "needs 1 <= retry_period_secs ({}) < renew_deadline_secs ({}) < lease_duration_secs ({})",
                    self.retry_period_secs, self.renew_deadline_secs, self.lease_duration_secs
                ),
                "e.g. 2, 10 and 15: the leader must give up before others may take over",
            ));
        }
    }
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
    #[schemars(transform = &bounds::PAGE_SIZE)]
    pub page_size: u32,
    /// Period of resyncs (every indexed object delivered again as `synced`, from the
    /// index, between markers with reason `resync`), in seconds, as client-go's
    /// `defaultResync`. 0 (the default) turns resyncs off. A resource's `resync_secs`
    /// overrides it.
    #[serde(default)]
    #[schemars(transform = &bounds::RESYNC_SECS)]
    pub resync_secs: u64,
    /// /readyz fails while a watch's errors (e.g. 403 after its RBAC was revoked, or its
    /// CRD deleted) have lasted this long without the watch working again, in seconds;
    /// 0 turns the check off. Default: 180.
    #[serde(default = "default_watch_failure_grace_secs")]
    #[schemars(transform = &bounds::WATCH_FAILURE_GRACE_SECS)]
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

impl KubernetesConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        // A missing kubeconfig is reported when the client starts (it may appear later, e.g.
        // in a shared volume), but one that is not a regular file (a FIFO) would block start-up.
        if let Some(path) = &self.kubeconfig
            && std::fs::metadata(path).is_ok_and(|m| !m.is_file())
        {
            out.push(problem("kubernetes.kubeconfig", format!("{} is not a regular file", path.display()), "give the path of a kubeconfig file"));
        }
        bounds::PAGE_SIZE.check(out, "kubernetes", self.page_size);
        bounds::RESYNC_SECS.check(out, "kubernetes", self.resync_secs);
        bounds::WATCH_FAILURE_GRACE_SECS.check(out, "kubernetes", self.watch_failure_grace_secs);
    }
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// Events waiting between the watches and the sink, in events. When full, reading from
    /// the watches pauses. Each holds its object's bytes and about 1 KB more while it
    /// waits. Default: 2000.
    #[serde(default = "default_queue_capacity")]
    #[schemars(transform = &bounds::QUEUE_CAPACITY)]
    pub queue_capacity: usize,
    /// Events sent and not yet acknowledged by the sink, in events (one per object at a
    /// time). Default: 1000.
    #[serde(default = "default_max_in_flight")]
    #[schemars(transform = &bounds::MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// First delay before retrying a failed send, in milliseconds. Doubles per attempt,
    /// with jitter. Default: 100.
    #[serde(default = "default_retry_initial_ms")]
    pub retry_initial_ms: u64,
    /// Longest delay between retries, in milliseconds. Default: 30000.
    #[serde(default = "default_retry_max_ms")]
    #[schemars(transform = &bounds::RETRY_MAX_MS)]
    pub retry_max_ms: u64,
    /// Time allowed on SIGTERM or SIGINT to send what is queued, in seconds. Default: 30.
    #[serde(default = "default_shutdown_timeout_secs")]
    #[schemars(transform = &bounds::SHUTDOWN_TIMEOUT_SECS)]
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
    #[schemars(transform = &bounds::STALL_TIMEOUT_SECS)]
    pub stall_timeout_secs: u64,
    /// How often each watch ships a state marker between syncs: a `sync.started` and
    /// `sync.completed` pair with reason `state` and no objects, whose `completed` carries
    /// the count and digest of the objects consumers hold, so that they can check their
    /// state without waiting for a sync. In seconds; 0 turns them off. Default: 300.
    #[serde(default = "default_state_marker_secs")]
    #[schemars(transform = &bounds::STATE_MARKER_SECS)]
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

impl DeliveryConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        bounds::QUEUE_CAPACITY.check(out, "delivery", self.queue_capacity);
        bounds::MAX_IN_FLIGHT.check(out, "delivery", self.max_in_flight);
        bounds::RETRY_MAX_MS.check(out, "delivery", self.retry_max_ms);
        bounds::SHUTDOWN_TIMEOUT_SECS.check(out, "delivery", self.shutdown_timeout_secs);
        bounds::STALL_TIMEOUT_SECS.check(out, "delivery", self.stall_timeout_secs);
        bounds::STATE_MARKER_SECS.check(out, "delivery", self.state_marker_secs);
        if self.retry_initial_ms == 0 || self.retry_initial_ms > self.retry_max_ms {
            out.push(problem(
                "delivery.retry_initial_ms",
                format!("must be between 1 and delivery.retry_max_ms ({})", self.retry_max_ms),
                "lower retry_initial_ms or raise retry_max_ms",
            ));
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address of /metrics, /healthz and /readyz, IP:PORT. Default: `0.0.0.0:9090`.
    #[serde(default = "default_listen", deserialize_with = "listen_address")]
    pub listen: SocketAddr,
    /// Connections served at once. At the limit, a new connection closes the
    /// one that has waited longest for a request. Default: 256.
    #[serde(default = "default_max_connections")]
    #[schemars(transform = &bounds::MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// A connection is closed when a request has not arrived completely this long after it
    /// was opened or after its previous response (the header read and keep-alive idle
    /// timeout), in seconds. Default: 10.
    #[serde(default = "default_request_timeout_secs")]
    #[schemars(transform = &bounds::REQUEST_TIMEOUT_SECS)]
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

impl HttpConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        bounds::MAX_CONNECTIONS.check(out, "http", self.max_connections);
        bounds::REQUEST_TIMEOUT_SECS.check(out, "http", self.request_timeout_secs);
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 9090))
}

/// `http.listen`: serde's own refusal would say neither the value nor the fix.
fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    super::parse::parse_str(d, "an address IP:PORT, e.g. `0.0.0.0:9090`", |v| {
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

    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        let fix =
            "use a level (`error`, `warn` or `warning`, `info`, `debug`, `trace`, `off`) or directives `target=level` such as `deltaship=debug,kube=info`";
        match self.filter().map(|f| tracing_subscriber::EnvFilter::try_new(f).map_err(|e| e.to_string())) {
            Err(directive) => out.push(problem(
                "log.level",
                format!(
                    "`{}` is not a log filter: `{directive}` is not a level or `target=level` (valid levels: {}); a bare word would be read as a target, silencing every other line, ERROR included",
                    self.level,
                    LOG_LEVELS.join(", ")
                ),
                fix,
            )),
            Ok(Err(e)) => out.push(problem("log.level", format!("`{}` is not a log filter: {e}", self.level), fix)),
            Ok(Ok(_)) => {}
        }
    }
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
    /// `deltaship` is busy all the time. Default: 1.
    #[serde(default = "default_worker_threads")]
    #[schemars(transform = &bounds::WORKER_THREADS)]
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

impl RuntimeConfig {
    pub(super) fn validate(&self, out: &mut Vec<Problem>) {
        bounds::WORKER_THREADS.check(out, "runtime", self.worker_threads);
    }
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
}
