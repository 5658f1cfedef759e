//! Attempts that outlived their timeout. The HTTP sink retries an event whose answer is
//! later than `sink.timeout_ms`, but the server may still take the late attempt: were the
//! next event of the object sent before that attempt is answered, its copy could arrive
//! after the newer event (the event contract forbids it). So a late attempt is kept, not
//! dropped; an event counts as delivered only once every attempt of it has answered (or
//! was abandoned, `LATE_ANSWER_WAIT` after its timeout), and an answer that accepted it
//! spares the next retry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

/// How long past its timeout a late attempt is still awaited before it is abandoned (its
/// connection closed).
pub const LATE_ANSWER_WAIT: Duration = Duration::from_secs(60);

/// The late attempts of the events in flight, by CloudEvent `id`.
pub struct LateAnswers {
    pending: Mutex<HashMap<String, Vec<Late>>>,
    /// How long past its timeout an attempt is awaited.
    wait: Duration,
}

/// An attempt still running after its timeout: it resolves to whether the server accepted
/// the event (a 2xx answer).
struct Late {
    answer: AbortOnDropHandle<bool>,
    /// When the attempt timed out.
    timed_out: Instant,
}

/// What became of the late attempts of an event, once settled.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LateOutcome {
    /// Attempts that answered (or whose connection failed).
    pub answered: usize,
    /// Attempts given up on, unanswered after the wait.
    pub abandoned: usize,
}

impl LateAnswers {
    pub fn new(wait: Duration) -> LateAnswers {
        LateAnswers { pending: Mutex::new(HashMap::new()), wait }
    }

    /// Keeps `answer`, an attempt of event `id` that just timed out, running.
    pub fn keep(&self, id: &str, answer: AbortOnDropHandle<bool>) {
        let late = Late { answer, timed_out: Instant::now() };
        self.lock().entry(id.to_string()).or_default().push(late);
    }

    /// Whether a late attempt of `id` has been accepted by the server already.
    pub fn accepted(&self, id: &str) -> bool {
        let mut pending = self.lock();
        let Some(attempts) = pending.get_mut(id) else { return false };
        let mut accepted = false;
        attempts.retain_mut(|late| match (&mut late.answer).now_or_never() {
            Some(answer) => {
                accepted |= answer.unwrap_or(false);
                false
            }
            None => true,
        });
        accepted
    }

    /// Waits until every late attempt of `id` has answered, abandoning one still unanswered
    /// `wait` after its timeout; afterwards nothing of `id` can reach the server any more
    /// (unless the server itself holds it past that).
    pub async fn settle(&self, id: &str) -> LateOutcome {
        let attempts = self.lock().remove(id).unwrap_or_default();
        let mut settled = LateOutcome::default();
        for late in attempts {
            match tokio::time::timeout_at(late.timed_out + self.wait, late.answer).await {
                Ok(_) => settled.answered += 1,
                Err(_) => settled.abandoned += 1,
            }
        }
        settled
    }

    /// How many events have late attempts.
    #[cfg(test)]
    pub fn events(&self) -> usize {
        self.lock().len()
    }

    /// Whether every late attempt of `id` has its answer (or failed).
    #[cfg(test)]
    pub fn answered(&self, id: &str) -> bool {
        self.lock().get(id).is_none_or(|attempts| attempts.iter().all(|late| late.answer.is_finished()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Late>>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(after: Duration, accepted: bool) -> AbortOnDropHandle<bool> {
        AbortOnDropHandle::new(tokio::spawn(async move {
            tokio::time::sleep(after).await;
            accepted
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_settles_once_its_last_late_attempt_answers() {
        let late = LateAnswers::new(Duration::from_secs(60));
        late.keep("e1", attempt(Duration::from_secs(2), false));
        late.keep("e1", attempt(Duration::from_secs(5), false));
        late.keep("e2", attempt(Duration::from_secs(1), true));
        let started = Instant::now();
        assert_eq!(late.settle("e1").await, LateOutcome { answered: 2, abandoned: 0 });
        assert_eq!(started.elapsed(), Duration::from_secs(5), "the slower attempt was awaited");
        assert_eq!(late.events(), 1, "e2's attempt is still kept");
        assert_eq!(late.settle("e3").await, LateOutcome::default(), "an event without late attempts settles at once");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_unanswered_after_the_wait_is_abandoned_and_its_request_dropped() {
        let late = LateAnswers::new(Duration::from_secs(60));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        late.keep(
            "e1",
            AbortOnDropHandle::new(tokio::spawn(async move {
                let _held = tx;
                std::future::pending::<bool>().await
            })),
        );
        let started = Instant::now();
        assert_eq!(late.settle("e1").await, LateOutcome { answered: 0, abandoned: 1 });
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert!(rx.await.is_err(), "the abandoned attempt was stopped");
        assert_eq!(late.events(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_accepted_late_answer_is_seen_only_once_it_came() {
        let late = LateAnswers::new(Duration::from_secs(60));
        late.keep("e1", attempt(Duration::from_secs(1), false));
        late.keep("e1", attempt(Duration::from_secs(3), true));
        assert!(!late.accepted("e1"), "nothing answered yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!late.accepted("e1"), "the first answer refused it");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(late.accepted("e1"));
        assert!(!late.accepted("e2"));
        assert_eq!(late.settle("e1").await, LateOutcome::default(), "both answers were taken");
    }
}
