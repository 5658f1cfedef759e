//! A test's own log of events, on Kafka (one topic) or JetStream (one stream): how
//! `deltaship rebuild` reads it, and the audit of its object events (support::history).

use std::collections::HashSet;
use std::time::Duration;

use super::history::{Event, History, history, history_of};

pub enum Log {
    Kafka { brokers: String, topic: String },
    Nats { stream: String },
}

impl Log {
    /// `deltaship rebuild`'s arguments to read the log and verify every marker's count and
    /// digest.
    pub fn rebuild_args(&self) -> Vec<String> {
        let mut args: Vec<String> = match self {
            Log::Kafka { brokers, topic } => vec!["--kafka".into(), brokers.clone(), "--topic".into(), topic.clone()],
            Log::Nats { stream } => vec!["--nats".into(), super::env().nats, "--stream".into(), stream.clone()],
        };
        args.push("--verify".into());
        args
    }

    /// The audit of every object event of the log as a consumer reads it (committed
    /// records, in log order: per partition on Kafka), against the uids that exist at the end.
    pub async fn audited(&self, existing: &HashSet<String>) -> History {
        match self {
            Log::Kafka { brokers, topic } => {
                let (brokers, topic) = (brokers.clone(), topic.clone());
                let mut records = tokio::task::spawn_blocking(move || super::kafka::read_to_end(&brokers, &topic, Duration::from_secs(120))).await.unwrap();
                records.sort_by_key(|r| (r.partition, r.offset));
                history(&records, existing)
            }
            Log::Nats { stream } => {
                let msgs = self.messages(stream).await;
                let events = msgs.iter().filter_map(|m| {
                    let h = |name: &str| m.headers.get(name).map(|v| v.as_str());
                    Some(Event { uid: h("ce-uid")?, resource_version: h("ce-resourceversion")?, ty: h("ce-type")?, subject: h("ce-subject").unwrap_or("") })
                });
                history_of(events, existing)
            }
        }
    }

    /// Every message of the JetStream `stream`, in order.
    pub async fn messages(&self, stream: &str) -> Vec<super::nats::Msg> {
        let js = super::nats::jetstream().await;
        let last = js.get_stream(stream).await.unwrap().info().await.unwrap().state.last_sequence;
        super::nats::read_until(&js, stream, Duration::from_secs(120), |m| m.last().is_some_and(|m| m.sequence >= last)).await
    }
}
