//! What a Kafka route knows of its events' records between a failed
//! send and its retry: which records may be in the log although their delivery report
//! failed (doubtful), and which of an event's records were delivered when another of its
//! records failed. The retry of a doubtful record first looks for it in the log
//! (kafka::lookup) and sends it again only if it is not there; a delivered record is not sent
//! again. Plain data: the sink drives the I/O.

use std::collections::{HashMap, VecDeque};

use crate::model::Placement;

/// Events whose records the ledger remembers, at most: an event is forgotten once its retry
/// succeeded, so only events failing at the same time are held. Past the bound the oldest
/// is forgotten (its retry then sends again, as without the ledger).
pub const CAPACITY: usize = 65_536;

/// One record of an event: the event itself (an object event), or a marker's copy on one
/// partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Object,
    Marker(i32),
}

/// A record that may be in the log: where and since when to look for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    pub part: Part,
    pub topic: String,
    /// A timestamp (ms since the epoch) no later than the record's own: reading the topic
    /// from the first record stamped at or after it finds the record if it was written.
    pub since_ms: i64,
}

/// What to do with a record of an event about to be sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Before {
    Send,
    /// Delivered before: not sent again; where it was stored.
    Skip(Placement),
    /// Doubtful: the log must be read first.
    LookUp,
}

/// One event's account: its parts in doubt, and where its parts were delivered.
#[derive(Debug, Default)]
struct Account {
    doubts: Vec<Doubt>,
    delivered: Vec<(Part, Placement)>,
}

#[derive(Debug, Default)]
pub struct Ledger {
    events: HashMap<String, Account>,
    /// Event ids in the order they were first recorded, for the bound.
    order: VecDeque<String>,
}

impl Ledger {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    fn entry(&mut self, id: &str) -> &mut Account {
        if !self.events.contains_key(id) {
            if self.order.len() >= CAPACITY
                && let Some(oldest) = self.order.pop_front()
            {
                self.events.remove(&oldest);
            }
            self.order.push_back(id.to_string());
        }
        self.events.entry(id.to_string()).or_default()
    }

    /// A record of event `id` failed in a way that leaves open whether the broker wrote it.
    pub fn doubt(&mut self, id: &str, doubt: Doubt) {
        let entry = self.entry(id);
        entry.delivered.retain(|(c, _)| *c != doubt.part);
        if let Some(known) = entry.doubts.iter_mut().find(|d| d.part == doubt.part) {
            // The earlier floor: either attempt may be the one in the log.
            known.since_ms = known.since_ms.min(doubt.since_ms);
        } else {
            entry.doubts.push(doubt);
        }
    }

    /// A record of event `id` was delivered while another of its records failed.
    pub fn delivered(&mut self, id: &str, part: Part, at: Placement) {
        let entry = self.entry(id);
        entry.doubts.retain(|d| d.part != part);
        if !entry.delivered.iter().any(|(c, _)| *c == part) {
            entry.delivered.push((part, at));
        }
    }

    pub fn before(&self, id: &str, part: Part) -> Before {
        let Some(entry) = self.events.get(id) else { return Before::Send };
        if let Some((_, at)) = entry.delivered.iter().find(|(c, _)| *c == part) {
            return Before::Skip(*at);
        }
        if entry.doubts.iter().any(|d| d.part == part) { Before::LookUp } else { Before::Send }
    }

    /// Every doubtful record: (event id, doubt), for one read of the log.
    pub fn doubts(&self) -> Vec<(String, Doubt)> {
        self.events.iter().flat_map(|(id, e)| e.doubts.iter().map(move |d| (id.clone(), d.clone()))).collect()
    }

    /// The log was read for `doubts`: each found at its placement is delivered, each absent
    /// is no longer in doubt (it is sent again). A doubt recorded since the read stays.
    pub fn resolve(&mut self, doubts: &[(String, Doubt)], found: &HashMap<(String, Part), Placement>) {
        for (id, doubt) in doubts {
            let Some(entry) = self.events.get_mut(id) else { continue };
            match found.get(&(id.clone(), doubt.part)) {
                Some(at) => {
                    entry.doubts.retain(|d| d.part != doubt.part);
                    if !entry.delivered.iter().any(|(c, _)| *c == doubt.part) {
                        entry.delivered.push((doubt.part, *at));
                    }
                }
                None => entry.doubts.retain(|d| d != doubt),
            }
        }
    }

    /// Event `id` was delivered whole: nothing more to remember of it.
    pub fn forget(&mut self, id: &str) {
        if self.events.remove(id).is_some() {
            self.order.retain(|known| known != id);
        }
    }
}

/// What one read of the log for `doubts` found: how many records were written, how many
/// were absent.
pub fn outcome(doubts: &[(String, Doubt)], found: &HashMap<(String, Part), Placement>) -> (u64, u64) {
    let written = doubts.iter().filter(|(id, d)| found.contains_key(&(id.clone(), d.part))).count() as u64;
    (written, doubts.len() as u64 - written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doubt(part: Part, since_ms: i64) -> Doubt {
        Doubt { part, topic: "t".into(), since_ms }
    }

    const AT: Placement = Placement { partition: 1, offset: 7 };

    #[test]
    fn an_unknown_record_is_sent() {
        assert_eq!(Ledger::default().before("e", Part::Object), Before::Send);
    }

    #[test]
    fn a_doubtful_record_is_looked_up_and_then_skipped_when_found_or_sent_when_absent() {
        let mut l = Ledger::default();
        l.doubt("found", doubt(Part::Object, 10));
        l.doubt("absent", doubt(Part::Object, 20));
        assert_eq!(l.before("found", Part::Object), Before::LookUp);
        let doubts = l.doubts();
        assert_eq!(doubts.len(), 2);
        let found = HashMap::from([(("found".to_string(), Part::Object), AT)]);
        assert_eq!(outcome(&doubts, &found), (1, 1));
        l.resolve(&doubts, &found);
        assert_eq!(l.before("found", Part::Object), Before::Skip(AT));
        assert_eq!(l.before("absent", Part::Object), Before::Send);
        assert!(l.doubts().is_empty());
    }

    #[test]
    fn a_marker_copy_delivered_on_one_partition_is_skipped_while_the_failed_one_is_sent() {
        let mut l = Ledger::default();
        l.delivered("m", Part::Marker(0), Placement { partition: 0, offset: 3 });
        assert_eq!(l.before("m", Part::Marker(0)), Before::Skip(Placement { partition: 0, offset: 3 }));
        assert_eq!(l.before("m", Part::Marker(1)), Before::Send);
        l.forget("m");
        assert!(l.is_empty());
        assert_eq!(l.before("m", Part::Marker(0)), Before::Send);
    }

    #[test]
    fn a_second_doubt_keeps_the_earlier_floor_and_a_doubt_recorded_after_a_read_stays() {
        let mut l = Ledger::default();
        l.doubt("e", doubt(Part::Object, 50));
        let read = l.doubts();
        l.doubt("e", doubt(Part::Object, 40));
        assert_eq!(l.doubts()[0].1.since_ms, 40);
        // The read looked from 50; the record of the attempt from 40 may be before it.
        l.resolve(&read, &HashMap::new());
        assert_eq!(l.before("e", Part::Object), Before::LookUp);
    }

    #[test]
    fn the_ledger_holds_at_most_its_capacity_forgetting_the_oldest() {
        let mut l = Ledger::default();
        for i in 0..=CAPACITY {
            l.doubt(&i.to_string(), doubt(Part::Object, 1));
        }
        assert_eq!(l.events.len(), CAPACITY);
        assert_eq!(l.before("0", Part::Object), Before::Send);
        assert_eq!(l.before(&CAPACITY.to_string(), Part::Object), Before::LookUp);
    }
}
