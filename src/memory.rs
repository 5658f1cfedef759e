//! Heap memory handed back to the system. glibc's malloc keeps what a burst freed (the
//! initial sync of a large index: list pages, events in flight, checkpoint records) in its
//! arenas, interleaved with the index that stays, so without this the process's RSS stays
//! at the burst's peak for good. Every `CHECK_EVERY` the trimmer looks at the part of RSS
//! that the heap's allocations do not hold (code, stacks, and the free memory malloc
//! keeps); once it grew by `TRIM_AFTER_GROWTH` since the last trim (a burst freed its
//! memory), the free pages of every arena are returned (`malloc_trim`); pages in use are
//! never touched. In the middle of a burst, or at a steady rate, RSS and the allocations
//! grow alike and nothing is trimmed, so pages malloc reuses are not given back only to be
//! faulted in again. Other allocators and other C libraries return memory by themselves:
//! there this does nothing.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::telemetry::{heap_allocated_bytes, resident_bytes};

/// How often the heap is looked at: soon enough after an initial sync or a relist that the
/// steady RSS shows the trim.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// How much the part of RSS the allocations do not hold must have grown since the last trim
/// for the next one: a burst's worth.
pub const TRIM_AFTER_GROWTH: u64 = 8 << 20;

/// Returns free heap pages after each burst, looking every `CHECK_EVERY` until `stop`.
pub async fn trim_periodically(stop: CancellationToken) {
    let mut every = tokio::time::interval(CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut floor = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {
                if grew(floor, unheld()) {
                    trim();
                    floor = unheld();
                }
            }
        }
    }
}

/// The part of RSS the heap's allocations do not hold; `None` where either is unknown
/// (another C library: nothing to trim).
fn unheld() -> Option<u64> {
    let allocated = heap_allocated_bytes()?;
    Some(resident_bytes()?.saturating_sub(allocated))
}

/// Whether the part of RSS the allocations do not hold (`now`) grew by a burst's worth over
/// `floor`, its size after the last trim. The first look trims; nothing known, nothing is.
fn grew(floor: Option<u64>, now: Option<u64>) -> bool {
    match (floor, now) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(floor), Some(now)) => now >= floor + TRIM_AFTER_GROWTH,
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
        resident_bytes().unwrap() / 1024
    }

    const MB: u64 = 1 << 20;

    #[test]
    fn a_burst_worth_of_memory_freed_and_kept_is_trimmed() {
        assert!(grew(None, Some(20 * MB)), "the first look trims");
        // A sync's end: RSS stays, the allocations fall.
        assert!(grew(Some(20 * MB), Some(20 * MB + TRIM_AFTER_GROWTH)));
        assert!(!grew(Some(20 * MB), Some(20 * MB + TRIM_AFTER_GROWTH - 1)), "less than a burst's worth");
        assert!(!grew(Some(20 * MB), Some(12 * MB)), "returned by itself");
        assert!(!grew(Some(20 * MB), None), "another C library: nothing to trim");
        assert!(!grew(None, None));
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
        tokio::time::sleep(CHECK_EVERY * 3).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("stopped").unwrap();
    }
}
