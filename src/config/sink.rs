//! The sink of `sink` and of each route, chosen by `type`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::http::HttpSinkConfig;
use super::kafka::KafkaConfig;
use super::nats::NatsConfig;
use super::problem::Problem;
use super::secret::{Secret, mask_urls, mask_value};

/// The sink, chosen by `type`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    /// Structured CloudEvents as JSON lines on standard output.
    // A struct variant, so that unknown keys beside `type` are refused (serde ignores them
    // for a unit variant).
    Stdout {},
    /// Apache Kafka.
    Kafka(Box<KafkaConfig>),
    /// NATS, core or JetStream.
    Nats(Box<NatsConfig>),
    /// HTTP: each event POSTed to a URL (CloudEvents HTTP binding), e.g. a Knative Broker.
    Http(Box<HttpSinkConfig>),
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig::Stdout {}
    }
}

impl SinkConfig {
    /// The problems of this sink, at `key` (`sink` or `routes[i].sink`).
    pub(super) fn validate(&self, out: &mut Vec<Problem>, key: &str) {
        match self {
            SinkConfig::Kafka(k) => k.validate(out, key),
            SinkConfig::Nats(n) => n.validate(out, key),
            SinkConfig::Http(h) => h.validate(out, key),
            SinkConfig::Stdout {} => {}
        }
    }

    pub(super) fn mask(&mut self) {
        match self {
            SinkConfig::Kafka(k) => {
                k.brokers = mask_urls(&k.brokers).into_owned();
                for (key, value) in k.librdkafka.iter_mut() {
                    *value = mask_value(key, value);
                }
                // File paths are not secrets: only the inline password is masked.
                if let Some(password) = k.sasl.as_mut().and_then(|s| s.password.as_mut()) {
                    *password = Secret::masked();
                }
            }
            SinkConfig::Nats(n) => {
                n.url = mask_urls(&n.url).into_owned();
                for secret in [&mut n.auth.password, &mut n.auth.token].into_iter().flatten() {
                    *secret = Secret::masked();
                }
            }
            SinkConfig::Http(h) => {
                h.url = h.url.as_deref().map(|u| mask_urls(u).into_owned());
                for secret in [&mut h.auth.password, &mut h.auth.token].into_iter().flatten() {
                    *secret = Secret::masked();
                }
            }
            SinkConfig::Stdout {} => {}
        }
    }
}
