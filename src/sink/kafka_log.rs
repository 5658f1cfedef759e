//! librdkafka's logs and client errors, without the flood: while a broker is down it
//! reports every failed connection attempt. deltaship's own probe logs the state change
//! once; these lines go to DEBUG, and client errors to WARN at most once a minute per
//! error code (the text varies: "0/1 brokers are down", "1/1 brokers are down").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

const REPEAT_AFTER: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct QuietContext {
    last_warned: Mutex<HashMap<String, Instant>>,
}

impl ClientContext for QuietContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::error!(target: "librdkafka", facility, "{message}")
            }
            _ => tracing::debug!(target: "librdkafka", facility, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let text = format!("{error}: {reason}");
        let code = format!("{:?}", error.rdkafka_error_code());
        let mut warned = self.last_warned.lock().unwrap_or_else(|p| p.into_inner());
        match warned.get(&code) {
            Some(at) if at.elapsed() < REPEAT_AFTER => {
                tracing::debug!(target: "librdkafka", error = %text, "Kafka client error (repeated)");
            }
            _ => {
                tracing::warn!(sink = "kafka", error = %text, "Kafka client error");
                warned.insert(code, Instant::now());
            }
        }
    }
}
