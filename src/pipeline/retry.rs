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
}
