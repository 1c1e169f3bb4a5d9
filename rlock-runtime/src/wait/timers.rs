//! How long a waiter sleeps before trying a busy lock again when no announcement wakes it.

use std::time::Duration;

use crate::util::tuning::{
    WAIT_EXPIRY_JITTER_DIVISOR, WAIT_EXPIRY_JITTER_MAX, WAIT_MIN_PAUSE, WAIT_POLL_PAUSE,
    WAIT_UNKNOWN_LEASE_PAUSE,
};

/// The fallback timer of a waiter.
///
/// With confirmed release announcements it is the holder's remaining lease plus a jitter of a
/// few milliseconds: if the holder dies, the lock frees when its lease ends and no
/// announcement comes, and the waiter should be there then, not a lease later. Without
/// confirmed announcements (subscription pending or refused, feed down) it is a short
/// re-check interval. Never longer than the waiter's remaining budget.
pub(crate) fn fallback_pause(
    holder_left: Option<Duration>,
    announced: bool,
    budget_left: Duration,
) -> Duration {
    let base = match (announced, holder_left) {
        (true, Some(left)) => left,
        (true, None) => WAIT_UNKNOWN_LEASE_PAUSE,
        (false, left) => left.unwrap_or(WAIT_POLL_PAUSE).min(WAIT_POLL_PAUSE),
    }
    .max(WAIT_MIN_PAUSE);
    let spread = (base / WAIT_EXPIRY_JITTER_DIVISOR).min(WAIT_EXPIRY_JITTER_MAX);
    let jitter = spread.mul_f64(fastrand::f64());
    (base + jitter).min(budget_left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_follows_the_holders_lease_closely_and_stays_in_budget() {
        let ten = Duration::from_secs(10);
        for _ in 0..1000 {
            let p = fallback_pause(Some(Duration::from_secs(30)), true, Duration::from_secs(60));
            assert!(p >= Duration::from_secs(30) && p <= Duration::from_millis(30_005));
            let p = fallback_pause(Some(Duration::from_millis(40)), true, ten);
            assert!(p >= Duration::from_millis(40) && p <= Duration::from_millis(42));
            let p = fallback_pause(Some(Duration::from_secs(3)), false, ten);
            assert!(p >= WAIT_POLL_PAUSE && p <= WAIT_POLL_PAUSE + WAIT_EXPIRY_JITTER_MAX);
            let p = fallback_pause(Some(Duration::ZERO), true, ten);
            assert!(p >= WAIT_MIN_PAUSE && p <= WAIT_MIN_PAUSE.mul_f64(1.05));
            let p = fallback_pause(None, true, Duration::from_millis(1));
            assert_eq!(p, Duration::from_millis(1));
        }
    }
}
