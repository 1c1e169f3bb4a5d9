//! What a client counts: counters a user can read ([`LockMetrics`]), and their export
//! through the `metrics` facade ([`export`]).

pub(crate) mod export;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::util::stripe::{self, Padded, STRIPES};

/// What one client has done since it was built; read with [`LockClient::metrics`].
///
/// [`LockClient::metrics`]: crate::LockClient::metrics
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// client.lock("a").acquire().await.unwrap().release().await.unwrap();
/// let m = client.metrics();
/// assert_eq!((m.acquired, m.released, m.busy), (1, 1, 0));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockMetrics {
    /// Successful acquisitions (reentries not counted).
    pub acquired: u64,
    /// Acquisitions that gave up with [`LockError::Busy`](crate::LockError::Busy).
    pub busy: u64,
    /// Holds whose lease was found lost.
    pub lost: u64,
    /// Releases of holds that deleted our lock (at most one per acquisition).
    pub released: u64,
    /// Locks deleted for acquisitions whose reply never came (a timeout, a cancelled
    /// caller): Redis may have granted them, so their token is released in the background.
    /// Not counted in `acquired` or `released`.
    pub orphans_released: u64,
    /// Leases renewed by the watchdog.
    pub renewed: u64,
    /// Watchdog calls that failed (Redis unreachable or erroring).
    pub renew_failures: u64,
    /// Locks deleted by [`LockClient::force_unlock`](crate::LockClient::force_unlock),
    /// whoever held them.
    pub forced_unlocks: u64,
    /// Total time spent waiting for busy locks, by acquisitions that waited.
    pub total_wait: Duration,
    /// Changes of master announced by the sentinels (`+switch-master`) and followed: the
    /// client's connections moved to the new master. Always 0 off Sentinel.
    pub master_switches: u64,
}

/// The client's counters, one set per thread stripe ([`crate::util::stripe`]): every lock bumps
/// two.
#[derive(Debug, Default)]
pub(crate) struct Counters([Padded<Set>; STRIPES]);

#[derive(Debug, Default)]
struct Set {
    acquired: AtomicU64,
    busy: AtomicU64,
    lost: AtomicU64,
    released: AtomicU64,
    orphans_released: AtomicU64,
    renewed: AtomicU64,
    renew_failures: AtomicU64,
    forced_unlocks: AtomicU64,
    wait_micros: AtomicU64,
}

/// Which counter to bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    Acquired,
    Busy,
    Lost,
    Released,
    OrphanReleased,
    Renewed,
    RenewFailure,
    ForcedUnlock,
}

impl Counters {
    /// This thread's set.
    fn here(&self) -> &Set {
        &self.0[stripe::this_thread()].0
    }

    pub(crate) fn add(&self, count: Count, n: u64) {
        let set = self.here();
        let counter = match count {
            Count::Acquired => &set.acquired,
            Count::Busy => &set.busy,
            Count::Lost => &set.lost,
            Count::Released => &set.released,
            Count::OrphanReleased => &set.orphans_released,
            Count::Renewed => &set.renewed,
            Count::RenewFailure => &set.renew_failures,
            Count::ForcedUnlock => &set.forced_unlocks,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn waited(&self, waited: Duration) {
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.here().wait_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LockMetrics {
        let sum = |counter: fn(&Set) -> &AtomicU64| -> u64 {
            self.0
                .iter()
                .map(|set| counter(&set.0).load(Ordering::Relaxed))
                .fold(0, u64::saturating_add)
        };
        LockMetrics {
            acquired: sum(|s| &s.acquired),
            busy: sum(|s| &s.busy),
            lost: sum(|s| &s.lost),
            released: sum(|s| &s.released),
            orphans_released: sum(|s| &s.orphans_released),
            renewed: sum(|s| &s.renewed),
            renew_failures: sum(|s| &s.renew_failures),
            forced_unlocks: sum(|s| &s.forced_unlocks),
            total_wait: Duration::from_micros(sum(|s| &s.wait_micros)),
            master_switches: 0,
        }
    }
}
