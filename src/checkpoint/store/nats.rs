//! PLACEHOLDER being written: replaced before this lands.

use std::collections::HashMap;

use super::StoreError;
use crate::checkpoint::progress::Records;
use crate::config::NatsConfig;

pub struct NatsStore {
    bucket: String,
}

impl NatsStore {
    pub async fn open(_config: &NatsConfig, bucket: &str) -> Result<NatsStore, StoreError> {
        Ok(NatsStore { bucket: bucket.to_string() })
    }

    pub async fn load(&self, _prefix: &str) -> Result<HashMap<String, Vec<u8>>, StoreError> {
        Err(StoreError::Nats { bucket: self.bucket.clone(), reason: "not written yet".into() })
    }

    pub async fn write(&self, _records: &Records) -> Result<(), StoreError> {
        Err(StoreError::Nats { bucket: self.bucket.clone(), reason: "not written yet".into() })
    }
}
