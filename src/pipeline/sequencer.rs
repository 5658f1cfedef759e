//! Delivery order as a state machine without I/O: which received event may be sent now
//! (one send at a time per lane, markers as barriers, at most `max_in_flight` taken in).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// What the sequencer needs to know of an event.
pub trait Sequenced {
    /// The event's ordering domain.
    fn domain(&self) -> Domain<'_>;
    /// A marker: sent once everything before it is delivered, and delivered before
    /// anything after it is sent.
    fn is_barrier(&self) -> bool;
}

/// Where an event is ordered: events of one domain are delivered in the order received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain<'a> {
    /// The topic (or subject, or URL).
    pub destination: &'a str,
    /// The partition key.
    pub key: &'a str,
}

/// An event to send now, and its lane: the lane is told back once it is delivered.
#[derive(Debug)]
pub struct ToSend<T> {
    pub event: T,
    pub lane: Lane,
}

/// The ordering domain of an event, its topic and partition key, as a hash: two keys that
/// share a hash share a lane, which orders them more strictly than needed, never less.
pub type Lane = u64;

/// Hashes an event's topic and partition key into its lane: xxh3 with a seed of the
/// process's own, so that object names cannot be chosen to crowd one lane.
#[derive(Clone, Copy)]
struct LaneHash(u64);

impl LaneHash {
    fn new() -> LaneHash {
        LaneHash(RandomState::new().hash_one(0u8))
    }

    fn of(self, destination: &str, key: &str) -> Lane {
        xxh3_64_with_seed(key.as_bytes(), self.0 ^ xxh3_64(destination.as_bytes()))
    }
}

/// A lane is a hash already: the map of lanes takes it as it is.
#[derive(Default)]
struct LaneHasher(u64);

impl Hasher for LaneHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, lane: u64) {
        self.0 = lane;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A marker waits until everything before it is delivered, and everything after it waits
/// until it is: consumers see sync boundaries in order on every partition.
enum Barrier<T> {
    Down,
    /// The marker, taken in, waits for the sends before it.
    Waiting(T, Lane),
    /// The marker is the one send in flight.
    Sending,
}

/// The dispatcher's ordering rules. The driver hands it what it receives, sends what
/// [`Sequencer::next_send`] and [`Sequencer::delivered`] give, and tells it of each
/// delivery; a send that fails and is retried stays in flight in its lane, so nothing
/// changes here until it is delivered.
pub struct Sequencer<T> {
    max_in_flight: usize,
    hash: LaneHash,
    /// Received and not yet taken in (behind a barrier, or beyond `max_in_flight`), in order.
    inbox: VecDeque<T>,
    /// Lanes with an event in flight, and their later events, in arrival order.
    lanes: HashMap<Lane, VecDeque<T>, BuildHasherDefault<LaneHasher>>,
    /// Events waiting in `lanes`.
    held: usize,
    in_flight: usize,
    barrier: Barrier<T>,
    /// Nothing more joins what is in flight behind a barrier: the sink is to be asked to
    /// send it at once.
    expedite: bool,
    /// The sink was told the sequencer is full, and nothing was delivered since.
    full_told: bool,
    open: bool,
}

impl<T: Sequenced> Sequencer<T> {
    pub fn new(max_in_flight: usize) -> Self {
        Sequencer {
            max_in_flight,
            hash: LaneHash::new(),
            inbox: VecDeque::new(),
            lanes: HashMap::default(),
            held: 0,
            in_flight: 0,
            barrier: Barrier::Down,
            expedite: false,
            full_told: false,
            open: true,
        }
    }

    /// How many more events may be received now: none behind a barrier, after the input
    /// closed, or while `max_in_flight` are in flight, held or waiting.
    pub fn room(&self) -> usize {
        if !self.open || !matches!(self.barrier, Barrier::Down) {
            return 0;
        }
        self.max_in_flight.saturating_sub(self.outstanding())
    }

    /// Events received, in order.
    pub fn receive(&mut self, events: impl IntoIterator<Item = T>) {
        self.inbox.extend(events);
    }

    /// The input is closed: what was received is delivered, then the sequencer is finished.
    pub fn close(&mut self) {
        self.open = false;
    }

    /// The next event to send now, with its lane; None until a delivery or more input.
    /// Call it until None.
    pub fn next_send(&mut self) -> Option<ToSend<T>> {
        loop {
            if self.in_flight == 0
                && matches!(self.barrier, Barrier::Waiting(..))
                && let Barrier::Waiting(marker, lane) = std::mem::replace(&mut self.barrier, Barrier::Sending)
            {
                self.in_flight = 1;
                return Some(ToSend { event: marker, lane });
            }
            if !matches!(self.barrier, Barrier::Down) || self.in_flight + self.held >= self.max_in_flight {
                return None;
            }
            let event = self.inbox.pop_front()?;
            let Domain { destination, key } = event.domain();
            let lane = self.hash.of(destination, key);
            if event.is_barrier() {
                self.expedite = self.in_flight > 0;
                self.barrier = Barrier::Waiting(event, lane);
                continue;
            }
            match self.lanes.get_mut(&lane) {
                Some(queue) => {
                    queue.push_back(event);
                    self.held += 1;
                }
                None => {
                    self.lanes.insert(lane, VecDeque::new());
                    self.in_flight += 1;
                    return Some(ToSend { event, lane });
                }
            }
        }
    }

    /// The send in `lane` was delivered (or skipped by policy): its lane's next event, to
    /// send now, if any. Delivering the marker lowers its barrier.
    pub fn delivered(&mut self, lane: Lane) -> Option<ToSend<T>> {
        self.in_flight -= 1;
        self.full_told = false;
        if matches!(self.barrier, Barrier::Sending) {
            // Nothing else is in flight beside a marker: this was it.
            self.barrier = Barrier::Down;
            return None;
        }
        let queue = self.lanes.get_mut(&lane)?;
        match queue.pop_front() {
            Some(next) => {
                self.held -= 1;
                self.in_flight += 1;
                Some(ToSend { event: next, lane })
            }
            None => {
                self.lanes.remove(&lane);
                None
            }
        }
    }

    /// Whether the sink is to be asked to send what it holds at once: a barrier went up
    /// behind sends in flight.
    pub fn expedite(&self) -> bool {
        self.expedite
    }

    /// The sink was asked to expedite.
    pub fn expedited(&mut self) {
        self.expedite = false;
    }

    /// Whether `max_in_flight` events are in flight or held and the sink was not told so
    /// since the last delivery: nothing more joins what is in flight until a delivery, so a
    /// sink holding a batch open for more (a Kafka transaction) need not linger.
    pub fn full_untold(&self) -> bool {
        !self.full_told && matches!(self.barrier, Barrier::Down) && self.in_flight > 0 && self.in_flight + self.held >= self.max_in_flight
    }

    /// The sink was told the sequencer is full.
    pub fn told_full(&mut self) {
        self.full_told = true;
    }

    /// The input is closed and everything received was delivered.
    pub fn finished(&self) -> bool {
        !self.open && self.inbox.is_empty() && self.in_flight == 0 && matches!(self.barrier, Barrier::Down)
    }

    /// Sends in flight (retries waiting their backoff included).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Events taken in, waiting for the send before them in their lane.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Events received and not yet taken in.
    pub fn waiting(&self) -> usize {
        self.inbox.len()
    }

    /// Events in flight, held or waiting: what this route has not delivered yet.
    pub fn outstanding(&self) -> usize {
        self.in_flight + self.held + self.inbox.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    /// An event of the model: `seq` is its place in the input; a marker's scope is its topic.
    #[derive(Debug, Clone)]
    struct Event {
        seq: usize,
        topic: &'static str,
        key: &'static str,
        marker: bool,
    }

    impl Sequenced for Event {
        fn domain(&self) -> Domain<'_> {
            Domain { destination: self.topic, key: self.key }
        }

        fn is_barrier(&self) -> bool {
            self.marker
        }
    }

    fn event(seq: usize, topic: &'static str, key: &'static str) -> Event {
        Event { seq, topic, key, marker: false }
    }

    fn marker(seq: usize, topic: &'static str) -> Event {
        Event { seq, topic, key: "", marker: true }
    }

    fn sends(s: &mut Sequencer<Event>) -> Vec<(usize, Lane)> {
        std::iter::from_fn(|| s.next_send()).map(|t| (t.event.seq, t.lane)).collect()
    }

    #[test]
    fn a_lane_is_its_topic_and_key_and_the_map_of_lanes_keys_it_as_it_is() {
        let h = LaneHash::new();
        assert_eq!(h.of("t", "ns/a"), h.of("t", "ns/a"));
        let lanes: HashSet<Lane> = [h.of("t", "ns/a"), h.of("t", "ns/b"), h.of("u", "ns/a"), h.of("t", "ns/a\u{0}")].into();
        assert_eq!(lanes.len(), 4, "another key or topic, another lane");
        assert_ne!(LaneHash(1).of("t", "ns/a"), LaneHash(2).of("t", "ns/a"), "the seed is part of it");
        let mut hasher = LaneHasher::default();
        hasher.write_u64(42);
        assert_eq!(hasher.finish(), 42);
    }

    #[test]
    fn other_keys_go_at_once_and_a_keys_next_event_goes_when_the_one_before_is_delivered() {
        let mut s = Sequencer::new(10);
        s.receive([event(0, "t", "a"), event(1, "t", "a"), event(2, "t", "b"), event(3, "u", "a")]);
        let first = sends(&mut s);
        assert_eq!(first.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [0, 2, 3]);
        assert_eq!((s.in_flight(), s.held()), (3, 1));
        assert_eq!(s.delivered(first[1].1).map(|t| t.event.seq), None, "b has nothing after it");
        assert_eq!(s.delivered(first[0].1).map(|t| (t.event.seq, t.lane)), Some((1, first[0].1)));
        assert_eq!((s.in_flight(), s.held(), s.outstanding()), (2, 0, 2));
    }

    #[test]
    fn a_marker_goes_alone_after_everything_before_it_and_asks_once_to_expedite_those() {
        let mut s = Sequencer::new(10);
        s.receive([event(0, "t", "a"), event(1, "t", "b"), marker(2, "t"), event(3, "t", "c")]);
        let before = sends(&mut s);
        assert_eq!(before.len(), 2);
        assert!(s.expedite(), "the barrier went up behind sends in flight");
        assert_eq!(s.room(), 0, "nothing is received behind a barrier");
        s.expedited();
        assert!(!s.expedite());
        assert!(s.delivered(before[0].1).is_none());
        assert!(sends(&mut s).is_empty(), "the marker waits for b");
        assert!(s.delivered(before[1].1).is_none());
        let m = sends(&mut s);
        assert_eq!(m.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [2]);
        assert!(sends(&mut s).is_empty(), "c waits for the marker");
        assert!(s.delivered(m[0].1).is_none());
        assert_eq!(sends(&mut s).iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [3]);
        assert!(!s.expedite(), "asked once");
    }

    #[test]
    fn a_marker_with_nothing_in_flight_goes_at_once_with_nothing_to_expedite() {
        let mut s = Sequencer::new(10);
        s.receive([marker(0, "t"), event(1, "t", "a")]);
        assert_eq!(sends(&mut s).iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [0]);
        assert!(!s.expedite());
    }

    #[test]
    fn no_more_than_max_in_flight_are_taken_in_or_received_and_the_end_comes_once_all_are_delivered() {
        let mut s = Sequencer::new(3);
        assert_eq!(s.room(), 3);
        s.receive([event(0, "t", "a"), event(1, "t", "a"), event(2, "t", "b"), event(3, "t", "c")]);
        assert_eq!(s.room(), 0);
        let first = sends(&mut s);
        assert_eq!(first.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [0, 2], "a1 held, c waits beyond the bound");
        assert_eq!((s.in_flight(), s.held(), s.waiting()), (2, 1, 1));
        s.close();
        assert_eq!(s.room(), 0, "closed");
        let mut flight: Vec<Lane> = first.iter().map(|(_, lane)| *lane).collect();
        while let Some(lane) = flight.pop() {
            assert!(!s.finished());
            flight.extend(s.delivered(lane).map(|t| t.lane));
            flight.extend(sends(&mut s).into_iter().map(|(_, lane)| lane));
        }
        assert!(s.finished());
    }

    #[test]
    fn the_sink_is_to_be_told_the_sequencer_is_full_once_per_delivery() {
        let mut s = Sequencer::new(2);
        s.receive([event(0, "t", "a"), event(1, "t", "a"), event(2, "t", "b"), event(3, "t", "c")]);
        assert!(!s.full_untold(), "nothing sent yet");
        let first = sends(&mut s);
        assert_eq!(first.len(), 1, "a1 held behind a0");
        assert!(s.full_untold(), "one in flight and one held, of two");
        s.told_full();
        assert!(!s.full_untold(), "told once");
        // a0 delivered: a1 goes in its place, b is taken in: full again, to be told again.
        assert!(s.delivered(first[0].1).is_some());
        assert_eq!(sends(&mut s).len(), 1);
        assert!(s.full_untold());
        s.told_full();
        assert!(!s.full_untold());
    }

    #[test]
    fn a_barrier_is_not_fullness_the_sink_is_expedited_for_it_instead() {
        let mut s = Sequencer::new(2);
        s.receive([event(0, "t", "a"), marker(1, "t")]);
        assert_eq!(sends(&mut s).len(), 1);
        assert!(s.expedite());
        assert!(!s.full_untold());
    }

    /// What the broker stored, in order: each write names the event's `seq`.
    struct Run {
        input: Vec<Event>,
        writes: Vec<usize>,
    }

    /// Drives a sequencer as the dispatcher does, over `input`, with `choices` deciding what
    /// happens next: a batch received, or one of the sends in flight written by the broker,
    /// acknowledged, or failed (and retried, a repeat when it was written); or the sink
    /// expedited. When the choices run out, everything in flight is acknowledged in turn.
    fn run(input: Vec<Event>, max_in_flight: usize, choices: &[(u8, u8)]) -> Result<Run, TestCaseError> {
        let mut s = Sequencer::new(max_in_flight);
        // The sends in flight: the event, its lane, and whether this attempt was written.
        let mut flight: Vec<(Event, Lane, bool)> = Vec::new();
        let mut writes = Vec::new();
        let mut pending = input.iter().cloned();
        let mut choices = choices.iter();
        loop {
            while let Some(ToSend { event, lane }) = s.next_send() {
                flight.push((event, lane, false));
            }
            prop_assert_eq!(s.in_flight(), flight.len());
            prop_assert!(s.outstanding() <= max_in_flight, "{} outstanding, max {max_in_flight}", s.outstanding());
            if s.finished() {
                prop_assert!(flight.is_empty() && pending.len() == 0);
                return Ok(Run { input, writes });
            }
            let room = s.room();
            prop_assert!(room > 0 || !flight.is_empty(), "stuck: nothing in flight and no room");
            let (what, which) = choices.next().copied().unwrap_or((if flight.is_empty() { 0 } else { 1 }, 0));
            match what % 5 {
                0 if room > 0 => {
                    let batch: Vec<Event> = pending.by_ref().take(1 + usize::from(which) % room).collect();
                    if batch.is_empty() {
                        s.close();
                    }
                    s.receive(batch);
                }
                4 if s.expedite() => s.expedited(),
                what if !flight.is_empty() => {
                    let i = usize::from(which) % flight.len();
                    match what {
                        2 if !flight[i].2 => {
                            writes.push(flight[i].0.seq);
                            flight[i].2 = true;
                        }
                        3 => flight[i].2 = false,
                        _ => {
                            let (e, lane, written) = flight.swap_remove(i);
                            if !written {
                                writes.push(e.seq);
                            }
                            flight.extend(s.delivered(lane).map(|t| (t.event, t.lane, false)));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The contract's ordering (docs of the event contract, section 1 and 4), over what the
    /// broker stored.
    fn check(run: &Run) -> Result<(), TestCaseError> {
        let Run { input, writes } = run;
        let stored: HashSet<usize> = writes.iter().copied().collect();
        prop_assert_eq!(stored.len(), input.len(), "every event stored: {:?}", writes);
        // Per key, in input order; a repeat never after a newer event of the key.
        for e in input.iter().filter(|e| !e.marker) {
            let of_key: Vec<usize> = writes.iter().copied().filter(|&w| !input[w].marker && input[w].domain() == e.domain()).collect();
            let mut distinct = of_key.clone();
            distinct.dedup();
            let want: Vec<usize> = input.iter().filter(|x| !x.marker && x.domain() == e.domain()).map(|x| x.seq).collect();
            prop_assert_eq!(&distinct, &want, "key {:?}: stored {:?}", e.domain(), of_key);
        }
        // A marker after everything before it in its scope, and before everything after it
        // (the sync's events after its `sync.started`), repeats included.
        let at = |seq: usize| writes.iter().enumerate().filter(move |(_, w)| **w == seq).map(|(i, _)| i);
        for m in input.iter().filter(|e| e.marker) {
            let (first, last) = (at(m.seq).min().unwrap(), at(m.seq).max().unwrap());
            for e in input.iter().filter(|e| e.topic == m.topic && e.seq != m.seq) {
                if e.seq < m.seq {
                    prop_assert!(at(e.seq).all(|i| i < first), "{} stored after marker {}: {:?}", e.seq, m.seq, writes);
                } else {
                    prop_assert!(at(e.seq).all(|i| i > last), "{} stored before marker {}: {:?}", e.seq, m.seq, writes);
                }
            }
        }
        Ok(())
    }

    /// Two scopes (topics), four keys each, one event in eight a marker.
    fn inputs() -> impl Strategy<Value = Vec<Event>> {
        prop::collection::vec((0..2usize, 0..4usize, prop::bool::weighted(0.125)), 0..60).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(seq, (topic, key, marker))| Event { seq, topic: ["t", "u"][topic], key: if marker { "" } else { ["a", "b", "c", "d"][key] }, marker })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn any_order_of_acknowledgements_failures_and_repeats_keeps_the_contracts_order(
            input in inputs(),
            max_in_flight in 1..8usize,
            choices in prop::collection::vec(any::<(u8, u8)>(), 0..400),
        ) {
            check(&run(input, max_in_flight, &choices)?)?;
        }
    }
}
