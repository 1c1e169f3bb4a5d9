//! Metrics exported through the [`metrics`](https://docs.rs/metrics) facade (the `metrics`
//! feature), for Prometheus or any other exporter the application installs. Without the
//! feature every function here is empty.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `rlock_acquired_total` | counter | `lock` |
//! | `rlock_busy_total` | counter | `lock` |
//! | `rlock_lost_total` | counter | `lock` |
//! | `rlock_renew_failures_total` | counter | none (renewals are batched across locks) |
//! | `rlock_wait_seconds` | histogram: how long acquisitions waited, granted or busy | `lock`, `outcome` (`acquired` or `busy`) |
//! | `rlock_hold_seconds` | histogram: from the grant to the release or the loss | `lock` |
//!
//! `lock` is the key *template* (`order:<user_id>`, as `#[distributed_lock]` writes it, or
//! what [`LockRequest::metrics_label`](crate::LockRequest::metrics_label) gives), never the
//! rendered key: one series per user would be unbounded. Locks taken by hand without a label
//! share the label `manual`.

use std::time::Duration;

/// The label of locks that were given none.
pub(crate) const UNLABELLED: &str = "manual";

#[cfg(feature = "metrics")]
mod emit {
    use std::time::Duration;

    pub(super) fn count(name: &'static str, lock: &'static str) {
        metrics::counter!(name, "lock" => lock).increment(1);
    }

    pub(super) fn wait(lock: &'static str, outcome: &'static str, waited: Duration) {
        metrics::histogram!("rlock_wait_seconds", "lock" => lock, "outcome" => outcome)
            .record(waited.as_secs_f64());
    }

    pub(super) fn held(lock: &'static str, held: Duration) {
        metrics::histogram!("rlock_hold_seconds", "lock" => lock).record(held.as_secs_f64());
    }

    pub(super) fn renew_failed() {
        metrics::counter!("rlock_renew_failures_total").increment(1);
    }
}

/// A lock was granted after waiting `waited` (zero for a free lock).
pub(crate) fn acquired(lock: &'static str, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        emit::count("rlock_acquired_total", lock);
        emit::wait(lock, "acquired", waited);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, waited);
}

/// An acquisition gave up busy after waiting `waited`.
pub(crate) fn busy(lock: &'static str, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        emit::count("rlock_busy_total", lock);
        emit::wait(lock, "busy", waited);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, waited);
}

/// A hold ended: released, or `lost`, after `held`.
pub(crate) fn ended(lock: &'static str, held: Duration, lost: bool) {
    #[cfg(feature = "metrics")]
    {
        if lost {
            emit::count("rlock_lost_total", lock);
        }
        emit::held(lock, held);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, held, lost);
}

/// A watchdog renewal call failed.
pub(crate) fn renew_failed() {
    #[cfg(feature = "metrics")]
    emit::renew_failed();
}
