//! Stall detection: whether a watch still follows the API server's history, judged from
//! plain data (its position, the API server's current version, how long it heard nothing).
//! The list-watch loop (`stream.rs`) asks the API server and acts; the rules are here.

use std::time::Duration;

use kube::core::Status;

use crate::model::StallReason;

/// How long a watch may hear nothing (no event, no bookmark) before the API server is asked
/// where it stands, and again as long as the silence lasts: more than the period of the
/// API server's bookmarks (its watch cache sends one about every minute).
pub const CHECK_AFTER: Duration = Duration::from_secs(75);

/// How long a watch may hear nothing while the API server's version has moved past its
/// position before it is given up and listed again: two bookmarks missed at the slowest
/// pace measured (one every 120 s: docs/operations/monitoring.md).
pub const SILENCE_LIMIT: Duration = Duration::from_secs(240);

/// How long after a first answer behind the watch's position the API server is asked again
/// before the history counts as replaced: a replaced history stays behind for far longer.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(5);

/// The verdict on a watch at `position` that has heard nothing for `silent_for`, the API
/// server's current version (a consistent read) being `current`; `None`: keep watching.
/// A consistent read is never behind what any watch of the same history saw, so `current`
/// below `position` means the history was replaced (etcd restored from a backup): the watch
/// would wait for versions the API server issues to other changes. Versions that are not
/// numbers are opaque and never compared.
pub fn judge(position: &str, current: &str, silent_for: Duration) -> Option<StallReason> {
    let (Ok(position), Ok(current)) = (position.parse::<u64>(), current.parse::<u64>()) else { return None };
    if current < position {
        Some(StallReason::Ahead)
    } else if current > position && silent_for >= SILENCE_LIMIT {
        Some(StallReason::Silent)
    } else {
        None
    }
}

/// The verdict on a watch from `position` that the API server refused as "Too large
/// resource version" (`too_large`), its current version being `current`: a replaced
/// history when `current` is behind `position`; otherwise this API server lags behind the
/// others (its cache) and a retry is the answer (`None`).
pub fn judge_too_large(position: &str, current: &str) -> Option<StallReason> {
    judge(position, current, Duration::ZERO).filter(|r| *r == StallReason::Ahead).map(|_| StallReason::TooLarge)
}

/// Whether the API server refused a watch or list because its version is ahead of what it
/// has (504 with the cause `ResourceVersionTooLarge`, or older servers' message alone).
pub fn too_large(status: &Status) -> bool {
    status.code == 504
        && (status.message.contains("Too large resource version")
            || status.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "ResourceVersionTooLarge")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: Duration = Duration::from_secs(5);

    #[test]
    fn an_api_server_behind_the_watchs_position_has_another_history() {
        assert_eq!(judge("500", "420", QUIET), Some(StallReason::Ahead));
        assert_eq!(judge("500", "420", SILENCE_LIMIT * 2), Some(StallReason::Ahead), "silent or not");
        assert_eq!(judge_too_large("500", "420"), Some(StallReason::TooLarge));
    }

    #[test]
    fn a_watch_silent_past_the_limit_while_the_api_server_moved_on_is_stalled() {
        assert_eq!(judge("500", "501", SILENCE_LIMIT), Some(StallReason::Silent));
        assert_eq!(judge("500", "501", SILENCE_LIMIT - Duration::from_millis(1)), None, "within the limit");
        assert_eq!(judge("500", "500", SILENCE_LIMIT * 10), None, "nothing happened: a quiet cluster, not a stall");
    }

    #[test]
    fn a_lagging_api_server_or_opaque_versions_are_no_stall() {
        assert_eq!(judge_too_large("500", "500"), None, "etcd has the version: this API server's cache lags; retry");
        assert_eq!(judge_too_large("500", "900"), None);
        assert_eq!(judge("x7", "3", SILENCE_LIMIT), None);
        assert_eq!(judge("500", "", SILENCE_LIMIT), None);
    }

    #[test]
    fn too_large_is_read_from_the_status_cause_or_its_message() {
        let status = |v: serde_json::Value| -> Status { serde_json::from_value(v).unwrap() };
        let cause = status(serde_json::json!({"code": 504, "reason": "Timeout", "message": "Timeout: Too large resource version: 900, current: 420",
            "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}}));
        assert!(too_large(&cause));
        assert!(too_large(&status(serde_json::json!({"code": 504, "message": "Too large resource version: 900, current: 420"}))));
        assert!(!too_large(&status(serde_json::json!({"code": 504, "reason": "Timeout", "message": "the server was unable to return a response in time"}))));
        assert!(!too_large(&status(serde_json::json!({"code": 410, "message": "too old resource version: 1 (420)"}))));
    }
}
