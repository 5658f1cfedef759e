//! Start-up validation of a loaded configuration: each problem names its key and the fix.

use std::collections::HashSet;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::{
    Config, HttpSinkConfig, K_CE_OVERRIDES, K_SINK, KafkaConfig, NatsConfig, SinkConfig, Template, ce_overrides, has_userinfo, mask_urls, selector_matches,
};

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `resources[1].namespaces[0]`.
    pub key: String,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}; fix: {}", self.key, self.problem, self.fix)
    }
}

pub(super) fn problem(key: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) -> Problem {
    Problem { key: key.into(), problem: problem.into(), fix: fix.into() }
}

/// The allowed range of every number in the configuration, documented on each field and in
/// docs/reference/configuration.md. Larger values are mistakes that would overflow a timer (tokio panics past
/// its limits) or reach a server as a negative number.
pub mod ranges {
    use std::ops::RangeInclusive;

    /// One year: the longest period of resyncs and stall checks.
    pub const YEAR_SECS: u64 = 365 * 24 * 3600;
    pub const PAGE_SIZE: RangeInclusive<u32> = 1..=100_000;
    pub const RESYNC_SECS: RangeInclusive<u64> = 0..=YEAR_SECS;
    /// One day.
    pub const WATCH_FAILURE_GRACE_SECS: RangeInclusive<u64> = 0..=86_400;
    /// A connection is a file descriptor; more is a typo.
    pub const MAX_CONNECTIONS: RangeInclusive<usize> = 1..=65_536;
    /// One hour.
    pub const REQUEST_TIMEOUT_SECS: RangeInclusive<u64> = 1..=3_600;
    pub const QUEUE_CAPACITY: RangeInclusive<usize> = 1..=1_000_000;
    pub const MAX_IN_FLIGHT: RangeInclusive<usize> = 1..=100_000;
    /// Far more than any machine deltaship runs on has cores.
    pub const WORKER_THREADS: RangeInclusive<usize> = 1..=1024;
    /// One hour: the longest delay between retries.
    pub const RETRY_MAX_MS: RangeInclusive<u64> = 1..=3_600_000;
    /// One day: Kubernetes kills a pod long before.
    pub const SHUTDOWN_TIMEOUT_SECS: RangeInclusive<u64> = 0..=86_400;
    pub const STALL_TIMEOUT_SECS: RangeInclusive<u64> = 0..=YEAR_SECS;
    pub const STATE_MARKER_SECS: RangeInclusive<u64> = 0..=YEAR_SECS;
    /// One hour: the longest time acknowledged progress waits to be written.
    pub const CHECKPOINT_INTERVAL_MS: RangeInclusive<u64> = 1..=3_600_000;
    /// One day; a Lease holds seconds as a 32-bit number.
    pub const LEASE_SECS: RangeInclusive<u64> = 1..=86_400;
    pub const PARTITIONS: RangeInclusive<i32> = 1..=10_000;
    /// Kafka's replication factor is a 16-bit number.
    pub const REPLICATION_FACTOR: RangeInclusive<i32> = 1..=i16::MAX as i32;
    /// JetStream's largest replica count.
    pub const REPLICAS: RangeInclusive<usize> = 1..=5;
    /// 0 lets the server choose (2 minutes).
    pub const DUPLICATE_WINDOW_SECS: RangeInclusive<u64> = 0..=YEAR_SECS;
    pub const MAX_MSGS_PER_SUBJECT: RangeInclusive<i64> = 0..=i64::MAX;
    /// One hour.
    pub const ACK_TIMEOUT_SECS: RangeInclusive<u64> = 1..=3_600;
    /// One hour: the longest an HTTP request may take.
    pub const HTTP_TIMEOUT_MS: RangeInclusive<u64> = 1..=3_600_000;
    pub const HTTP_MAX_REQUESTS: RangeInclusive<usize> = 1..=65_536;
}

/// `value` within `range`, else a problem naming `key`, the range and the unit.
fn check_range<T: PartialOrd + fmt::Display>(out: &mut Vec<Problem>, key: impl Into<String>, value: T, range: RangeInclusive<T>, unit: &str) {
    if !range.contains(&value) {
        out.push(problem(key, format!("{value} is out of range"), format!("set {unit} from {} to {}", range.start(), range.end())));
    }
}

pub fn validate(c: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    if !is_dns_subdomain(&c.cluster) {
        out.push(problem("cluster", format!("`{}` is not a valid cluster name", c.cluster), "use lowercase letters, digits, `-` and `.`, e.g. `prod-eu-1`"));
    }
    // A missing kubeconfig is reported when the client starts (it may appear later, e.g. in a
    // shared volume), but one that is not a regular file (a FIFO) would block start-up.
    if let Some(path) = &c.kubernetes.kubeconfig
        && std::fs::metadata(path).is_ok_and(|m| !m.is_file())
    {
        out.push(problem("kubernetes.kubeconfig", format!("{} is not a regular file", path.display()), "give the path of a kubeconfig file"));
    }
    if let Some(base) = &c.dataschema_base
        && !url::Url::parse(base).is_ok_and(|u| !u.cannot_be_a_base() && base.ends_with('/'))
    {
        out.push(problem(
            "dataschema_base",
            format!("`{base}` is not a URL ending in `/`"),
            "give the URL of the published schemas/events/ directory, e.g. `https://schemas.example.com/deltaship/events/`",
        ));
    }
    check_range(&mut out, "kubernetes.page_size", c.kubernetes.page_size, ranges::PAGE_SIZE, "the objects per list page (e.g. 500)");
    check_range(&mut out, "kubernetes.resync_secs", c.kubernetes.resync_secs, ranges::RESYNC_SECS, "seconds (0 = off)");
    check_range(&mut out, "kubernetes.watch_failure_grace_secs", c.kubernetes.watch_failure_grace_secs, ranges::WATCH_FAILURE_GRACE_SECS, "seconds (0 = off)");
    if c.resources.is_empty() {
        out.push(problem(
            "resources",
            "no resource to watch",
            "add at least one [[resources]] entry with `version` and `kind`, e.g. version = \"v1\", kind = \"ConfigMap\"",
        ));
    }
    for (i, r) in c.resources.iter().enumerate() {
        let at = |field: &str| format!("resources[{i}].{field}");
        if r.version.trim().is_empty() {
            out.push(problem(at("version"), "is empty", "set the API version, e.g. `v1`"));
        }
        if r.kind.trim().is_empty() {
            out.push(problem(at("kind"), "is empty", "set the kind, e.g. `Deployment`"));
        }
        for (j, ns) in r.namespaces.iter().enumerate() {
            if !is_dns_label(ns) {
                out.push(problem(
                    at(&format!("namespaces[{j}]")),
                    format!("`{ns}` is not a valid namespace name"),
                    "use a lowercase DNS label (letters, digits, `-`), or remove `namespaces` to watch all",
                ));
            }
        }
        for (name, sel) in [("label_selector", &r.label_selector), ("field_selector", &r.field_selector)] {
            if let Some(sel) = sel
                && sel.split(',').any(|term| term.trim().is_empty())
            {
                out.push(problem(
                    at(name),
                    format!("`{sel}` has an empty term"),
                    "write comma-separated terms such as `app=web,tier!=cache`, or remove the key",
                ));
            }
        }
        if let Some(secs) = r.resync_secs {
            check_range(&mut out, at("resync_secs"), secs, ranges::RESYNC_SECS, "seconds (0 = off)");
        }
        check_pointers(&mut out, &at("filter.changed_paths"), &r.filter.changed_paths, "`/spec/template`");
        check_pointers(&mut out, &at("ignore_fields"), &r.ignore_fields, "`/status` or `/metadata/annotations/example.com~1note`");
        if let Some(t) = &r.topic {
            check_per_resource(&mut out, at("topic"), t);
        }
    }
    validate_routes(&mut out, c);
    out.extend(super::redact::validate(c));
    out.extend(super::resume::validate(c));
    out.extend(super::destinations::validate(c));
    let d = &c.delivery;
    check_range(&mut out, "delivery.queue_capacity", d.queue_capacity, ranges::QUEUE_CAPACITY, "a number of events (e.g. 10000)");
    check_range(&mut out, "delivery.max_in_flight", d.max_in_flight, ranges::MAX_IN_FLIGHT, "a number of events (e.g. 1000)");
    check_range(&mut out, "delivery.retry_max_ms", d.retry_max_ms, ranges::RETRY_MAX_MS, "milliseconds (e.g. 30000)");
    check_range(&mut out, "runtime.worker_threads", c.runtime.worker_threads, ranges::WORKER_THREADS, "a number of threads (e.g. 2)");
    check_range(&mut out, "delivery.shutdown_timeout_secs", d.shutdown_timeout_secs, ranges::SHUTDOWN_TIMEOUT_SECS, "seconds (e.g. 30)");
    check_range(&mut out, "delivery.stall_timeout_secs", d.stall_timeout_secs, ranges::STALL_TIMEOUT_SECS, "seconds (0 = off)");
    check_range(&mut out, "delivery.state_marker_secs", d.state_marker_secs, ranges::STATE_MARKER_SECS, "seconds (0 = off)");
    check_range(&mut out, "resume.interval_ms", c.resume.interval_ms, ranges::CHECKPOINT_INTERVAL_MS, "milliseconds (e.g. 1000)");
    if d.retry_initial_ms == 0 || d.retry_initial_ms > d.retry_max_ms {
        out.push(problem(
            "delivery.retry_initial_ms",
            format!("must be between 1 and delivery.retry_max_ms ({})", d.retry_max_ms),
            "lower retry_initial_ms or raise retry_max_ms",
        ));
    }
    let le = &c.leader_election;
    for (field, secs) in
        [("lease_duration_secs", le.lease_duration_secs), ("renew_deadline_secs", le.renew_deadline_secs), ("retry_period_secs", le.retry_period_secs)]
    {
        check_range(&mut out, format!("leader_election.{field}"), secs, ranges::LEASE_SECS, "seconds");
    }
    let log_fix =
        "use a level (`error`, `warn` or `warning`, `info`, `debug`, `trace`, `off`) or directives `target=level` such as `deltaship=debug,kube=info`";
    match c.log.filter().map(|f| tracing_subscriber::EnvFilter::try_new(f).map_err(|e| e.to_string())) {
        Err(directive) => out.push(problem(
            "log.level",
            format!(
                "`{}` is not a log filter: `{directive}` is not a level or `target=level` (valid levels: {}); a bare word would be read as a target, silencing every other line, ERROR included",
                c.log.level,
                super::LOG_LEVELS.join(", ")
            ),
            log_fix,
        )),
        Ok(Err(e)) => out.push(problem("log.level", format!("`{}` is not a log filter: {e}", c.log.level), log_fix)),
        Ok(Ok(_)) => {}
    }
    if le.enabled {
        if !is_dns_subdomain(&le.lease_name) {
            out.push(problem("leader_election.lease_name", format!("`{}` is not a valid name", le.lease_name), "use lowercase letters, digits, `-` and `.`"));
        }
        if !(le.retry_period_secs >= 1 && le.retry_period_secs < le.renew_deadline_secs && le.renew_deadline_secs < le.lease_duration_secs) {
            out.push(problem(
                "leader_election.renew_deadline_secs",
                format!(
                    "needs 1 <= retry_period_secs ({}) < renew_deadline_secs ({}) < lease_duration_secs ({})",
                    le.retry_period_secs, le.renew_deadline_secs, le.lease_duration_secs
                ),
                "e.g. 2, 10 and 15: the leader must give up before others may take over",
            ));
        }
    }
    let topic = &c.resume.kafka_topic;
    // Kafka's rule for topic names (its `Topic.validate`).
    if !(1..=249).contains(&topic.len()) || topic == "." || topic == ".." || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        out.push(problem(
            "resume.kafka_topic",
            format!("`{topic}` is not a valid Kafka topic name"),
            "use 1 to 249 letters, digits, `.`, `_` and `-`, e.g. `deltaship.checkpoints`",
        ));
    }
    let bucket = &c.resume.nats_bucket;
    if bucket.is_empty() || !bucket.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)) {
        out.push(problem(
            "resume.nats_bucket",
            format!("`{bucket}` is not a valid key-value bucket name"),
            "use letters, digits, `_` and `-`, e.g. `deltaship-checkpoints`",
        ));
    }
    check_range(&mut out, "http.max_connections", c.http.max_connections, ranges::MAX_CONNECTIONS, "connections (e.g. 256)");
    check_range(&mut out, "http.request_timeout_secs", c.http.request_timeout_secs, ranges::REQUEST_TIMEOUT_SECS, "seconds (e.g. 10)");
    out
}

/// JSON pointers (RFC 6901) at `key[j]`: each starts with `/`, and `~` only escapes as
/// `~0` (`~`) or `~1` (`/`). The empty pointer (the whole object) is valid JSON but
/// refused: ignoring or watching the whole object is never what is meant.
fn check_pointers(out: &mut Vec<Problem>, key: &str, pointers: &[String], example: &str) {
    for (j, p) in pointers.iter().enumerate() {
        let bad_escape = p.match_indices('~').any(|(i, _)| !matches!(p.as_bytes().get(i + 1), Some(b'0' | b'1')));
        if !p.starts_with('/') {
            out.push(problem(format!("{key}[{j}]"), format!("`{p}` is not a JSON pointer"), format!("start it with `/`, e.g. {example}")));
        } else if bad_escape {
            out.push(problem(
                format!("{key}[{j}]"),
                format!("`{p}` is not a JSON pointer: `~` must be followed by `0` or `1`"),
                "write `~0` for `~` and `~1` for `/` inside a name (RFC 6901)",
            ));
        }
    }
}

/// `sink`, or `routes` with their sinks, names, selectors and filters.
fn validate_routes(out: &mut Vec<Problem>, c: &Config) {
    if let Some(sink) = &c.sink {
        validate_sink(out, "sink", sink);
        if !c.routes.is_empty() {
            out.push(problem("sink", "is set together with `routes`", "move the sink into a [[routes]] entry (with a `name`), or remove `routes`"));
        }
    }
    let mut names = HashSet::new();
    for (i, r) in c.routes.iter().enumerate() {
        let at = |field: &str| format!("routes[{i}].{field}");
        if !is_dns_label(&r.name) {
            out.push(problem(at("name"), format!("`{}` is not a valid route name", r.name), "use a lowercase DNS label, e.g. `audit`"));
        } else if !names.insert(r.name.as_str()) {
            out.push(problem(at("name"), format!("`{}` names two routes", r.name), "give each route its own name"));
        }
        validate_sink(out, &at("sink"), &r.sink);
        for (j, selector) in r.resources.iter().enumerate() {
            if !c.resources.iter().any(|rc| selector_matches(selector, rc)) {
                let known: Vec<String> =
                    c.resources.iter().map(|rc| if rc.group.is_empty() { rc.kind.clone() } else { format!("{}/{}", rc.group, rc.kind) }).collect();
                out.push(problem(
                    at(&format!("resources[{j}]")),
                    format!("`{selector}` matches none of `resources`"),
                    format!("name a configured kind as `Kind` or `group/Kind`: {}", known.join(", ")),
                ));
            }
        }
        check_pointers(out, &at("filter.changed_paths"), &r.filter.changed_paths, "`/spec/template`");
    }
    if !c.routes.is_empty() {
        for (i, rc) in c.resources.iter().enumerate() {
            if !c.routes.iter().any(|r| r.selects(rc)) {
                out.push(problem(
                    format!("resources[{i}]"),
                    format!("{} is shipped by no route", rc.kind),
                    "add it to a route's `resources` (or leave a route's `resources` empty to ship all), or remove it",
                ));
            }
        }
    }
}

fn validate_sink(out: &mut Vec<Problem>, key: &str, sink: &SinkConfig) {
    match sink {
        SinkConfig::Kafka(k) => validate_kafka(out, key, k),
        SinkConfig::Nats(n) => validate_nats(out, key, n),
        SinkConfig::Http(h) => validate_http(out, key, h),
        SinkConfig::Stdout {} => {}
    }
}

fn validate_http(out: &mut Vec<Problem>, key: &str, h: &HttpSinkConfig) {
    let at = |field: &str| format!("{key}.{field}");
    match h.target_url() {
        None => out.push(problem(
            at("url"),
            format!("is not set, nor is {K_SINK}"),
            "set the URL events are POSTed to, e.g. `http://broker-ingress.knative-eventing.svc/default/default`",
        )),
        Some(url) => match url.parse::<http::Uri>() {
            _ if has_userinfo(&url) => out.push(problem(
                at("url"),
                format!("`{}` holds credentials before the host, which the HTTP client never sends", mask_urls(&url)),
                "remove them from the URL and set `auth` (`user` with `password_file`, or `token_file`)",
            )),
            Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some_and(|h| !h.is_empty()) => {
                let tls_set = h.tls.ca_file.is_some() || h.tls.cert_file.is_some();
                if tls_set && uri.scheme_str() == Some("http") {
                    out.push(problem(at("tls"), format!("is set but `{}` is not https", mask_urls(&url)), "use an https:// URL, or remove `tls`"));
                }
            }
            _ => out.push(problem(
                at("url"),
                format!("`{}` is not an http:// or https:// URL", mask_urls(&url)),
                "give a URL such as `https://events.example.com/hook`",
            )),
        },
    }
    if let Err((what, fix)) = ce_overrides() {
        out.push(problem(K_CE_OVERRIDES, what, fix));
    }
    check_range(out, at("timeout_ms"), h.timeout_ms, ranges::HTTP_TIMEOUT_MS, "milliseconds (e.g. 10000)");
    check_range(out, at("max_requests"), h.max_requests, ranges::HTTP_MAX_REQUESTS, "requests (e.g. 64)");
    let a = &h.auth;
    if (a.token.is_some() || a.token_file.is_some()) && a.user.is_some() {
        out.push(problem(at("auth"), "sets both a token and a user", "keep one: `token_file` (bearer) or `user` with `password_file` (basic)"));
    }
    check_credentials(
        out,
        key,
        Credentials {
            user: a.user.is_some(),
            password: (a.password.is_some(), a.password_file.is_some()),
            token: (a.token.is_some(), a.token_file.is_some()),
            cert_and_key: (h.tls.cert_file.is_some(), h.tls.key_file.is_some()),
            files: &[
                ("auth.token_file", &a.token_file, "the bearer token"),
                ("auth.password_file", &a.password_file, "the password"),
                ("tls.ca_file", &h.tls.ca_file, "the CA certificate(s) in PEM"),
                ("tls.cert_file", &h.tls.cert_file, "the client certificate in PEM"),
                ("tls.key_file", &h.tls.key_file, "the client certificate's private key in PEM"),
            ],
        },
    );
}

/// What a sink's credentials give, for the checks every sink shares.
struct Credentials<'a> {
    user: bool,
    /// (inline, as a file) of the password and of the token.
    password: (bool, bool),
    token: (bool, bool),
    /// Whether a client certificate and its key are set.
    cert_and_key: (bool, bool),
    /// (key under the sink, the file, what it holds): each must be readable.
    files: &'a [(&'a str, &'a Option<PathBuf>, &'a str)],
}

/// A secret given once (inline or as a file), a user with its password, a client
/// certificate with its key, and every file readable.
fn check_credentials(out: &mut Vec<Problem>, key: &str, c: Credentials<'_>) {
    let at = |field: &str| format!("{key}.{field}");
    if c.password.0 && c.password.1 || c.token.0 && c.token.1 {
        out.push(problem(at("auth"), "sets a secret both inline and as a file", "keep only the *_file setting"));
    }
    if c.user != (c.password.0 || c.password.1) {
        out.push(problem(at("auth.user"), "user and password go together", "set both `user` and `password_file` (or `password`), or neither"));
    }
    if c.cert_and_key.0 != c.cert_and_key.1 {
        out.push(problem(at("tls.cert_file"), "a client certificate needs its key", "set both `cert_file` and `key_file`, or neither"));
    }
    for (field, path, what) in c.files {
        if let Some(path) = path {
            check_readable(out, at(field), path, what);
        }
    }
}

fn validate_kafka(out: &mut Vec<Problem>, key: &str, k: &KafkaConfig) {
    let at = |field: &str| format!("{key}.{field}");
    if k.brokers.trim().is_empty() {
        out.push(problem(at("brokers"), "is empty", "list bootstrap servers, e.g. `kafka-0:9092,kafka-1:9092`"));
    }
    check_per_resource(out, at("topic_template"), &k.topic_template);
    // librdkafka checks each option when it is set: an unknown name or a bad value is a
    // config error now, its value masked when the name looks secret (librdkafka echoes it).
    for (name, value) in &k.librdkafka {
        if matches!(name.as_str(), "acks" | "request.required.acks") && value.trim() == "0" {
            out.push(problem(
                at(&format!("librdkafka.\"{name}\"")),
                "0 asks the brokers for no acknowledgement, and deltaship counts an event delivered only on the brokers' acknowledgement",
                "remove it (deltaship sets `all`)",
            ));
        }
        if let Err(e) = rdkafka::ClientConfig::new().set(name, value).create_native_config() {
            let reason = match e {
                rdkafka::error::KafkaError::ClientConfig(_, description, _, _) => description,
                other => other.to_string(),
            };
            out.push(problem(
                at(&format!("librdkafka.\"{name}\"")),
                format!("librdkafka refuses it: {}", super::mask_secrets_in(&reason, [(name.as_str(), value.as_str())])),
                "correct the option's name or value (librdkafka's CONFIGURATION.md lists them), or remove it",
            ));
        }
    }
    if let Some(t) = &k.create_topics {
        check_range(out, at("create_topics.partitions"), t.partitions, ranges::PARTITIONS, "partitions per topic (e.g. 3)");
        check_range(
            out,
            at("create_topics.replication_factor"),
            t.replication_factor,
            ranges::REPLICATION_FACTOR,
            "replicas per partition, at most the number of brokers",
        );
    }
    if let Some(tls) = &k.tls {
        match (&tls.cert_file, &tls.key_file) {
            (Some(_), None) => out.push(problem(
                at("tls.key_file"),
                "is missing: a client certificate (`cert_file`) needs its key",
                "set both `cert_file` and `key_file` (mutual TLS), or neither",
            )),
            (None, Some(_)) => out.push(problem(
                at("tls.cert_file"),
                "is missing: `key_file` needs its certificate",
                "set both `cert_file` and `key_file` (mutual TLS), or neither",
            )),
            _ => {}
        }
        if tls.key_password_file.is_some() && tls.key_file.is_none() {
            out.push(problem(at("tls.key_password_file"), "is set without `key_file`", "set `key_file` to the encrypted key, or remove `key_password_file`"));
        }
        let files = [
            ("tls.ca_file", &tls.ca_file, "the CA certificate(s) in PEM"),
            ("tls.cert_file", &tls.cert_file, "the client certificate in PEM"),
            ("tls.key_file", &tls.key_file, "the client certificate's private key in PEM"),
            ("tls.key_password_file", &tls.key_password_file, "the password of `key_file`"),
        ];
        for (field, path, what) in files {
            if let Some(path) = path {
                check_readable(out, at(field), path, what);
            }
        }
    }
    if let Some(sasl) = &k.sasl {
        if sasl.username.trim().is_empty() {
            out.push(problem(at("sasl.username"), "is empty", "set the SASL user name the brokers know"));
        }
        match (&sasl.password, &sasl.password_file) {
            (Some(_), Some(_)) => out.push(problem(
                at("sasl.password"),
                "is set together with `password_file`",
                "keep one: `password_file` (a file holding the password) or `password`",
            )),
            (None, None) => {
                // Environment variables reach `sink` only, not list entries such as routes.
                let env = if key == "sink" { " (e.g. from DELTASHIP_SINK__SASL__PASSWORD)" } else { "" };
                out.push(problem(
                    at("sasl.password"),
                    "is missing: neither `password` nor `password_file` is set",
                    format!("set `password_file` to a file holding the password, or `password`{env}"),
                ));
            }
            (None, Some(path)) => check_readable(out, at("sasl.password_file"), path, "the SASL password"),
            (Some(_), None) => {}
        }
    }
}

/// The file at `path` is a regular file that can be read now, so that a wrong path stops
/// start-up naming its key, instead of failing each connection attempt later (or blocking
/// start-up: a FIFO is refused before it is opened).
fn check_readable(out: &mut Vec<Problem>, key: String, path: &Path, what: &str) {
    if let Err(e) = super::secret::regular_file(path).and_then(|_| std::fs::File::open(path)) {
        out.push(problem(key, format!("cannot read {}: {e}", path.display()), format!("give the path of a readable file holding {what}")));
    }
}

/// A template of one name per resource (a topic, a marker subject) without `{namespace}`
/// or `{name}`, which only NATS object subjects may use. The template itself parsed when
/// the configuration was loaded.
fn check_per_resource(out: &mut Vec<Problem>, key: String, t: &Template) {
    if t.names_object() {
        out.push(problem(key, "uses {namespace} or {name}, which name single objects", "use only {cluster}, {group}, {version}, {kind} and {plural} here"));
    }
}

fn validate_nats(out: &mut Vec<Problem>, key: &str, n: &NatsConfig) {
    let at = |field: &str| format!("{key}.{field}");
    if n.url.trim().is_empty() {
        out.push(problem(at("url"), "is empty", "list server URLs, e.g. `nats://nats-0:4222,nats://nats-1:4222`"));
    }
    if has_userinfo(&n.url) {
        out.push(problem(
            at("url"),
            format!("`{}` holds credentials before a host, which the NATS client never sends", mask_urls(&n.url)),
            "remove them from the URL and set `auth` (`user` with `password_file`, or `token_file`)",
        ));
    }
    check_per_resource(out, at("marker_subject_template"), &n.marker_subject_template);
    let js = &n.jetstream;
    if js.stream.is_empty() || js.stream.contains(['.', '*', '>', ' ', '\t', '/', '\\']) {
        out.push(problem(at("jetstream.stream"), format!("`{}` is not a valid stream name", js.stream), "use letters, digits, `-` and `_`, e.g. `DELTASHIP`"));
    }
    if js.create && js.subjects.is_empty() {
        out.push(problem(at("jetstream.subjects"), "is empty", "list the stream's subjects, e.g. [\"deltaship.>\"]"));
    }
    check_range(out, at("jetstream.replicas"), js.replicas, ranges::REPLICAS, "replicas");
    check_range(out, at("jetstream.duplicate_window_secs"), js.duplicate_window_secs, ranges::DUPLICATE_WINDOW_SECS, "seconds (e.g. 120)");
    check_range(out, at("jetstream.max_msgs_per_subject"), js.max_msgs_per_subject, ranges::MAX_MSGS_PER_SUBJECT, "messages (0 = keep all)");
    check_range(out, at("jetstream.ack_timeout_secs"), js.ack_timeout_secs, ranges::ACK_TIMEOUT_SECS, "seconds to wait for an ack (e.g. 10)");
    let a = &n.auth;
    let methods = [a.user.is_some(), a.token.is_some() || a.token_file.is_some(), a.nkey_seed_file.is_some(), a.credentials_file.is_some()];
    if methods.iter().filter(|m| **m).count() > 1 {
        out.push(problem(at("auth"), "sets more than one way to authenticate", "keep one of: user with password, token, nkey_seed_file, credentials_file"));
    }
    check_credentials(
        out,
        key,
        Credentials {
            user: a.user.is_some(),
            password: (a.password.is_some(), a.password_file.is_some()),
            token: (a.token.is_some(), a.token_file.is_some()),
            cert_and_key: (n.tls.cert_file.is_some(), n.tls.key_file.is_some()),
            files: &[
                ("auth.password_file", &a.password_file, "the password"),
                ("auth.token_file", &a.token_file, "the token"),
                ("auth.nkey_seed_file", &a.nkey_seed_file, "the NKey seed"),
                ("auth.credentials_file", &a.credentials_file, "the credentials (JWT and NKey seed)"),
                ("tls.ca_file", &n.tls.ca_file, "the CA certificate(s) in PEM"),
                ("tls.cert_file", &n.tls.cert_file, "the client certificate in PEM"),
                ("tls.key_file", &n.tls.key_file, "the client certificate's private key in PEM"),
            ],
        },
    );
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-') && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::{ResourceConfig, SinkConfig};

    pub(in crate::config) fn base() -> Config {
        serde_json::from_value(serde_json::json!({
            "resources": [{"version": "v1", "kind": "ConfigMap"}]
        }))
        .unwrap()
    }

    pub(in crate::config) fn keys(c: &Config) -> Vec<String> {
        validate(c).into_iter().map(|p| p.key).collect()
    }

    #[test]
    fn a_minimal_config_is_valid() {
        assert!(validate(&base()).is_empty());
    }

    #[test]
    fn each_mistake_names_its_key() {
        let mut c = base();
        c.cluster = "Prod_1".into();
        c.resources.push(ResourceConfig {
            kind: "Secret".into(),
            namespaces: vec!["Bad_NS".into()],
            label_selector: Some("app=a,,b".into()),
            ignore_fields: vec!["status".into()],
            topic: Template::parse("t.{name}").ok(),
            ..c.resources[0].clone()
        });
        c.delivery.queue_capacity = 0;
        c.delivery.retry_initial_ms = 60_000;
        assert_eq!(
            keys(&c),
            [
                "cluster",
                "resources[1].namespaces[0]",
                "resources[1].label_selector",
                "resources[1].ignore_fields[0]",
                "resources[1].topic",
                "delivery.queue_capacity",
                "delivery.retry_initial_ms",
            ]
        );
        let shown = validate(&c)[4].to_string();
        assert!(shown.contains("{name}") && shown.contains("fix:"), "{shown}");
    }

    #[test]
    fn checkpoint_store_names_must_be_valid_kafka_topic_and_bucket_names() {
        let mut c = base();
        c.resume.kafka_topic = "checkpoints/prod".into();
        c.resume.nats_bucket = "deltaship.checkpoints".into();
        assert_eq!(keys(&c), ["resume.kafka_topic", "resume.nats_bucket"]);
        c.resume.kafka_topic = "..".into();
        c.resume.nats_bucket = "ok_bucket-1".into();
        assert_eq!(keys(&c), ["resume.kafka_topic"]);
    }

    #[test]
    fn no_resources_is_an_error_with_an_example() {
        let mut c = base();
        c.resources.clear();
        let p = &validate(&c)[0];
        assert_eq!(p.key, "resources");
        assert!(p.fix.contains("kind = \"ConfigMap\""));
    }

    #[test]
    fn kafka_sink_fields_are_checked() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": " ", "topic_template": "t.{name}"
        }))
        .unwrap();
        assert!(matches!(c.sink, Some(SinkConfig::Kafka(_))));
        assert_eq!(keys(&c), ["sink.brokers", "sink.topic_template"]);
        // A codec is an enum: an unknown one fails to load (config::tests names its key).
        assert!(serde_json::from_value::<SinkConfig>(serde_json::json!({"type": "kafka", "brokers": "b:1", "compression": "brotli"})).is_err());
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1", "topic_template": "t.{namespace}"
        }))
        .unwrap();
        assert!(validate(&c)[0].problem.contains("{namespace}"));
    }

    #[test]
    fn kafka_tls_and_sasl_mistakes_name_their_keys_and_files() {
        let dir = std::env::temp_dir().join(format!("deltaship-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ca.pem");
        std::fs::write(&file, "").unwrap();
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "tls": {"ca_file": "/nonexistent/ca.pem", "cert_file": file, "key_password_file": file},
            "sasl": {"mechanism": "PLAIN", "username": " ", "password": "p", "password_file": file},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.tls.key_file", "sink.tls.key_password_file", "sink.tls.ca_file", "sink.sasl.username", "sink.sasl.password"]);
        let shown: Vec<String> = validate(&c).iter().map(ToString::to_string).collect();
        assert!(shown[2].contains("/nonexistent/ca.pem") && shown[2].contains("No such file"), "{shown:?}");
        assert!(shown[4].contains("keep one"), "{shown:?}");

        // A key without its certificate, a directory as a file, no password at all (the
        // fix offers the environment variable only where one can reach the key).
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "tls": {"key_file": dir},
            "sasl": {"mechanism": "SCRAM-SHA-256", "username": "u"},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.tls.cert_file", "sink.tls.key_file", "sink.sasl.password"]);
        let problems = validate(&c);
        assert!(problems[1].problem.contains("not a regular file"), "{problems:?}");
        assert!(problems[2].fix.contains("DELTASHIP_SINK__SASL__PASSWORD"), "{problems:?}");
        c.routes = serde_json::from_value(serde_json::json!([{"name": "a", "sink": c.sink.take()}])).unwrap();
        let problems = validate(&c);
        assert_eq!(problems[2].key, "routes[0].sink.sasl.password");
        assert!(!problems[2].fix.contains("DELTASHIP_"), "{problems:?}");

        // Every file readable, the password from its file: valid; so is an empty `tls`.
        c.routes.clear();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "tls": {"ca_file": file, "cert_file": file, "key_file": file, "key_password_file": file},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "u", "password_file": file},
        }))
        .unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1", "tls": {}})).unwrap();
        assert!(validate(&c).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nats_sink_fields_are_checked() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "nats", "url": "nats://n:4222",
            "marker_subject_template": "x.{name}",
            "jetstream": {"stream": "a.b", "ack_timeout_secs": 0},
            "auth": {"user": "u", "token": "t"},
            "tls": {"cert_file": "/c.pem"},
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            [
                "sink.marker_subject_template",
                "sink.jetstream.stream",
                "sink.jetstream.ack_timeout_secs",
                "sink.auth",
                "sink.auth.user",
                "sink.tls.cert_file",
                "sink.tls.cert_file"
            ]
        );
        assert!(validate(&c)[6].problem.contains("cannot read /c.pem"), "{:?}", validate(&c));
    }

    #[test]
    fn http_sink_fields_are_checked() {
        let mut c = base();
        c.dataschema_base = Some("schemas/events".into());
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "http", "url": "ftp://hooks.example.com/x",
            "timeout_ms": 0, "max_requests": 0,
            "auth": {"token": "t", "user": "u"},
            "tls": {"key_file": "/k.pem"},
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            ["dataschema_base", "sink.url", "sink.timeout_ms", "sink.max_requests", "sink.auth", "sink.auth.user", "sink.tls.cert_file", "sink.tls.key_file"]
        );
        c.sink = serde_json::from_value(serde_json::json!({"type": "http", "url": "http://hooks.example.com/x", "tls": {"ca_file": "/ca.pem"}})).unwrap();
        c.dataschema_base = Some("https://schemas.example.com/deltaship/events/".into());
        assert_eq!(keys(&c), ["sink.tls", "sink.tls.ca_file"], "TLS settings with an http:// URL, and the unreadable CA");
    }

    #[test]
    fn route_mistakes_name_their_keys() {
        let mut c = base();
        c.routes = serde_json::from_value(serde_json::json!([
            {"name": "a", "sink": {"type": "kafka", "brokers": ""}, "resources": ["Secret"]},
            {"name": "a", "sink": {"type": "stdout"}, "resources": ["apps/ConfigMap"], "filter": {"changed_paths": ["spec"]}},
            {"name": "Bad_Name", "sink": {"type": "nats", "url": ""}, "resources": ["core/ConfigMap"]},
        ]))
        .unwrap();
        c.sink = Some(SinkConfig::Stdout {});
        assert_eq!(
            keys(&c),
            [
                "sink",
                "routes[0].sink.brokers",
                "routes[0].resources[0]",
                "routes[1].name",
                "routes[1].resources[0]",
                "routes[1].filter.changed_paths[0]",
                "routes[2].name",
                "routes[2].sink.url",
            ]
        );
        assert!(validate(&c)[2].fix.contains("ConfigMap"), "lists the configured kinds");
        c.sink = None;
        c.routes.truncate(1);
        assert!(keys(&c).contains(&"resources[0]".to_string()), "a resource no route ships");
    }

    #[test]
    fn every_number_out_of_its_range_names_the_key_and_the_range() {
        let mut c = base();
        c.kubernetes.page_size = 0;
        c.kubernetes.resync_secs = u64::MAX;
        c.resources[0].resync_secs = Some(u64::MAX - 1);
        c.delivery.queue_capacity = 9_223_372_036_854_775_807;
        c.delivery.max_in_flight = usize::MAX;
        c.delivery.retry_max_ms = u64::MAX;
        c.delivery.shutdown_timeout_secs = u64::MAX;
        c.delivery.stall_timeout_secs = u64::MAX;
        c.leader_election.lease_duration_secs = 3_000_000_000;
        c.kubernetes.watch_failure_grace_secs = 86_401;
        c.http.max_connections = 0;
        c.http.request_timeout_secs = u64::MAX;
        assert_eq!(
            keys(&c),
            [
                "kubernetes.page_size",
                "kubernetes.resync_secs",
                "kubernetes.watch_failure_grace_secs",
                "resources[0].resync_secs",
                "delivery.queue_capacity",
                "delivery.max_in_flight",
                "delivery.retry_max_ms",
                "delivery.shutdown_timeout_secs",
                "delivery.stall_timeout_secs",
                "leader_election.lease_duration_secs",
                "http.max_connections",
                "http.request_timeout_secs",
            ]
        );
        let shown = validate(&c)[4].to_string();
        assert!(shown.contains("9223372036854775807 is out of range") && shown.contains("from 1 to 1000000"), "{shown}");
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1", "create_topics": {"partitions": 2_000_000_000, "replication_factor": 40_000}
        }))
        .unwrap();
        let c = Config { sink: c.sink, ..base() };
        assert_eq!(keys(&c), ["sink.create_topics.partitions", "sink.create_topics.replication_factor"]);
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "nats", "url": "nats://n:4222",
            "jetstream": {"replicas": 7, "duplicate_window_secs": u64::MAX, "max_msgs_per_subject": -1, "ack_timeout_secs": 0},
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            ["sink.jetstream.replicas", "sink.jetstream.duplicate_window_secs", "sink.jetstream.max_msgs_per_subject", "sink.jetstream.ack_timeout_secs"]
        );
    }

    #[test]
    fn acks_0_is_refused_naming_the_option() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1", "librdkafka": {"acks": "0", "enable.idempotence": "false", "request.required.acks": "1"},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.librdkafka.\"acks\""]);
    }

    #[test]
    fn librdkafka_options_it_refuses_are_errors_without_a_secret_value() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({
            "type": "kafka", "brokers": "b:1",
            "librdkafka": {"linger.ms": "5", "no.such": "x", "sasl.oauthbearer.client.secret": "Sup3rSecret", "security.protocol": "plaintextish"},
        }))
        .unwrap();
        assert_eq!(keys(&c), ["sink.librdkafka.\"no.such\"", "sink.librdkafka.\"sasl.oauthbearer.client.secret\"", "sink.librdkafka.\"security.protocol\""]);
        let shown: Vec<String> = validate(&c).iter().map(ToString::to_string).collect();
        assert!(!shown.join("\n").contains("Sup3rSecret"), "{shown:?}");
        assert!(shown[2].contains("plaintextish"), "a value that is no secret is shown: {shown:?}");
    }

    #[test]
    fn the_defaults_sit_inside_every_range() {
        let mut c = base();
        c.sink = serde_json::from_value(serde_json::json!({"type": "nats", "url": "nats://n:4222"})).unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        c.sink = serde_json::from_value(serde_json::json!({"type": "kafka", "brokers": "b:1", "create_topics": {}})).unwrap();
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
    }

    #[test]
    fn json_pointers_allow_only_the_rfc_6901_escapes() {
        let mut c = base();
        c.resources[0].ignore_fields = vec!["/a~0b/c~1d".into(), "/a~2b".into(), "/trailing~".into(), "".into()];
        c.resources[0].filter.changed_paths = vec!["/ok".into(), "/x~y".into()];
        assert_eq!(
            keys(&c),
            ["resources[0].filter.changed_paths[1]", "resources[0].ignore_fields[1]", "resources[0].ignore_fields[2]", "resources[0].ignore_fields[3]"]
        );
        assert!(validate(&c)[1].problem.contains("`~` must be followed by `0` or `1`"), "{:?}", validate(&c));
    }

    #[test]
    fn an_invalid_log_level_is_an_error() {
        let mut c = base();
        c.log.level = "deltaship=loud".into();
        assert_eq!(keys(&c), ["log.level"]);
        c.log.level = "warn,deltaship=debug,kube=info".into();
        assert!(validate(&c).is_empty());
    }
}
