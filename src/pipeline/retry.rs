//! Exponential backoff with jitter for retryable send failures.

use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub initial: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (0-based): initial × 2^attempt, capped at
    /// max, then scaled by a random factor in [0.5, 1.0) so that lanes do not retry in step.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.initial.saturating_mul(1u32 << attempt.min(20)).min(self.max);
        base.mul_f64(rand::rng().random_range(0.5..1.0))
    }

    /// The delay before retry number `attempt` when the sink asked to wait `asked` (an
    /// HTTP `Retry-After`): at least that, up to `max`, and never less than the backoff.
    pub fn delay_asked(&self, attempt: u32, asked: Option<Duration>) -> Duration {
        let backoff = self.delay(attempt);
        asked.map_or(backoff, |a| backoff.max(a.min(self.max)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_under_the_cap() {
        let p = RetryPolicy { initial: Duration::from_millis(100), max: Duration::from_secs(2) };
        let d0 = p.delay(0);
        assert!(d0 >= Duration::from_millis(50) && d0 < Duration::from_millis(100));
        let d3 = p.delay(3);
        assert!(d3 >= Duration::from_millis(400) && d3 < Duration::from_millis(800));
        assert!(p.delay(40) < Duration::from_secs(2));
    }

    #[test]
    fn a_wait_the_sink_asks_for_is_kept_up_to_the_cap() {
        let p = RetryPolicy { initial: Duration::from_millis(100), max: Duration::from_secs(2) };
        assert_eq!(p.delay_asked(0, Some(Duration::from_secs(1))), Duration::from_secs(1));
        assert_eq!(p.delay_asked(0, Some(Duration::from_secs(60))), Duration::from_secs(2));
        assert!(p.delay_asked(0, None) < Duration::from_millis(100));
    }
}
