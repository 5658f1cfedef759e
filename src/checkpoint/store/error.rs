//! Why a checkpoint store could not be opened, read or written.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("checkpoint file {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint topic {topic}: {reason}")]
    Kafka { topic: String, reason: String },
    #[error("checkpoint bucket {bucket}: {reason}")]
    Nats { bucket: String, reason: String },
    /// The store exists in a shape deltaship cannot use, or may not be created: retrying
    /// does not help.
    #[error("checkpoint {store} cannot be used: {reason}")]
    Refused { store: String, reason: String },
}

impl StoreError {
    /// Whether retrying cannot help (the store must be fixed first).
    pub fn is_permanent(&self) -> bool {
        matches!(self, StoreError::Refused { .. })
    }
}
