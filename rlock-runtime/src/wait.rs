//! How long a waiter sleeps before trying a busy lock again when no announcement wakes it.

use std::time::Duration;

/// Shortest pause, so that a lock changing hands quickly is not hammered.
const MIN_PAUSE: Duration = Duration::from_millis(2);
/// Pause when announcements cannot be relied on (the subscription failed): plain polling.
const POLL_PAUSE: Duration = Duration::from_millis(50);
/// Pause when the holder's lease length is unknown (a key without expiry, set by others).
const UNKNOWN_LEASE_PAUSE: Duration = Duration::from_millis(500);

/// The fallback timer of a waiter. With release announcements it is the holder's remaining
/// lease: if the holder dies, the lock frees when its lease ends, and no announcement comes.
/// Without them it is a short polling interval. Up to 50 % random jitter keeps waiters from
/// retrying in lockstep, and the pause never exceeds the waiter's remaining budget.
pub(crate) fn fallback_pause(
    holder_left: Option<Duration>,
    announced: bool,
    budget_left: Duration,
) -> Duration {
    let base = match (announced, holder_left) {
        (true, Some(left)) => left,
        (true, None) => UNKNOWN_LEASE_PAUSE,
        (false, left) => left.unwrap_or(POLL_PAUSE).min(POLL_PAUSE),
    }
    .max(MIN_PAUSE);
    let jitter = base.mul_f64(fastrand::f64() * 0.5);
    (base + jitter).min(budget_left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_follows_the_holders_lease_and_stays_in_budget() {
        let ten = Duration::from_secs(10);
        for _ in 0..1000 {
            let p = fallback_pause(Some(Duration::from_secs(3)), true, ten);
            assert!(p >= Duration::from_secs(3) && p <= Duration::from_millis(4500));
            let p = fallback_pause(Some(Duration::from_secs(3)), false, ten);
            assert!(p >= POLL_PAUSE && p <= POLL_PAUSE.mul_f64(1.5));
            let p = fallback_pause(Some(Duration::ZERO), true, ten);
            assert!(p >= MIN_PAUSE && p <= MIN_PAUSE.mul_f64(1.5));
            let p = fallback_pause(None, true, Duration::from_millis(1));
            assert_eq!(p, Duration::from_millis(1));
        }
    }
}
