//! Why a list or watch of the API server failed: the watch stage's error.

use kube::core::Status;

/// A failed list or watch request; the watch lists or watches again after it (the pipeline's
/// worker backs off), and `FailureKind::of` turns it into the bounded `error_kind` label.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("listing the objects failed: {0}")]
    InitialListFailed(#[source] kube::Error),
    #[error("starting the watch failed: {0}")]
    WatchStartFailed(#[source] kube::Error),
    /// An `ERROR` event in the watch's stream (410 Gone among them).
    #[error("the API server ended the watch with an error: {0}")]
    ErrorEvent(#[source] Box<Status>),
    #[error("the watch's connection failed: {0}")]
    WatchFailed(#[source] kube::Error),
    #[error("the list has no metadata.resourceVersion; the resource may not support watch (check its verbs with `kubectl api-resources -o wide`)")]
    NoResourceVersion,
}
