//! Repeats told apart from new events in memory that does not grow with the stream.
//!
//! The event contract's repeat is exact (same id, same content) and never arrives after a
//! newer event of the same key. So a repeat is the last event of its object, or of its
//! marker scope, while the consumer still holds that (the protocol's state keeps that id
//! beside each object and marker scope), and otherwise one of the latest ids: a [`Window`].

use std::collections::HashSet;

/// How many of the latest event ids a consumer remembers beyond the last id of each object
/// and marker scope it holds: the most events deltaship keeps unacknowledged on a route
/// (`delivery.max_in_flight` at its maximum). A repeat on Kafka (a route without transactions,
/// through a broker restart) is a re-send of one of those, so fewer come between it and its
/// original.
pub(super) const REPEAT_WINDOW: usize = 100_000;

/// An event id on its partition (a Kafka marker has one id on every partition).
type Seen = (i32, String);

/// The latest event ids, in two generations of at most `size` ids each: when the current
/// one is full it becomes the previous one and the oldest is dropped, so the latest `size`
/// ids are always remembered and never more than `2 * size`. The dropped generation's table
/// is kept, emptied, for the next: the two tables are allocated once, and the memory a
/// follower holds does not swing as they would be freed and grown again.
#[derive(Debug)]
pub(super) struct Window {
    size: usize,
    current: HashSet<Seen>,
    previous: HashSet<Seen>,
}

impl Default for Window {
    fn default() -> Window {
        Window::new(REPEAT_WINDOW)
    }
}

impl Window {
    pub(super) fn new(size: usize) -> Window {
        assert!(size > 0, "a repeat window of 0 ids remembers nothing");
        Window { size, current: HashSet::new(), previous: HashSet::new() }
    }

    pub(super) fn contains(&self, seen: &Seen) -> bool {
        self.current.contains(seen) || self.previous.contains(seen)
    }

    pub(super) fn add(&mut self, seen: Seen) {
        if self.current.len() >= self.size {
            std::mem::swap(&mut self.previous, &mut self.current);
            self.current.clear();
        }
        self.current.insert(seen);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(i: usize) -> Seen {
        (0, format!("{i:032x}"))
    }

    #[test]
    fn the_window_remembers_the_latest_ids_and_never_more_than_twice_its_size() {
        let mut w = Window::new(1000);
        for i in 0..10_500 {
            w.add(seen(i));
            assert!(w.len() <= 2000);
        }
        assert!((9500..10_500).all(|i| w.contains(&seen(i))), "one of the latest 1000 forgotten");
        assert!(!w.contains(&seen(0)) && !w.contains(&(1, seen(10_499).1)));
    }

    #[test]
    fn a_new_generation_reuses_the_dropped_ones_table() {
        let mut w = Window::new(1000);
        (0..2001).for_each(|i| w.add(seen(i)));
        // 2000 filled two generations; 2000 began a third in the first one's table.
        assert_eq!(w.current.len(), 1);
        assert!(w.current.capacity() >= 1000, "a fresh table for the new generation: {}", w.current.capacity());
    }
}
