//! Test configs built as `deltaship::config::Config` values and written as TOML, so that a
//! test names the options it sets and a typo fails to compile instead of at start-up.

use deltaship::config::{Config, HttpSinkConfig, KafkaConfig, LeaderElectionConfig, NatsConfig, ResourceConfig, SinkConfig, Template, TopicCreation};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A config with the documented defaults, built up option by option.
pub struct TestConfig(Config);

/// A value of `T` from JSON (the field defaults are applied as when loading a file).
fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("not a valid test config part: {e}"))
}

/// ResourceType `kind` of `group` (empty for the core group), version `v1`, watched in
/// `namespaces` (empty: all). Other fields with struct update: `ResourceConfig { payload:
/// PayloadMode::Patch, ..resource("", "ConfigMap", &[&ns]) }`.
/// A resource of `group` (version v1); no `namespaces` watches every namespace.
pub fn resource(group: &str, kind: &str, namespaces: &[&str]) -> ResourceConfig {
    let mut r = json!({"group": group, "version": "v1", "kind": kind});
    if !namespaces.is_empty() {
        r["namespaces"] = json!(namespaces);
    }
    from_json(r)
}

/// A Kafka sink to `brokers`, topics named by `topic_template`, creating its topics with 3
/// partitions (the tests' usual setting; another number: `KafkaConfig { create_topics:
/// partitions(1), ..kafka(..) }`).
pub fn kafka(brokers: &str, topic_template: &str) -> KafkaConfig {
    KafkaConfig { create_topics: partitions(3), ..from_json(json!({"brokers": brokers, "topic_template": topic_template})) }
}

/// Leader election on the Lease `lease` in `namespace`, at the tests' quick pace: a lease of
/// 6 s, renewed every second, given up after 4 s without a renewal; fencing on (the default).
pub fn election(namespace: &str, lease: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        enabled: true,
        lease_name: lease.into(),
        namespace: Some(namespace.into()),
        lease_duration_secs: 6,
        renew_deadline_secs: 4,
        retry_period_secs: 1,
        ..LeaderElectionConfig::default()
    }
}

/// `create_topics` with `n` partitions, replication factor 1 and no topic configs.
pub fn partitions(n: i32) -> Option<TopicCreation> {
    Some(TopicCreation { partitions: n, replication_factor: 1, config: Default::default() })
}

/// A NATS (JetStream) sink at `url`, waiting 2 s for acknowledgements so that a test sees
/// an outage quickly.
pub fn nats(url: &str) -> NatsConfig {
    from_json(json!({"url": url, "jetstream": {"ack_timeout_secs": 2}}))
}

/// A NATS sink at `url` whose subjects start with `cluster` and land in a JetStream stream
/// of their own named `stream` (subjects `<cluster>.>`), so a test reads only its events.
pub fn nats_stream(url: &str, cluster: &str, stream: &str) -> NatsConfig {
    let mut n = nats(url);
    n.subject_template = Template::parse(&format!("{cluster}.{{group}}.{{kind}}.{{namespace}}.{{name}}")).unwrap();
    n.marker_subject_template = Template::parse(&format!("{cluster}.{{group}}.{{kind}}._sync")).unwrap();
    n.jetstream.stream = stream.to_string();
    n.jetstream.subjects = vec![format!("{cluster}.>")];
    n
}

/// An HTTP sink POSTing to `url`, answering within 1 s or retried (so that a test sees a
/// slow receiver quickly).
pub fn http(url: &str) -> HttpSinkConfig {
    from_json(json!({"url": url, "timeout_ms": 1000}))
}

impl TestConfig {
    pub fn new() -> TestConfig {
        TestConfig(from_json(json!({})))
    }

    pub fn cluster(mut self, name: &str) -> TestConfig {
        self.0.cluster = name.into();
        self
    }

    pub fn resource(mut self, r: ResourceConfig) -> TestConfig {
        self.0.resources.push(r);
        self
    }

    /// The ConfigMaps of namespace `ns`.
    pub fn configmaps(self, ns: &str) -> TestConfig {
        self.resource(resource("", "ConfigMap", &[ns]))
    }

    pub fn kafka(mut self, k: KafkaConfig) -> TestConfig {
        self.0.sink = Some(SinkConfig::Kafka(Box::new(k)));
        self
    }

    pub fn nats(mut self, n: NatsConfig) -> TestConfig {
        self.0.sink = Some(SinkConfig::Nats(Box::new(n)));
        self
    }

    pub fn http(mut self, h: HttpSinkConfig) -> TestConfig {
        self.0.sink = Some(SinkConfig::Http(Box::new(h)));
        self
    }

    /// Any other option, set on the `Config` itself.
    pub fn with(mut self, set: impl FnOnce(&mut Config)) -> TestConfig {
        set(&mut self.0);
        self
    }

    /// The config as a TOML file. Secrets are written as they are: `Secret` serializes its
    /// value, and only `Config::masked` (print-config) replaces it by `***`, which is never
    /// called here.
    pub fn toml(&self) -> String {
        toml::to_string(&self.0).unwrap_or_else(|e| panic!("the test config does not serialize as TOML: {e}"))
    }
}
