//! The lease engine under faults, one module per topic: each test puts a real `redis-server`
//! (through the harness' fault proxy where the network matters) in one fault and checks the
//! bound the engine keeps there.
//!
//! - [`leases`]: `extend()` racing renewals, a grant that arrives after its lease ended;
//! - [`runtimes`]: the watchdog and the runtimes sharing a client;
//! - [`connections`]: connections that go silent or slow;
//! - [`waiting`]: waiters through missing subscriptions, expiries, restarts and stops;
//! - [`orphans`]: acquisitions whose reply never came;
//! - [`stress`]: thousands of racing holds, checked from their recorded history;
//! - [`family`]: a semaphore's permit and a read-write lock's leases behind a partition;
//! - [`cancel_fuzz`]: calls cut at random on four handles, which must leave no key held.
//!
//! Probabilistic tests (the extend race, the stress runs, the fuzz) repeat the racy step hundreds of
//! times; the others are deterministic.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockError};

mod cancel_fuzz;
mod connections;
mod family;
mod leases;
mod orphans;
mod runtimes;
mod stress;
mod waiting;

pub(crate) const SHORT: Duration = Duration::from_millis(300);

/// A task that waits up to `wait` for `key` (dropping the guard if it gets it) and tells how
/// the acquisition ended and how long it took.
pub(crate) fn spawn_timed_waiter(
    client: &LockClient,
    key: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<(Result<(), LockError>, Duration)> {
    let client = client.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let result = client.lock(key).wait(wait).acquire().await;
        (result.map(drop), started.elapsed())
    })
}

/// Runs a blocking harness step (pause, restart) without stalling the test's runtime.
pub(crate) fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}
