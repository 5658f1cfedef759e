//! Delivery: many objects in flight, one object's events strictly in order, markers as
//! barriers, retries with backoff; never more than `max_in_flight` events held.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;

use super::retry::RetryPolicy;
use crate::event::{Envelope, EnvelopeKind};
use crate::sink::{SendError, Sink};
use crate::telemetry::{Health, metrics as m};

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("the sink refused an event of {resource} for good ({kind}): {message}; fix the cause and restart (the initial sync re-delivers current state)")]
    SinkFatal {
        resource: String,
        kind: &'static str,
        message: String,
    },
}

/// The ordering domain of an event: its topic and partition key.
type LaneKey = (Arc<str>, String);

struct Outcome {
    env: Arc<Envelope>,
    result: Result<(), SendError>,
    attempt: u32,
    started: Instant,
}

pub struct Dispatcher {
    sink: Sink,
    max_in_flight: usize,
    retry: RetryPolicy,
    health: Arc<Health>,
}

impl Dispatcher {
    pub fn new(sink: Sink, max_in_flight: usize, retry: RetryPolicy, health: Arc<Health>) -> Self {
        Dispatcher {
            sink,
            max_in_flight,
            retry,
            health,
        }
    }

    /// Delivers everything received on `rx` until it is closed and drained.
    pub async fn run(self, mut rx: mpsc::Receiver<Envelope>) -> Result<(), DispatchError> {
        let mut in_flight: FuturesUnordered<BoxFuture<'static, Outcome>> = FuturesUnordered::new();
        // Keys with an event in flight, and their later events, in arrival order.
        let mut lanes: HashMap<LaneKey, VecDeque<Arc<Envelope>>> = HashMap::new();
        let mut held = 0usize; // events waiting in `lanes`
        // A marker waits until everything before it is acknowledged, and everything after
        // it waits until it is: consumers see sync boundaries in order on every partition.
        let mut barrier: Option<Arc<Envelope>> = None;
        let mut barrier_sent = false;
        let mut input_open = true;
        loop {
            if let Some(marker) = &barrier
                && !barrier_sent
                && in_flight.is_empty()
            {
                in_flight.push(self.attempt(marker.clone(), 0, None));
                barrier_sent = true;
            }
            metrics::gauge!(m::IN_FLIGHT).set(in_flight.len() as f64);
            metrics::gauge!(m::HELD).set(held as f64);
            let can_take = input_open && barrier.is_none() && in_flight.len() + held < self.max_in_flight;
            if !can_take && in_flight.is_empty() {
                if !input_open {
                    return Ok(());
                }
                // Unreachable in practice (a barrier is sent above when nothing is in flight);
                // guard against a busy loop all the same.
                continue;
            }
            tokio::select! {
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    let lane = (done.env.topic.clone(), done.env.key.clone());
                    match self.settle(done) {
                        Settled::Retry(env, attempt, delay) => {
                            in_flight.push(self.attempt(env, attempt, Some(delay)));
                            continue;
                        }
                        Settled::Fatal(e) => return Err(e),
                        Settled::Done(env) => {
                            if matches!(env.kind, EnvelopeKind::Marker(_)) {
                                barrier = None;
                                barrier_sent = false;
                                continue;
                            }
                        }
                    }
                    // The lane's next event, if any, may go now.
                    if let Some(queue) = lanes.get_mut(&lane) {
                        match queue.pop_front() {
                            Some(next) => {
                                held -= 1;
                                in_flight.push(self.attempt(next, 0, None));
                            }
                            None => {
                                lanes.remove(&lane);
                            }
                        }
                    }
                }
                received = rx.recv(), if can_take => {
                    let Some(env) = received else {
                        input_open = false;
                        continue;
                    };
                    let env = Arc::new(env);
                    if matches!(env.kind, EnvelopeKind::Marker(_)) {
                        barrier = Some(env);
                        continue;
                    }
                    let lane = (env.topic.clone(), env.key.clone());
                    match lanes.get_mut(&lane) {
                        Some(queue) => {
                            queue.push_back(env);
                            held += 1;
                        }
                        None => {
                            lanes.insert(lane, VecDeque::new());
                            in_flight.push(self.attempt(env, 0, None));
                        }
                    }
                }
            }
        }
    }

    fn attempt(&self, env: Arc<Envelope>, attempt: u32, delay: Option<Duration>) -> BoxFuture<'static, Outcome> {
        let send = self.sink.send(env.clone());
        Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let started = Instant::now();
            let result = send.await;
            Outcome {
                env,
                result,
                attempt,
                started,
            }
        })
    }

    fn settle(&self, done: Outcome) -> Settled {
        let sink = self.sink.name();
        let env = done.env;
        match done.result {
            Ok(()) => {
                metrics::counter!(m::EVENTS, "resource" => env.resource.to_string(), "type" => env.kind.label()).increment(1);
                metrics::histogram!(m::PUBLISH_LATENCY, "sink" => sink).record(done.started.elapsed().as_secs_f64());
                if env.completes_initial_sync {
                    self.health.initial_sync_delivered();
                }
                Settled::Done(env)
            }
            Err(e) => {
                metrics::counter!(m::SINK_ERRORS, "sink" => sink, "error_kind" => e.kind()).increment(1);
                match e {
                    SendError::Retryable { kind, message } => {
                        let delay = self.retry.delay(done.attempt);
                        if done.attempt == 0 {
                            tracing::warn!(sink, resource = %env.resource, error_kind = kind, error = %message, "Send failed; retrying with backoff");
                        } else {
                            tracing::debug!(sink, resource = %env.resource, attempt = done.attempt, error = %message, "Send failed again; retrying");
                        }
                        Settled::Retry(env, done.attempt + 1, delay)
                    }
                    SendError::TooLarge { message } => {
                        metrics::counter!(m::DROPPED, "resource" => env.resource.to_string(), "reason" => "too_large").increment(1);
                        tracing::error!(sink, resource = %env.resource, key = %env.key, error = %message, "Event too large for the sink; skipped");
                        Settled::Done(env)
                    }
                    SendError::Fatal { kind, message } => {
                        tracing::error!(sink, resource = %env.resource, error_kind = kind, error = %message, "Sink refused an event for good; stopping");
                        Settled::Fatal(DispatchError::SinkFatal {
                            resource: env.resource.to_string(),
                            kind,
                            message,
                        })
                    }
                }
            }
        }
    }
}

enum Settled {
    Done(Arc<Envelope>),
    Retry(Arc<Envelope>, u32, Duration),
    Fatal(DispatchError),
}
