//! How a run of the bridge fails: each start-up step's error, a sink's, a delivery's, a lost
//! lease, a panicked task.

use crate::leader::LeaderError;
use crate::plan;
use crate::sink::SinkError;
use crate::telemetry;
use crate::watch::{access::AccessError, client::ApiClientError, discovery::DiscoveryError};

use super::dispatch::DispatchError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Client(#[from] ApiClientError),
    #[error("API server unreachable: {0}")]
    ApiServer(#[source] kube::Error),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error("{at}: {source}")]
    Sink { at: String, source: SinkError },
    #[error(transparent)]
    Http(#[from] telemetry::HttpError),
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    #[error("resume.key_file: {0}")]
    CheckpointKey(#[source] crate::config::DigestKeyError),
    #[error("cannot listen for signals: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("leadership lost: stopped publishing; restart to stand by again")]
    LeadershipLost,
    #[error("the task `{task}` panicked ({message}); stopped: this is a bug, please report it")]
    TaskPanicked { task: String, message: String },
}
