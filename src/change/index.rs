//! The index: for each object key, what was last handed to the sink.

use std::collections::HashMap;

use bytes::Bytes;

use super::Compact;

/// What the index keeps per object: enough to classify the next change and to infer a
/// delete. The shipped content only where a feature needs it (resync, patch payloads), so
/// memory stays small per object otherwise (about 200 bytes in the usual shapes with the
/// key and the hash table's share: no allocation but the key's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub uid: Compact,
    pub resource_version: Compact,
    pub fingerprint: u128,
    pub content: Option<Bytes>,
}

#[derive(Debug, Default)]
pub struct Index {
    entries: HashMap<Box<str>, Entry>,
}

impl Index {
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.entries.get_mut(key)
    }

    /// Inserts or replaces; returns the replaced entry. A replaced entry keeps its key, so
    /// an update (the usual live change) does not re-allocate `key` into the map's form.
    pub fn insert(&mut self, key: String, entry: Entry) -> Option<Entry> {
        match self.entries.get_mut(key.as_str()) {
            Some(existing) => Some(std::mem::replace(existing, entry)),
            None => self.entries.insert(key.into_boxed_str(), entry),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Entry> {
        self.entries.remove(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(k, e)| (&**k, e))
    }

    /// Every entry, in key order.
    pub fn sorted(&self) -> Vec<(&str, &Entry)> {
        let mut all: Vec<_> = self.entries.iter().map(|(k, e)| (&**k, e)).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all
    }

    /// Removes and returns the entries whose key `keep` rejects (in key order, so that
    /// inferred deletes come out in a stable order).
    pub fn drain_unless(&mut self, keep: impl Fn(&str) -> bool) -> Vec<(String, Entry)> {
        let mut gone: Vec<Box<str>> = self.entries.keys().filter(|k| !keep(k)).cloned().collect();
        gone.sort();
        gone.into_iter().filter_map(|k| self.entries.remove(&k).map(|e| (k.into(), e))).collect()
    }
}
