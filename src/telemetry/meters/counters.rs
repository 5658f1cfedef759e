//! Handles registered on first use: a metric's series of one owner, told apart by a key from
//! a bounded set, or by the resource of an event.

use std::collections::HashMap;
use std::sync::Arc;

use metrics::Counter;

/// Counters of one metric and one owner, told apart by a key from a bounded set (a reason,
/// a change type): each registered on its first increment and reused after. Looking a
/// counter up by its labels allocates them, which the per-event path must not do;
/// registering ahead would show series that never counted.
#[derive(Debug)]
pub struct Counters<K>(Vec<(K, Counter)>);

impl<K> Default for Counters<K> {
    fn default() -> Self {
        Counters(Vec::new())
    }
}

impl<K: Copy + PartialEq> Counters<K> {
    /// Adds `n` to the counter of `key`, registered by `register` the first time.
    pub fn increment(&mut self, key: K, n: u64, register: impl FnOnce(K) -> Counter) {
        // A scan: the keys are a handful (an enum's variants).
        match self.0.iter().find(|(k, _)| *k == key) {
            Some((_, c)) => c.increment(n),
            None => {
                let c = register(key);
                c.increment(n);
                self.0.push((key, c));
            }
        }
    }
}

/// Counters of one metric and one owner by resource (and whatever else the owner fixed):
/// looked up by a borrowed resource, without a copy, and registered on the first increment.
#[derive(Debug, Default)]
pub struct PerResource(HashMap<Arc<str>, Counter>);

impl PerResource {
    /// Adds one to the counter of `resource`, registered by `register` the first time.
    pub fn increment(&mut self, resource: &Arc<str>, register: impl FnOnce(Arc<str>) -> Counter) {
        match self.0.get(&**resource) {
            Some(c) => c.increment(1),
            None => {
                let c = register(resource.clone());
                c.increment(1);
                self.0.insert(resource.clone(), c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn each_key_is_registered_once_and_counts_every_increment() {
        let (a, b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut registered = Vec::new();
        let mut counters = Counters::default();
        for reason in ["a", "b", "a", "a"] {
            counters.increment(reason, 1, |r| {
                registered.push(r);
                Counter::from_arc(if r == "a" { a.clone() } else { b.clone() })
            });
        }
        assert_eq!(registered, ["a", "b"]);
        assert_eq!((a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)), (3, 1));
    }

    #[test]
    fn each_resource_is_registered_once_and_counts_every_increment() {
        let count = Arc::new(AtomicU64::new(0));
        let mut registered = Vec::new();
        let mut counters = PerResource::default();
        for resource in ["pods", "pods", "configmaps", "pods"] {
            counters.increment(&Arc::from(resource), |r| {
                registered.push(r.to_string());
                Counter::from_arc(count.clone())
            });
        }
        assert_eq!(registered, ["pods", "configmaps"]);
        assert_eq!(count.load(Ordering::Relaxed), 4);
    }
}
