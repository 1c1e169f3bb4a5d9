//! Where locks live. Each backend offers the same three atomic operations; everything else
//! (waiting, reentrancy, renewal, timeouts) is built once on top of them in the client.

pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod subscriber;

use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::queue::{Subscriptions, WaitQueues};

/// One lease for the watchdog to renew: key, owner token, new lease.
pub(crate) type Renewal<'a> = (&'a str, &'a str, Duration);

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours, with a fencing token when one was asked for.
    Acquired { fence: Option<u64> },
    /// Another owner holds it; its lease has this much left, when the backend knows.
    Busy { remaining: Option<Duration> },
}

/// What an attempt must find out besides taking the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttemptAsks {
    /// Issue a fencing token with the lock.
    pub(crate) fence: bool,
    /// When busy, learn how long the holder's lease has left (for a waiter's timer).
    pub(crate) remaining: bool,
}

/// The backends, as an enum rather than a trait object: the set is closed and known here.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// Boxed: it is large, and cloned only when a client is built.
    Redis(Arc<redis::RedisBackend>),
    Memory(memory::MemoryBackend),
}

impl Backend {
    /// Takes the lock if it is free: value and expiry in one atomic step, with a fencing
    /// token issued in the same step when `fenced`.
    pub(crate) async fn try_acquire(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        ask: AttemptAsks,
    ) -> Result<Attempt, LockError> {
        match self {
            Self::Redis(b) => b.try_acquire(key, token, ttl, ask).await,
            Self::Memory(b) => Ok(b.try_acquire(key, token, ttl, ask)),
        }
    }

    /// Deletes the lock if `token` still owns it; `Ok(false)` when it did not.
    pub(crate) async fn release(&self, key: &str, token: &str) -> Result<bool, LockError> {
        match self {
            Self::Redis(b) => b.release(key, token).await,
            Self::Memory(b) => Ok(b.release(key, token)),
        }
    }

    /// Renews many leases in one call; `true` for each that was still ours.
    pub(crate) async fn renew(&self, batch: &[Renewal<'_>]) -> Result<Vec<bool>, LockError> {
        match self {
            Self::Redis(b) => b.renew(batch).await,
            Self::Memory(b) => Ok(batch
                .iter()
                .map(|&(key, token, ttl)| b.extend(key, token, ttl))
                .collect()),
        }
    }

    /// Connects a client's wait queues to the backend's release announcements. Returns what
    /// the queues must tell when a key gains its first or loses its last waiter, if anything.
    pub(crate) fn release_feed(&self, queues: &Arc<WaitQueues>) -> Option<Arc<dyn Subscriptions>> {
        match self {
            Self::Redis(b) => Some(Arc::new(b.subscriber(queues))),
            Self::Memory(b) => {
                b.listen(queues);
                None
            }
        }
    }

    /// Sets a new lease if `token` still owns the lock; `Ok(false)` when it did not.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        match self {
            Self::Redis(b) => b.extend(key, token, ttl).await,
            Self::Memory(b) => Ok(b.extend(key, token, ttl)),
        }
    }
}

/// Milliseconds for a `PX`/`PEXPIRE` argument, rounded up (Redis must not hold the lease
/// shorter than the client counts it), at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    let whole = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let partial = u64::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    whole.saturating_add(partial).max(1)
}

#[cfg(test)]
mod tests {
    use super::millis;
    use std::time::Duration;

    #[test]
    fn leases_are_rounded_up_to_whole_milliseconds() {
        assert_eq!(millis(Duration::from_micros(10_900)), 11);
        assert_eq!(millis(Duration::from_millis(10)), 10);
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
