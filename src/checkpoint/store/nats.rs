//! A NATS route's checkpoint: a JetStream key-value bucket on the route's servers, read back
//! with one ordered consumer of the last value per key.

use std::collections::HashMap;
use std::error::Error as _;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::context::{CreateKeyValueErrorKind, KeyValueError, KeyValueErrorKind};
use async_nats::jetstream::{self, kv, stream};
use bytes::Bytes;
use futures::StreamExt as _;

use super::error::{BucketError, Refusal, StoreError};
use super::inflight::{self, STALL, Stop};
use crate::broker::nats::{client, is_stream_not_found};
use crate::checkpoint::progress::Records;
use crate::config::{NatsConfig, Storage};

/// Puts sent and not yet acknowledged, at most: under the JetStream context's own bound
/// (5,000 acks in flight, beyond which a publish waits for the oldest).
const WINDOW: usize = 1_000;

/// The header that marks a key-value entry as deleted (`DEL`) or purged (`PURGE`): the
/// key-value protocol of JetStream (ADR-8).
const OPERATION: &str = "KV-Operation";

pub struct NatsStore {
    bucket: String,
    /// Boxed: its stream's info is large (1.6 kB), and `Store` holds one of three stores.
    kv: Box<kv::Store>,
    jetstream: jetstream::Context,
}

impl NatsStore {
    /// Connects with the sink's settings (auth, TLS), and creates the bucket when missing:
    /// one value per key, stored and replicated as the sink's stream is.
    pub async fn open(cfg: &NatsConfig, bucket: &str) -> Result<NatsStore, StoreError> {
        let fail = |source: BucketError| StoreError::Nats { bucket: bucket.to_string(), source };
        let client = client(cfg).await.map_err(|e| fail(e.into()))?;
        let jetstream = jetstream::ContextBuilder::new().timeout(Duration::from_secs(cfg.jetstream.ack_timeout_secs)).build(client);
        let kv = match jetstream.get_key_value(bucket).await {
            Ok(kv) => kv,
            Err(e) if bucket_missing(&e) => {
                let config = kv::Config {
                    bucket: bucket.to_string(),
                    description: "deltaship checkpoints: what each route's sink acknowledged".into(),
                    history: 1,
                    storage: match cfg.jetstream.storage {
                        Storage::File => stream::StorageType::File,
                        Storage::Memory => stream::StorageType::Memory,
                    },
                    num_replicas: cfg.jetstream.replicas,
                    ..Default::default()
                };
                let created = jetstream.create_key_value(config).await.map_err(|e| match e.kind() {
                    CreateKeyValueErrorKind::TimedOut => fail(BucketError::CreateTimedOut(e)),
                    _ => fail(BucketError::CreateRefused { bucket: bucket.to_string(), source: e }),
                })?;
                tracing::info!(bucket, "Created the checkpoint bucket");
                created
            }
            Err(e) if e.kind() == KeyValueErrorKind::InvalidStoreName => {
                return Err(StoreError::Refused { store: format!("bucket {bucket}"), reason: Refusal::NotABucket });
            }
            Err(e) => return Err(fail(BucketError::Lookup(e))),
        };
        Ok(NatsStore { bucket: bucket.to_string(), kv: Box::new(kv), jetstream })
    }

    /// The bucket's current values under `prefix`: an ordered consumer of the last message
    /// of every key under it, read until none is pending (one request per batch, not per key).
    pub async fn load(&self, prefix: &str) -> Result<HashMap<String, Vec<u8>>, StoreError> {
        let fail = |source: BucketError| StoreError::Nats { bucket: self.bucket.clone(), source };
        let config = pull::OrderedConfig {
            filter_subject: format!("{}{prefix}.>", self.kv.prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..Default::default()
        };
        let consumer = self.kv.stream.create_consumer(config).await.map_err(|e| fail(unread("cannot read it", e)))?;
        let mut pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.map_err(|e| fail(unread("cannot read it", e)))?;
        let mut latest = HashMap::new();
        while pending > 0 {
            let message = match tokio::time::timeout(STALL, messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Err(fail(unread("reading failed", e))),
                Ok(None) => return Err(fail(BucketError::Ended)),
                Err(_) => return Err(fail(BucketError::Silent { within: STALL, pending })),
            };
            pending = message.info().map_err(|e| fail(unread("a message without its metadata", e)))?.pending;
            let Some(key) = message.subject.strip_prefix(self.kv.prefix.as_str()) else { continue };
            let deleted = message.headers.as_ref().and_then(|h| h.get(OPERATION)).is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
            if !deleted {
                latest.insert(key.to_string(), message.payload.to_vec());
            }
        }
        Ok(latest)
    }

    /// Puts and deletes the records in order, and waits until the stream stored all of them.
    pub async fn write(&self, records: &Records) -> Result<(), StoreError> {
        let sent = inflight::in_order(records, WINDOW, |(key, value)| async move {
            let subject = format!("{}{key}", self.kv.prefix);
            let ack = match value {
                Some(v) => self.jetstream.publish(subject, Bytes::copy_from_slice(v)).await?,
                None => {
                    let mut headers = HeaderMap::new();
                    headers.insert(OPERATION, "DEL");
                    self.jetstream.publish_with_headers(subject, headers, Bytes::new()).await?
                }
            };
            Ok(async move { ack.await.map(drop) })
        })
        .await;
        let source = match sent {
            Ok(()) => return Ok(()),
            Err(Stop::Stalled) => BucketError::Unacknowledged(STALL),
            Err(Stop::Failed(e)) => BucketError::NotWritten(e),
        };
        Err(StoreError::Nats { bucket: self.bucket.clone(), source })
    }
}

/// Reading the bucket failed while doing `what`.
fn unread(what: &'static str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BucketError {
    BucketError::Read { what, source: e.into() }
}

/// Whether looking up a bucket failed because its stream does not exist.
fn bucket_missing(e: &KeyValueError) -> bool {
    e.kind() == KeyValueErrorKind::GetBucket && e.source().is_some_and(is_stream_not_found)
}
