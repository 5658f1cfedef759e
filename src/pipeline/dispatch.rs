//! Delivery: sends in the order the sequencer (`pipeline/sequencer.rs`) gives, retries with
//! backoff, applies the oversize and client-error policies, and moves the checkpoint. The sends
//! (encoding, the client's enqueue, the wait for the acknowledgement) are futures this task
//! polls, not tasks of their own: encoding and the enqueue cost less than the client's own
//! work per event, and the acknowledgements of many sends wake this task once instead of
//! one task each (BENCHMARKS.md measures both ways).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;

use super::retry::RetryPolicy;
use super::sequencer::{Domain, Lane, Sequenced, Sequencer, ToSend};
use crate::checkpoint::Progress;
use crate::config::OversizePolicy;
use crate::event::{self, Envelope, EnvelopeKind};
use crate::model::Placement;
use crate::sink::{ErrorKind, Failure, Publisher, SendError};
use crate::telemetry::RouteHealth;
use crate::telemetry::meters::DispatchMeters;

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("the sink refused an event of {resource} for good ({kind}): {source}; fix the cause and restart (the initial sync re-delivers current state)")]
    SinkFatal {
        resource: String,
        kind: ErrorKind,
        #[source]
        source: Failure,
    },
}

impl Sequenced for Envelope {
    fn domain(&self) -> Domain<'_> {
        Domain { destination: &self.destination, key: self.key() }
    }

    fn is_barrier(&self) -> bool {
        matches!(self.kind, EnvelopeKind::Marker(_))
    }
}

/// How often the gauges are refreshed while nothing is taken from the queue: more often
/// than any scrape.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

struct Outcome {
    env: Envelope,
    lane: Lane,
    result: Result<Option<Placement>, SendError>,
    attempt: u32,
    started: Instant,
}

pub struct Dispatcher<P> {
    sink: Arc<P>,
    max_in_flight: usize,
    oversize: OversizePolicy,
    retry: RetryPolicy,
    health: RouteHealth,
    /// The `route` metric label.
    route: String,
    /// The route's checkpoint progress, moved by each acknowledgement.
    progress: Option<Arc<Progress>>,
}

impl<P: Publisher> Dispatcher<P> {
    /// The dispatcher of one route: `health` is that route's.
    pub fn new(sink: P, max_in_flight: usize, oversize: OversizePolicy, retry: RetryPolicy, health: RouteHealth) -> Self {
        Dispatcher { sink: Arc::new(sink), max_in_flight, oversize, retry, route: health.name().to_string(), health, progress: None }
    }

    /// Moves `progress` with every event the sink acknowledges (or skips by policy).
    pub fn with_progress(mut self, progress: Arc<Progress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Delivers everything received on `rx` until it is closed and drained, in the order
    /// the sequencer gives.
    pub async fn run(self, mut rx: mpsc::Receiver<Envelope>) -> Result<(), DispatchError> {
        let mut meters = DispatchMeters::new(&self.route, self.sink.name());
        let mut order = Sequencer::new(self.max_in_flight);
        // This task is the only writer of the route's queue gauge: while it takes nothing
        // from the queue (every slot in flight, a barrier up), the watches may still fill
        // it, so the gauges are refreshed on a timer meanwhile.
        let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + REFRESH_EVERY, REFRESH_EVERY);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Dropped on return (a fatal error): the sends still running are abandoned with it.
        let mut in_flight = FuturesUnordered::new();
        // Taken from the queue many at a time, so that the workers filling it are woken
        // once per batch rather than once per event.
        let mut batch: Vec<Envelope> = Vec::new();
        loop {
            while let Some(ToSend { event, lane }) = order.next_send() {
                in_flight.push(self.attempt(event, lane, 0, None));
            }
            // Told in the select once `in_flight` has nothing ready, so that the sends just
            // pushed were polled (FuturesUnordered may pause before polling them all: the
            // sink takes it as "do not linger", never as "end the batch now").
            let tell_full = order.full_untold();
            meters.outstanding(order.in_flight(), order.held(), rx.len() + order.waiting());
            self.health.set_outstanding(order.outstanding());
            if order.finished() {
                return Ok(());
            }
            let room = order.room();
            if room == 0 && in_flight.is_empty() {
                // Unreachable in practice (a barrier is sent when nothing is in flight, and
                // what is received is taken in while there is room); guard against a busy
                // loop all the same.
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    let lane = done.lane;
                    match self.settle(done, &mut meters) {
                        Verdict::Retry(env, attempt, delay) => in_flight.push(self.attempt(env, lane, attempt, Some(delay))),
                        Verdict::Fatal(e) => return Err(e),
                        Verdict::Done(env, placed) => {
                            if let (Some(progress), Some(position)) = (&self.progress, env.position) {
                                progress.acknowledged(position, placed);
                            }
                            // The lane's next event, if any, may go now.
                            if let Some(ToSend { event: next, lane }) = order.delivered(lane) {
                                in_flight.push(self.attempt(next, lane, 0, None));
                            }
                        }
                    }
                }
                // Only once `in_flight` has nothing ready: every send has been polled, so
                // what it hands the sink is there to be sent.
                () = std::future::ready(()), if order.expedite() => {
                    self.sink.expedite();
                    order.expedited();
                }
                () = std::future::ready(()), if tell_full => {
                    self.sink.full();
                    order.told_full();
                }
                received = rx.recv_many(&mut batch, room), if room > 0 => {
                    if received == 0 {
                        order.close();
                    }
                    order.receive(batch.drain(..));
                }
                _ = refresh.tick(), if room == 0 => {}
            }
        }
    }

    /// A send of `env`, after `delay` when it is a retry: it starts when first polled.
    fn attempt(&self, env: Envelope, lane: Lane, attempt: u32, delay: Option<Duration>) -> impl Future<Output = Outcome> + use<P> {
        let sink = self.sink.clone();
        async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let started = Instant::now();
            let result = sink.send(&env).await;
            Outcome { env, lane, result, attempt, started }
        }
    }

    fn settle(&self, done: Outcome, meters: &mut DispatchMeters) -> Verdict {
        let sink = self.sink.name();
        let env = done.env;
        match done.result {
            Ok(placed) => {
                self.health.progressed();
                meters.acknowledged(&env.resource, env.kind.label(), done.started.elapsed(), env.observed.map(|o| o.elapsed()));
                if env.completes_initial_sync {
                    self.health.initial_sync_delivered();
                }
                Verdict::Done(env, placed)
            }
            Err(e) => {
                meters.failed(e.kind().as_str());
                match e {
                    SendError::Retryable { kind, source } => {
                        let delay = self.retry.delay_asked(done.attempt, source.retry_after());
                        // A purge (a replaced producer) was logged once by the sink.
                        if done.attempt == 0 && kind != ErrorKind::Purged {
                            tracing::warn!(sink, route = %self.route, resource = %env.resource, error_kind = kind.as_str(), error = %source, "Send failed; retrying with backoff");
                        } else {
                            tracing::debug!(sink, resource = %env.resource, attempt = done.attempt, error = %source, "Send failed again; retrying");
                        }
                        Verdict::Retry(env, done.attempt + 1, delay)
                    }
                    SendError::TooLarge { source } => self.oversized(env, source, meters),
                    SendError::Rejected { source } => {
                        meters.rejected(&env.resource);
                        tracing::error!(sink, route = %self.route, resource = %env.resource, key = env.key(), id = env.attributes.id, error = %source, "Sink rejected an event; skipped (on_client_error = skip)");
                        Verdict::Done(env, None)
                    }
                    SendError::Fatal { kind, source } => {
                        tracing::error!(sink, route = %self.route, resource = %env.resource, error_kind = kind.as_str(), error = %source, "Sink refused an event for good; stopping");
                        Verdict::Fatal(DispatchError::SinkFatal { resource: env.resource.to_string(), kind, source })
                    }
                }
            }
        }
    }
}

impl<P: Publisher> Dispatcher<P> {
    /// The oversize policy: the event as a truncated reference (in the same lane, before
    /// anything later of its object), skipped, or fatal.
    fn oversized(&self, env: Envelope, source: Failure, meters: &mut DispatchMeters) -> Verdict {
        let sink = self.sink.name();
        if self.oversize == OversizePolicy::Reference
            && let Some(reference) = event::truncated(&env)
        {
            meters.truncated(&env.resource);
            tracing::warn!(sink, route = %self.route, resource = %env.resource, key = env.key(), error = %source, "Event too large for the sink; shipping it as a truncated reference");
            return Verdict::Retry(reference, 0, Duration::ZERO);
        }
        if self.oversize == OversizePolicy::Fail {
            tracing::error!(sink, route = %self.route, resource = %env.resource, key = env.key(), error = %source, "Event too large for the sink; stopping (delivery.oversize = fail)");
            return Verdict::Fatal(DispatchError::SinkFatal { resource: env.resource.to_string(), kind: ErrorKind::TooLarge, source });
        }
        meters.too_large(&env.resource);
        tracing::error!(sink, route = %self.route, resource = %env.resource, key = env.key(), error = %source, "Event too large for the sink; skipped");
        Verdict::Done(env, None)
    }
}

/// What becomes of a send once its outcome is known.
enum Verdict {
    /// Acknowledged (or skipped by policy), with where the broker stored it, if known.
    Done(Envelope, Option<Placement>),
    Retry(Envelope, u32, Duration),
    Fatal(DispatchError),
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;

    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::*;
    use crate::event::fixtures::configmap_event;
    use crate::model::{ChangeType, MarkerPhase, ObjectRef};
    use crate::telemetry::Health;

    /// A sink that acknowledges after a delay derived from the event id (so that events
    /// complete out of order), fails chosen events' first attempts, and records what it
    /// acknowledged, and how many events it had acknowledged and was sending each time it
    /// was asked to expedite or told the dispatcher was full.
    #[derive(Clone, Default)]
    struct Scripted {
        fail_first: Arc<HashSet<String>>,
        attempts: Arc<Mutex<HashMap<String, u32>>>,
        acked: Arc<Mutex<Vec<String>>>,
        max_concurrent: Arc<Mutex<(usize, usize)>>,
        expedited: Arc<Mutex<Vec<(usize, usize)>>>,
        full: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Publisher for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }

        fn expedite(&self) {
            let acked = self.acked.lock().unwrap().len();
            let sending = self.max_concurrent.lock().unwrap().0;
            self.expedited.lock().unwrap().push((acked, sending));
        }

        fn full(&self) {
            let acked = self.acked.lock().unwrap().len();
            let sending = self.max_concurrent.lock().unwrap().0;
            self.full.lock().unwrap().push((acked, sending));
        }

        async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
            let id = env.attributes.id.clone();
            {
                let mut c = self.max_concurrent.lock().unwrap();
                c.0 += 1;
                c.1 = c.1.max(c.0);
            }
            let delay = id.bytes().map(u64::from).sum::<u64>() % 7;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            self.max_concurrent.lock().unwrap().0 -= 1;
            let attempt = {
                let mut a = self.attempts.lock().unwrap();
                let n = a.entry(id.clone()).or_default();
                *n += 1;
                *n
            };
            if attempt == 1 && self.fail_first.contains(&id) {
                return Err(SendError::Retryable { kind: ErrorKind::Timeout, source: kafka_error(RDKafkaErrorCode::MessageTimedOut) });
            }
            self.acked.lock().unwrap().push(id);
            Ok(None)
        }
    }

    /// What a Kafka sink's send fails with when the broker answers `code`.
    fn kafka_error(code: RDKafkaErrorCode) -> Failure {
        Failure::Kafka(Box::new(KafkaError::MessageProduction(code)))
    }

    async fn deliver(sink: Scripted, input: Vec<Envelope>, max_in_flight: usize) -> Vec<String> {
        let (tx, rx) = mpsc::channel(4);
        let retry = RetryPolicy { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
        let d = Dispatcher::new(sink.clone(), max_in_flight, OversizePolicy::Reference, retry, Health::single(0).route(0));
        let run = tokio::spawn(d.run(rx));
        for e in input {
            tx.send(e).await.unwrap();
        }
        drop(tx);
        run.await.unwrap().unwrap();
        sink.acked.lock().unwrap().clone()
    }

    /// The dispatcher allocates one future per send. glibc serves a block over 1 KB outside
    /// its per-thread cache, after merging every freed small block (BENCHMARKS.md): the
    /// future of a send stays under that, whichever sink the configured `Sink` is.
    #[tokio::test]
    async fn the_future_of_each_send_is_under_a_kilobyte() {
        let kafka: crate::config::KafkaConfig = serde_json::from_value(serde_json::json!({"brokers": "127.0.0.1:1"})).unwrap();
        let sink = crate::sink::Sink::Kafka(crate::sink::KafkaSink::new(&kafka).unwrap());
        let retry = RetryPolicy { initial: Duration::from_millis(1), max: Duration::from_millis(1) };
        let d = Dispatcher::new(sink, 10, OversizePolicy::Reference, retry, Health::single(0).route(0));
        let send = d.attempt(configmap_event("a", "a1", EnvelopeKind::Object(ChangeType::Updated)), 0, 0, None);
        let size = std::mem::size_of_val(&send);
        assert!(size <= 960, "a send's future is {size} bytes");
    }

    #[tokio::test(start_paused = true)]
    async fn one_objects_events_stay_in_order_through_retries_while_others_run_concurrently() {
        let mut input = Vec::new();
        let mut fail = HashSet::new();
        for round in 0..5 {
            for key in ["a", "b", "c", "d"] {
                let id = format!("{key}{round}");
                if (round + key.len()) % 2 == 0 {
                    fail.insert(id.clone());
                }
                input.push(configmap_event(key, &id, EnvelopeKind::Object(ChangeType::Updated)));
            }
        }
        let sink = Scripted { fail_first: Arc::new(fail), ..Default::default() };
        let acked = deliver(sink.clone(), input, 100).await;
        assert_eq!(acked.len(), 20, "every event delivered exactly once: {acked:?}");
        for key in ["a", "b", "c", "d"] {
            let order: Vec<&String> = acked.iter().filter(|id| id.starts_with(key)).collect();
            let want: Vec<String> = (0..5).map(|r| format!("{key}{r}")).collect();
            assert_eq!(order, want.iter().collect::<Vec<_>>(), "order of {key}");
        }
        assert!(sink.max_concurrent.lock().unwrap().1 > 1, "distinct objects are sent concurrently");
    }

    #[tokio::test(start_paused = true)]
    async fn a_marker_waits_for_everything_before_it_and_holds_everything_after_it() {
        let input = vec![
            configmap_event("a", "a1", EnvelopeKind::Object(ChangeType::Synced)),
            configmap_event("b", "b1", EnvelopeKind::Object(ChangeType::Synced)),
            configmap_event("c", "c1", EnvelopeKind::Object(ChangeType::Synced)),
            configmap_event("/m", "marker", EnvelopeKind::Marker(MarkerPhase::Completed)),
            configmap_event("a", "a2", EnvelopeKind::Object(ChangeType::Added)),
            configmap_event("d", "d1", EnvelopeKind::Object(ChangeType::Added)),
        ];
        let sink = Scripted { fail_first: Arc::new(["b1".to_string(), "marker".to_string()].into()), ..Default::default() };
        let acked = deliver(sink, input, 100).await;
        let at = |id: &str| acked.iter().position(|a| a == id).unwrap();
        for before in ["a1", "b1", "c1"] {
            assert!(at(before) < at("marker"), "{acked:?}");
        }
        for after in ["a2", "d1"] {
            assert!(at("marker") < at(after), "{acked:?}");
        }
    }

    /// Behind a barrier nothing more comes until what is in flight is acknowledged: the sink
    /// is asked once, when the barrier goes up and the sends before it have begun, to send
    /// what it holds without batching for more. A marker with nothing in flight before it
    /// has nothing to hurry.
    #[tokio::test(start_paused = true)]
    async fn a_barrier_behind_events_in_flight_asks_the_sink_to_expedite_them() {
        let input = vec![
            configmap_event("/m", "started", EnvelopeKind::Marker(MarkerPhase::Started)),
            configmap_event("a", "a1", EnvelopeKind::Object(ChangeType::Synced)),
            configmap_event("b", "b1", EnvelopeKind::Object(ChangeType::Synced)),
            configmap_event("c", "c1", EnvelopeKind::Object(ChangeType::Synced)),
            configmap_event("/m", "completed", EnvelopeKind::Marker(MarkerPhase::Completed)),
            configmap_event("a", "a2", EnvelopeKind::Object(ChangeType::Added)),
        ];
        // All queued before the dispatcher starts: a1, b1, c1 and "completed" are taken in
        // together once "started" is acknowledged, so the barrier goes up before any of
        // their sends has begun.
        let sink = Scripted::default();
        let (tx, rx) = mpsc::channel(input.len());
        for e in input {
            tx.send(e).await.unwrap();
        }
        drop(tx);
        let retry = RetryPolicy { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
        Dispatcher::new(sink.clone(), 100, OversizePolicy::Reference, retry, Health::single(0).route(0)).run(rx).await.unwrap();
        let acked = sink.acked.lock().unwrap().clone();
        assert_eq!(acked.len(), 6, "{acked:?}");
        // One call, made while some of a1, b1 and c1 were still in flight, and after every
        // one of the four events before "completed" was handed to the sink: acknowledged or
        // being sent.
        let expedited = sink.expedited.lock().unwrap().clone();
        assert!(
            matches!(expedited[..], [(acked, sending)] if acked < 4 && acked + sending == 4),
            "expedited with (acknowledged, sending) {expedited:?}; acked {acked:?}"
        );
    }

    #[tokio::test]
    async fn the_sink_is_told_the_dispatcher_is_full_once_every_send_it_holds_has_begun() {
        let sink = Scripted::default();
        let names: Vec<String> = (0..6).map(|i| format!("o{i}")).collect();
        let (tx, rx) = mpsc::channel(names.len());
        for n in &names {
            tx.send(configmap_event(n, &format!("{n}-1"), EnvelopeKind::Object(ChangeType::Added))).await.unwrap();
        }
        drop(tx);
        let retry = RetryPolicy { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
        Dispatcher::new(sink.clone(), 3, OversizePolicy::Reference, retry, Health::single(0).route(0)).run(rx).await.unwrap();
        assert_eq!(sink.acked.lock().unwrap().len(), 6);
        // Told when three of three were first in flight, all three being sent by then (a
        // sink that holds them open need not linger for more); again only after a
        // delivery.
        let full = sink.full.lock().unwrap().clone();
        assert!(matches!(full.first(), Some((0, 3))), "told full with (acknowledged, sending) {full:?}");
        assert!(full.iter().all(|(acked, sending)| acked + sending <= 6 && *sending > 0), "{full:?}");
    }

    /// A sink that never answers.
    #[derive(Clone)]
    struct Silent;

    impl Publisher for Silent {
        fn name(&self) -> &'static str {
            "silent"
        }

        async fn send(&self, _: &Envelope) -> Result<Option<Placement>, SendError> {
            std::future::pending().await
        }
    }

    /// A recorder that keeps each gauge by its name.
    #[derive(Default)]
    struct Gauges(Mutex<HashMap<String, Arc<std::sync::atomic::AtomicU64>>>);

    impl Gauges {
        fn value(&self, name: &str) -> f64 {
            f64::from_bits(self.0.lock().unwrap()[name].load(std::sync::atomic::Ordering::Acquire))
        }
    }

    impl metrics::Recorder for Gauges {
        fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
            metrics::Counter::noop()
        }
        fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::from_arc(self.0.lock().unwrap().entry(key.name().to_string()).or_default().clone())
        }
        fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    /// The dispatcher is the only writer of the route's queue gauge: with every slot in
    /// flight it takes nothing from the queue, and the gauge still follows the queue as the
    /// watches fill it.
    #[test]
    fn the_queue_gauge_follows_the_queue_while_every_slot_is_in_flight() {
        let gauges = Gauges::default();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        metrics::with_local_recorder(&gauges, || {
            runtime.block_on(async {
                let (tx, rx) = mpsc::channel(8);
                let retry = RetryPolicy { initial: Duration::from_millis(1), max: Duration::from_millis(1) };
                let run = tokio::spawn(Dispatcher::new(Silent, 2, OversizePolicy::Reference, retry, Health::single(0).route(0)).run(rx));
                let event = |i: usize| configmap_event(&format!("k{i}"), &format!("e{i}"), EnvelopeKind::Object(ChangeType::Added));
                for i in 0..2 {
                    tx.send(event(i)).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                assert_eq!((gauges.value(crate::telemetry::metrics::IN_FLIGHT), gauges.value(crate::telemetry::metrics::QUEUED)), (2.0, 0.0));
                for i in 2..10 {
                    tx.send(event(i)).await.unwrap();
                }
                tokio::time::sleep(REFRESH_EVERY * 2).await;
                assert_eq!(gauges.value(crate::telemetry::metrics::QUEUED), 8.0, "the queue holds 8 events");
                run.abort();
            })
        });
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_max_in_flight_events_are_held() {
        let input: Vec<Envelope> = (0..50).map(|i| configmap_event(&format!("k{i}"), &format!("e{i}"), EnvelopeKind::Object(ChangeType::Added))).collect();
        let sink = Scripted::default();
        let acked = deliver(sink.clone(), input, 3).await;
        assert_eq!(acked.len(), 50);
        assert!(sink.max_concurrent.lock().unwrap().1 <= 3);
    }

    /// Holds each send until another send is inside too (until that has happened once;
    /// waiting at most 10 s), so that two sends meet only when they are in flight at once.
    #[derive(Clone, Default)]
    struct Meeting {
        inside: Arc<Mutex<(usize, bool)>>,
        met: Arc<tokio::sync::Notify>,
        acked: Arc<Mutex<Vec<String>>>,
    }

    impl Publisher for Meeting {
        fn name(&self) -> &'static str {
            "meeting"
        }

        async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
            let met = {
                let mut s = self.inside.lock().unwrap();
                s.0 += 1;
                s.1 |= s.0 >= 2;
                s.1
            };
            if met {
                self.met.notify_waiters();
            } else {
                let _ = tokio::time::timeout(Duration::from_secs(10), self.met.notified()).await;
            }
            self.inside.lock().unwrap().0 -= 1;
            self.acked.lock().unwrap().push(env.attributes.id.clone());
            Ok(None)
        }
    }

    #[tokio::test]
    async fn sends_of_different_objects_are_in_flight_together_while_each_object_stays_in_order() {
        let sink = Meeting::default();
        let (tx, rx) = mpsc::channel(4);
        let retry = RetryPolicy { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
        let d = Dispatcher::new(sink.clone(), 100, OversizePolicy::Reference, retry, Health::single(0).route(0));
        let run = tokio::spawn(d.run(rx));
        for round in 0..5 {
            for key in ["a", "b", "c", "d"] {
                tx.send(configmap_event(key, &format!("{key}{round}"), EnvelopeKind::Object(ChangeType::Updated))).await.unwrap();
            }
        }
        drop(tx);
        run.await.unwrap().unwrap();
        assert!(sink.inside.lock().unwrap().1, "two sends were in flight at the same time");
        let acked = sink.acked.lock().unwrap();
        assert_eq!(acked.len(), 20, "{acked:?}");
        for key in ["a", "b", "c", "d"] {
            let order: Vec<&String> = acked.iter().filter(|id| id.starts_with(key)).collect();
            let want: Vec<String> = (0..5).map(|r| format!("{key}{r}")).collect();
            assert_eq!(order, want.iter().collect::<Vec<_>>(), "order of {key}");
        }
    }

    /// Refuses every event that is not a truncated reference as too large.
    #[derive(Clone, Default)]
    struct Small {
        acked: Arc<Mutex<Vec<Envelope>>>,
    }

    impl Publisher for Small {
        fn name(&self) -> &'static str {
            "small"
        }
        async fn send(&self, env: &Envelope) -> Result<Option<Placement>, SendError> {
            if !env.attributes.truncated {
                return Err(SendError::TooLarge { source: kafka_error(RDKafkaErrorCode::MessageSizeTooLarge) });
            }
            self.acked.lock().unwrap().push(env.clone());
            Ok(None)
        }
    }

    fn object(key: &str, id: &str) -> Envelope {
        let mut e = configmap_event(key, id, EnvelopeKind::Object(ChangeType::Updated));
        e.attributes.object = Some(ObjectRef { namespace: None, name: key.into(), uid: "u".into(), resource_version: "7".into() });
        e
    }

    #[tokio::test(start_paused = true)]
    async fn an_oversized_event_is_shipped_as_a_truncated_reference_or_skipped_or_fatal() {
        for (policy, delivered, fails) in [(OversizePolicy::Reference, 1, false), (OversizePolicy::Skip, 0, false), (OversizePolicy::Fail, 0, true)] {
            let sink = Small::default();
            let (tx, rx) = mpsc::channel(1);
            let d = Dispatcher::new(
                sink.clone(),
                10,
                policy,
                RetryPolicy { initial: Duration::from_millis(1), max: Duration::from_millis(1) },
                Health::single(0).route(0),
            );
            tx.send(object("a", "a1")).await.unwrap();
            drop(tx);
            let result = d.run(rx).await;
            assert_eq!(result.is_err(), fails, "{policy:?}");
            let acked = sink.acked.lock().unwrap();
            assert_eq!(acked.len(), delivered, "{policy:?}");
            if let Some(t) = acked.first() {
                assert_eq!(t.attributes.id, "a1");
                assert!(t.attributes.truncated);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fatal_refusal_stops_delivery_with_an_error_naming_the_cause() {
        #[derive(Clone)]
        struct Refuses;
        impl Publisher for Refuses {
            fn name(&self) -> &'static str {
                "refuses"
            }
            async fn send(&self, _: &Envelope) -> Result<Option<Placement>, SendError> {
                Err(SendError::Fatal { kind: ErrorKind::Authorization, source: kafka_error(RDKafkaErrorCode::TopicAuthorizationFailed) })
            }
        }
        let (tx, rx) = mpsc::channel(1);
        let d = Dispatcher::new(
            Refuses,
            10,
            OversizePolicy::Reference,
            RetryPolicy { initial: Duration::from_millis(1), max: Duration::from_millis(1) },
            Health::single(0).route(0),
        );
        tx.send(configmap_event("a", "a1", EnvelopeKind::Object(ChangeType::Added))).await.unwrap();
        let e = d.run(rx).await.unwrap_err().to_string();
        assert!(e.contains("(authorization)") && e.contains("TopicAuthorizationFailed") && e.contains("configmaps"), "{e}");
    }
}
