//! Topics and metadata: creating missing topics, the partitions of a topic, the brokers.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::Producer;
use rdkafka::util::Timeout;

use super::KafkaSink;
use super::error::{client_refused, explain};
use crate::broker::kafka::{ClientRole, QuietContext, client_config};
use crate::config::KafkaConfig;
use crate::sink::{ErrorKind, Failure, SendError, SinkError};

/// Creates the missing topics among `topics` with the configured partitions.
pub async fn create_topics(cfg: &KafkaConfig, topics: &[String]) -> Result<(), SinkError> {
    let Some(tc) = &cfg.create_topics else { return Ok(()) };
    let config = client_config(cfg, ClientRole::Producer)?;
    let admin: AdminClient<QuietContext> = config.create_with_context(QuietContext::default()).map_err(|e| client_refused("admin client", &config, e))?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| tc.config.iter().fold(NewTopic::new(t, tc.partitions, TopicReplication::Fixed(tc.replication_factor)), |n, (k, v)| n.set(k, v)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin.create_topics(&new, &opts).await.map_err(|e| explain(admin.inner().context(), e))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, source)) => return Err(SinkError::TopicNotCreated { topic, source }),
        }
    }
    Ok(())
}

/// A blocking metadata call's task that failed.
fn metadata_task_failed(e: tokio::task::JoinError) -> SendError {
    SendError::Retryable { kind: ErrorKind::Metadata, source: Failure::Blocking(e) }
}

impl KafkaSink {
    /// The partitions of `topic`, from fresh metadata (markers are rare; partitions may
    /// have been added since the last one).
    pub(super) async fn partitions(&self, topic: &str) -> Result<Vec<i32>, SendError> {
        let producer = self.producer();
        let topic = topic.to_string();
        let md = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(Some(&topic), Timeout::After(Duration::from_secs(10)))
                .map(|md| md.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>()))
        })
        .await
        .map_err(metadata_task_failed)?
        .map_err(|e| explain(self.context(), e))?;
        match md {
            Some(p) if !p.is_empty() => Ok(p),
            _ => Err(SendError::Retryable { kind: ErrorKind::Metadata, source: Failure::NoPartitions }),
        }
    }

    /// Broker metadata within `timeout`: the sink is connected when this succeeds.
    /// A failure names the client's latest connection error (refused credentials, failed
    /// TLS) when there is one.
    pub async fn probe(&self, timeout: Duration) -> Result<usize, SinkError> {
        let producer = self.producer();
        let md = tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, Timeout::After(timeout)))
            .await
            .map_err(metadata_task_failed)?
            .map_err(|e| explain(self.context(), e))?;
        self.context().clear_cause();
        Ok(md.brokers().len())
    }

    /// Partition counts of `topics` (None when a topic does not exist), for `check`.
    pub async fn topic_partitions(&self, topics: Vec<String>) -> Result<Vec<(String, Option<usize>)>, SinkError> {
        let (producer, context) = (self.producer(), self.context().clone());
        let found = tokio::task::spawn_blocking(move || {
            let md = producer.client().fetch_metadata(None, Timeout::After(Duration::from_secs(10))).map_err(|e| explain(&context, e))?;
            Ok::<_, SendError>(
                topics
                    .into_iter()
                    .map(|t| {
                        let n = md.topics().iter().find(|m| m.name() == t && m.error().is_none()).map(|m| m.partitions().len());
                        (t, n)
                    })
                    .collect(),
            )
        })
        .await
        .map_err(metadata_task_failed)??;
        Ok(found)
    }
}
