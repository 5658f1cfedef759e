//! Why a watch stopped following the API server and lists again (detected in `watch/stall.rs`).

/// A watch given up on while it looked connected: what the watch stage found, for the log,
/// the `deltaship_watch_stalls_total` counter and /readyz. A list follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub reason: StallReason,
    /// The watch's position: the version it watched from or last saw.
    pub position: String,
    /// The API server's current version when the stall was found.
    pub current: String,
}

/// The bounded `reason` label of `deltaship_watch_stalls_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StallReason {
    /// Nothing arrived (no event, no bookmark) for the silence limit while the API server's
    /// version moved past the watch's position.
    Silent,
    /// The API server's current version is behind the watch's position: its history was
    /// replaced (etcd restored from a backup, the cluster re-created).
    Ahead,
    /// The API server answered "Too large resource version" and its current version is
    /// behind the watch's position (a history replaced, found on a reconnect).
    TooLarge,
}

impl StallReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StallReason::Silent => "silent",
            StallReason::Ahead => "ahead",
            StallReason::TooLarge => "too_large",
        }
    }

    /// The API server's history no longer continues the watch's: what was shipped may hold
    /// versions and objects that the API server never had in its present history.
    pub fn rewound(self) -> bool {
        matches!(self, StallReason::Ahead | StallReason::TooLarge)
    }
}
