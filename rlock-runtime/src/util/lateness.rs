//! How late this client's timers fire, measured: the lease's lower bound and the renewal
//! schedule follow it, as TCP's retransmission timer follows the measured round trip.
//!
//! A host busy with other work (a CPU quota, a neighbour's build, a runtime whose threads are
//! all busy) runs a timer late by milliseconds, sometimes by tens. A hold whose "the lease can
//! no longer be proven" timer fires that late tells its body of the loss after Redis could
//! have granted the key again, and a renewal sent that late may land after the lease ended.
//! So every timer the watchdog and `lost()` set records how late it woke, and the estimate
//! (smoothed lateness plus four times its smoothed deviation, RFC 6298's rule) widens the
//! lease's margin and brings renewals forward by as much.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The largest allowance counted: lateness beyond it means the process is stalled, and no
/// margin short of the lease itself can cover a stall (fencing is for that).
const MAX_ALLOWANCE: Duration = Duration::from_secs(1);

/// One client's timer lateness, in microseconds.
#[derive(Debug, Default)]
pub(crate) struct Lateness {
    /// Smoothed lateness (gain 1/8).
    mean: AtomicU64,
    /// Smoothed deviation from it (gain 1/4).
    deviation: AtomicU64,
}

impl Lateness {
    /// A timer set for `scheduled` fired at `woke`. (Updates from two threads at once may
    /// lose one sample: this is an estimate.)
    pub(crate) fn record(&self, scheduled: Instant, woke: Instant) {
        let sample = micros(woke.saturating_duration_since(scheduled)).min(micros(MAX_ALLOWANCE));
        let mean = self.mean.load(Ordering::Relaxed);
        let deviation = self.deviation.load(Ordering::Relaxed);
        let error = sample.abs_diff(mean);
        // mean += (sample - mean) / 8; deviation += (|sample - mean| - deviation) / 4
        let mean = (mean * 7 + sample) / 8;
        let deviation = (deviation * 3 + error) / 4;
        self.mean.store(mean, Ordering::Relaxed);
        self.deviation.store(deviation, Ordering::Relaxed);
    }

    /// How late a timer set now may be expected to fire, at most [`MAX_ALLOWANCE`].
    pub(crate) fn allowance(&self) -> Duration {
        let mean = self.mean.load(Ordering::Relaxed);
        let deviation = self.deviation.load(Ordering::Relaxed);
        Duration::from_micros(mean.saturating_add(deviation.saturating_mul(4))).min(MAX_ALLOWANCE)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowance_follows_lateness_up_and_back_down() {
        let lateness = Lateness::default();
        let t0 = Instant::now();
        assert_eq!(lateness.allowance(), Duration::ZERO);
        for _ in 0..50 {
            lateness.record(t0, t0 + Duration::from_millis(20));
        }
        let loaded = lateness.allowance();
        assert!(loaded >= Duration::from_millis(19), "{loaded:?}");
        // Jittery lateness widens it beyond the mean.
        for i in 0..50 {
            lateness.record(
                t0,
                t0 + Duration::from_millis(if i % 2 == 0 { 0 } else { 40 }),
            );
        }
        assert!(lateness.allowance() > Duration::from_millis(40));
        // Back on time, it shrinks again.
        for _ in 0..100 {
            lateness.record(t0, t0);
        }
        assert!(lateness.allowance() < Duration::from_millis(1));
        // A stall counts as at most the cap.
        lateness.record(t0, t0 + Duration::from_secs(60));
        assert!(lateness.allowance() <= MAX_ALLOWANCE);
    }
}
