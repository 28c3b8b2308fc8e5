//! Exponential backoff with jitter for retries.

use std::time::Duration;

use rand::Rng;

/// The delay before the attempt after `attempt` (1-based): `base * 2^(attempt-1)`, capped at
/// `max`, then scaled by a random factor in `[0.75, 1.25]` so that failures that happened
/// together do not retry together.
pub(crate) fn retry_delay(attempt: i32, base: Duration, max: Duration) -> Duration {
    let exponent = attempt.saturating_sub(1).clamp(0, 30) as u32;
    let delay = base.saturating_mul(1u32 << exponent).min(max);
    let jitter = rand::thread_rng().gen_range(0.75..=1.25);
    delay.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_are_capped() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for _ in 0..100 {
            let first = retry_delay(1, base, max);
            assert!(first >= Duration::from_millis(75) && first <= Duration::from_millis(125));
            let third = retry_delay(3, base, max);
            assert!(third >= Duration::from_millis(300) && third <= Duration::from_millis(500));
            let late = retry_delay(40, base, max);
            assert!(late <= Duration::from_millis(1250));
        }
    }
}
