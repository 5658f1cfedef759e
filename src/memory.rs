//! Heap memory handed back to the system. glibc's malloc keeps what a burst freed (the
//! initial sync of a large index: list pages, events in flight, checkpoint records) in
//! its arenas, interleaved with the index that stays, so without this the process's RSS
//! stays at the burst's peak for good. Every `TRIM_EVERY` the free pages of every arena
//! are returned (`malloc_trim`); pages in use are never touched. Other allocators and
//! other C libraries return memory by themselves: there this does nothing.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often free heap pages are returned: soon enough after an initial sync or a relist
/// that the steady RSS shows it, rarely enough that its cost (a walk of the free lists,
/// well under a millisecond at 100,000 objects) is nothing.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Returns free heap pages every `TRIM_EVERY` until `stop`.
pub async fn trim_periodically(stop: CancellationToken) {
    let mut every = tokio::time::interval(TRIM_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => trim(),
        }
    }
}

/// Returns the free pages of every malloc arena to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() {
    // SAFETY: malloc_trim only reads and releases glibc's own free lists; it takes each
    // arena's lock as malloc does.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_small_allocations_that_malloc_kept_are_returned() {
        // 64 MB in small pieces (below the mmap threshold, so malloc keeps them), every
        // other one kept, then all freed but one at the end: without a trim the arena
        // keeps them (its top is in use).
        let mut pieces: Vec<Vec<u8>> = (0..64 * 1024).map(|i| vec![i as u8; 1024]).collect();
        let last = vec![1u8; 1024];
        let before = rss_kib();
        pieces.clear();
        pieces.shrink_to_fit();
        let freed = rss_kib();
        trim();
        let trimmed = rss_kib();
        drop(last);
        assert!(freed + 16 * 1024 > before, "malloc kept the freed pieces ({before} -> {freed} KiB): the test shows nothing");
        assert!(trimmed + 32 * 1024 < freed, "a trim returns them: {freed} -> {trimmed} KiB");
    }

    #[tokio::test(start_paused = true)]
    async fn the_trimmer_stops_when_told() {
        let stop = CancellationToken::new();
        let task = tokio::spawn(trim_periodically(stop.clone()));
        tokio::time::sleep(TRIM_EVERY * 3).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("stopped").unwrap();
    }
}
