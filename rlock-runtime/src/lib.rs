//! # rlock: distributed locks on Redis for async Rust
//!
//! One attribute makes a handler run under a Redis lock, so that one user gets one order and
//! stock is never oversold, however many instances run behind the load balancer:
//!
//! ```no_run
//! use rlock_runtime::{LockClient, LockError, distributed_lock};
//!
//! #[derive(Debug)]
//! enum AppError { Lock(LockError) }
//! impl From<LockError> for AppError {
//!     fn from(e: LockError) -> Self { AppError::Lock(e) }
//! }
//!
//! #[distributed_lock(key = "order:<user_id>", ttl = "10s")]
//! async fn create_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> {
//!     // runs only while this process holds the Redis lock "order:<user_id>"
//!     Ok(voucher_id)
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! rlock_runtime::install(LockClient::connect("redis://127.0.0.1:6379/").await?);
//! create_order(42, 7).await.map_err(|e| format!("{e:?}"))?;
//! # Ok(()) }
//! ```
//!
//! The same semantics are available by hand through [`LockClient::lock`] (a [`LockGuard`])
//! and [`LockClient::with_lock`] (a future run under the lock).
//!
//! # Quick start
//! 1. Build a client once: [`LockClient::connect`] for one Redis (or
//!    [`LockClient::builder`] for a namespace, default ttl and command timeout), or
//!    [`LockClient::in_memory`] in unit tests.
//! 2. [`install`] it as the default, or name it per function with `client = …`.
//! 3. Annotate: `#[distributed_lock(key = "…")]` on an `async fn` returning `Result<T, E>`
//!    where `E: From<LockError>`.
//! 4. Map [`LockError`] at the edge: [`LockError::Busy`] is "try again" (HTTP 409),
//!    [`LockError::Timeout`]/[`LockError::Unavailable`] are "the lock service is down" (503),
//!    [`LockError::Lost`] is "the work may have overlapped another holder's".
//!
//! # What a lock is
//! - **Acquire** is one atomic `SET key token NX PX ttl`: one round trip when the lock is
//!   free. Asked for a [`Fence`] (`fenced`, or `fence = …` on the attribute), the same `SET`
//!   runs inside a Lua script that also issues the token, still one round trip. The owner
//!   token is unguessable and unique per acquisition. The key holds the plain token with an
//!   expiry, the format redis-py's `Lock` and the common `SET NX PX` recipe use, so those
//!   clients exclude rlock and back.
//! - **Release** deletes the key only if it still holds our token (compare-and-delete in
//!   Lua), and reports [`LockError::Lost`] when it did not: a holder whose lease ended never
//!   deletes the next holder's lock. When callers wait for the key, the same script hands the
//!   lock to the first of them instead and names it on a pub/sub channel; a release nobody
//!   waits for publishes nothing.
//! - **Reentrancy** belongs to the task's call chain: inside a locked body, locking the same
//!   key with the same client re-enters without a Redis command, and only the outermost
//!   release deletes. A task spawned from the body does not inherit the hold; a nested lock
//!   keeps the outer hold's ttl and renewal.
//! - **Waiting** (`wait` > 0): a caller that finds the lock busy enters the key's queue in
//!   Redis (`{key}:waiters`, in the lock's cluster slot). A release hands the lock to the
//!   first live waiter and names it on that waiter's client's own channel (one pub/sub
//!   connection per client): only that client acts, with no command, so a handoff costs the
//!   same for 2 or 200 waiting instances. A waiter is live while its client listens: a
//!   release skips one whose client's channel has no subscriber (its process died), and
//!   every check in of a waiter puts its entry back if it is gone (WAITING.md states the
//!   protocol and its invariants).
//!   [`LockRequest::fair`] adds strict arrival order across instances. A timer set to the
//!   holder's remaining lease (plus at most 5 ms) covers holders that die without releasing
//!   and clients that are not rlock; a waiter whose process hangs blocks the queue for at
//!   most its 2 s handoff lease. While a key's announcements are not confirmed (its
//!   subscription is pending, Redis refused it, or the feed's connection is down), its
//!   waiters check every 50 ms instead. Failed attempts are retried with backoff, and the budget is a deadline:
//!   `acquire` returns by it. Redlock keeps no common queue: a release wakes the first waiter
//!   of each client.
//! - **Renewal**: while a hold lives, one watchdog task per client renews every lease about
//!   every ttl/3, batching up to 256 keys per script call, two commands per key (three
//!   before Redis 7.0, whose `PEXPIRE` lacks `GT`). A renewal never shortens a lease in
//!   Redis. `max_hold` caps the total hold: then the hold is released and counted as lost.
//!   The watchdog, background releases and the release feed run on rlock's own background
//!   threads, so a caller's runtime that ends takes none of them with it. A multi-thread
//!   runtime's own commands go over a connection opened on it (no thread hop per reply),
//!   which only its tasks use and which ends with it.
//! - **Bounded**: every Redis call is bounded by the client's command timeout
//!   ([`DEFAULT_COMMAND_TIMEOUT`]); a dead or paused Redis gives [`LockError::Timeout`] or
//!   [`LockError::Unavailable`], never a hang or a panic. A command that times out replaces
//!   its connection, so a TCP flow that went silent costs about two command timeouts, not the
//!   kernel's retransmission time; the release feed checks its connection with a `PING` every
//!   second. A guard dropped without release (a panic, a cancelled future, an early return) is
//!   released in the background; an acquisition whose reply never came releases its token in
//!   the background, so no orphan lock blocks others for a lease.
//!
//! # The states of a hold
//! Each hold is one state machine with one owner: held → (renewal or extend on its way, at
//! most one at a time, each remembering the ttl it asked) → held, and from held to released
//! (by its owner) or lost. The client's estimate of the lease's end is always a lower bound of
//! Redis's: it counts from when a request was *sent*, less a margin of 1 % of the ttl plus
//! 2 ms (clock-rate drift and scheduling); an [`extend`](LockGuard::extend) counts from its
//! send; an extend whose reply never came may still land, so its ttl caps every later estimate.
//!
//! # When the lease is lost
//! The lease is counted lost when a renewal, extend or release finds another token (or none)
//! under the key; when the client's lower bound of the lease's end passes without a renewal
//! proving it longer (Redis unreachable or slow, this process paused, renewal off), even if a
//! renewal is still on its way; or at `max_hold`. Then [`LockGuard::lost`] resolves and,
//! under `on_lost = "abort"` (the default), the body's future is dropped at its next `.await`
//! and [`LockError::Lost`] returned. Because the estimate is a lower bound with a margin, the
//! signal comes before Redis can have granted the key to anyone else, as far as this process's
//! clock can tell. It may come while Redis still holds the key (a renewal whose reply was late
//! may in fact have landed): the client cannot prove the lease, so it does not claim it.
//!
//! What the body may assume: while it runs and `lost()` has not fired, no other rlock client
//! has been *granted* the key since this hold began, **as far as this process can prove**. A
//! process paused longer than the lease (GC, swap, a stopped VM) cannot notice anything until
//! it runs again: by then another holder may have started, and whatever the paused body does
//! before its next `.await` happens outside the lease. Aborting narrows that window; it cannot
//! close it, because nothing running on the client can. That is what fencing is for.
//!
//! # What fencing adds
//! Every acquisition of a key that asks for it gets a [`Fence`] strictly greater than every
//! earlier one for that key. (It is opt-in: it costs a second key write per acquisition, which
//! locks that no store checks should not pay.) Pass it with each write to the store the lock
//! protects, and have the store keep the highest token it has seen and reject writes carrying
//! a lower one. Then a holder that lost its lease without knowing (the pause above) has its
//! late write refused, whatever the timing. Fences need the store's cooperation; locks alone cannot give that guarantee. See
//! [`Fence`] for how tokens are made and the assumption they rest on.
//!
//! # Failure modes
//! - **Redis down or unreachable**: acquisition fails with a backend error within the command
//!   timeout (a waiter retries within its budget); held leases are reported lost when their
//!   lower bound passes. Service resumes on its own once Redis is back.
//! - **Redis paused** (SIGSTOP, a long fork): commands time out and their connection is
//!   replaced; after the pause, renewals resume if the leases had not been counted lost.
//! - **A TCP flow that goes silent** (a NAT, firewall or load balancer that lost it, without a
//!   reset): the first command that times out condemns the connection and the next opens a new
//!   one; the release feed notices within its health `PING` interval plus a command timeout.
//! - **A runtime that ends**: the watchdog, release feed and background releases run on
//!   rlock's background threads, so one client can be shared by many runtimes, such as per-test
//!   runtimes with an installed client. The only thing of the client on a caller's runtime is
//!   a multi-thread runtime's own command connection, used by its tasks alone; a
//!   current-thread runtime's commands go through the background runtime's.
//! - **Failover** of a replicated Redis (Sentinel, Cluster): replication is asynchronous, so a
//!   lock granted just before the master failed may be missing on the promoted replica, and
//!   two holders can coexist until the first holder's next renewal finds the key gone and
//!   `lost()` fires. `min_replicas` closes that window for grants (they count only once a
//!   replica has them). Fencing tokens still increase if the new master's clock does not lag
//!   the old one's by more than a lease. Use fencing where this matters.
//! - **Client clock**: never used for ownership; only to decide when to renew and when a
//!   lease can no longer be proven held (measured from when requests were sent).
//!
//! # Topologies
//! [`LockClientBuilder::url`] takes one URL form per topology, so that one setting selects
//! any of them: `redis://` (one server), `redis+sentinel://` (a master the sentinels follow
//! across failovers: the client moves to the new master as soon as a sentinel announces it
//! with `+switch-master`), `redis+cluster://` (Redis Cluster: scripts keep their keys in one
//! slot, renewals are batched per slot, `MOVED` and `ASK` are followed so holds in a
//! migrating slot stay renewed, releases are announced on sharded channels) and
//! `redlock://` (a majority of independent masters; no fencing). `min_replicas` makes a grant
//! count only once replicas confirm it (`WAIT`), which closes the window in which a lock
//! granted just before a master dies is missing on the promoted replica.
//!
//! # Choosing `ttl` and `wait`
//! With renewal on (the default), `ttl` is how long a crashed holder blocks others: a few
//! seconds to tens of seconds (Redisson uses 30 s), comfortably above the worst Redis round
//! trip. With renewal off it must exceed the longest body, pauses included. `wait` is how long
//! a caller may queue: `0s` for "one at a time, reject the rest" (one order per user), about
//! the body's typical duration times the expected queue length for "serialize them".
//!
//! # Keys
//! Key template values are percent-encoded for [`key::RESERVED`] characters, so distinct
//! argument tuples render distinct keys and no value can inject a cluster hash tag or a glob.
//! See [`KeyBuilder`].
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(test, allow(clippy::unwrap_used))]

// The layers, each a folder importing only the ones below it (ARCHITECTURE.md maps them):
// api/ (the façade) → lease/ → wait/ → backend/, with metrics/, util/, key and error as
// leaves every layer may use.
mod api;
mod backend;
mod error;
pub mod key;
mod lease;
mod metrics;
mod util;
mod wait;

use std::sync::RwLock;

pub use api::admin::{LockInfo, LockList, PermitHolder, ReadWriteInfo, SemaphoreInfo};
pub use api::client::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_TTL, LockClient, LockClientBuilder, MAX_COMMAND_TIMEOUT,
};
pub use api::diagnose::{
    Check, CheckOutcome, Deployment, Diagnosis, ReplicaAcks, ServerReport, Waiting,
};
pub use api::guard::LockGuard;
pub use api::hand_over::HoldToken;
#[cfg(all(feature = "idempotency", feature = "actix-web"))]
pub use api::idempotency::actix::{IdempotencyMiddleware, IdempotentService};
#[cfg(feature = "idempotency")]
pub use api::idempotency::tower::{
    IDEMPOTENCY_KEY, IDEMPOTENCY_REPLAYED, IdempotencyLayer, Idempotent,
};
pub use api::identity::{HOST_VAR, Identity, SERVICE_VAR};
pub use api::leader::{LeaderChanges, LeaderInfo, LeaderRequest, Leadership};
#[cfg(feature = "once")]
pub use api::once::{ONCE_MAX_SIZE, OnceRequest};
pub use api::options::{LockOptions, OnLost};
pub use api::request::LockRequest;
pub use error::{BoxError, KeyKind, LockError, Operation};
pub use key::{IntoLockKey, KeyBuilder, LockKey};
pub use lease::plan::{MAX_HOLD, MAX_TTL};
pub use metrics::LockMetrics;
pub use util::fence::Fence;

#[cfg(feature = "once")]
#[doc(inline)]
pub use rlock_macros::single_flight;
#[doc(inline)]
pub use rlock_macros::{distributed_lock, read_lock, semaphore, upgradeable_read_lock, write_lock};

// The README's tour is compiled as a doc test, so that it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
struct ReadmeTour;

/// The client `#[distributed_lock]` uses when it is given no `client = …`.
static DEFAULT_CLIENT: RwLock<Option<LockClient>> = RwLock::new(None);

/// Sets the process-wide default client used by `#[distributed_lock]` without `client = …`.
/// Installing again replaces the previous default.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// rlock_runtime::install(LockClient::in_memory());
/// assert!(rlock_runtime::installed().is_some());
/// ```
pub fn install(client: LockClient) {
    // The slot holds a plain Option, which a panic elsewhere cannot leave inconsistent.
    *DEFAULT_CLIENT
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(client);
}

/// The installed default client, if any.
///
/// ```
/// if rlock_runtime::installed().is_none() {
///     rlock_runtime::install(rlock_runtime::LockClient::in_memory());
/// }
/// ```
pub fn installed() -> Option<LockClient> {
    DEFAULT_CLIENT
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// What code generated by `#[distributed_lock]` calls. Not a public API: it may change in any
/// release. Generated code reaches it as `__private_<major>_<minor>` (see below).
mod private {
    use std::sync::Arc;

    pub use crate::api::run::Outcome;
    pub use crate::{KeyBuilder, LockClient, LockError, LockKey, LockOptions, OnLost};
    pub use ::core::time::Duration;

    /// The installed client, or [`LockError::NotConfigured`].
    pub fn default_client() -> Result<LockClient, LockError> {
        crate::installed().ok_or(LockError::NotConfigured)
    }

    /// What `client = …` may name.
    #[diagnostic::on_unimplemented(
        message = "`client = …` must be a `LockClient`, `&LockClient` or `Arc<LockClient>`, not `{Self}`",
        label = "not a lock client"
    )]
    pub trait ClientRef {
        /// A handle on the client.
        fn to_client(&self) -> LockClient;
    }

    impl ClientRef for LockClient {
        fn to_client(&self) -> LockClient {
            self.clone()
        }
    }

    impl ClientRef for Arc<LockClient> {
        fn to_client(&self) -> LockClient {
            (**self).clone()
        }
    }

    impl<C: ClientRef + ?Sized> ClientRef for &C {
        fn to_client(&self) -> LockClient {
            (**self).to_client()
        }
    }

    impl<C: ClientRef + ?Sized> ClientRef for &mut C {
        fn to_client(&self) -> LockClient {
            (**self).to_client()
        }
    }

    /// Fails to compile, on the placeholder's type, when it cannot render into a key.
    pub fn key_placeholder_needs_display<T: ::core::fmt::Display + ?Sized>(_: &T) {}

    /// The return types an annotated function may have: those that can carry a
    /// [`LockError`].
    #[diagnostic::on_unimplemented(
        message = "a `#[distributed_lock]` function must return `Result<T, E>` with `E: From<LockError>`, not `{Self}`",
        label = "the lock's failure must be returnable here",
        note = "add `impl From<rlock_runtime::LockError> for YourError`, or return `Result<T, rlock_runtime::LockError>`"
    )]
    pub trait LockResult: Sized {
        /// How this type reports a lock failure.
        const OUTCOME: Outcome<Self>;
    }

    impl<T, E: From<LockError>> LockResult for Result<T, E> {
        const OUTCOME: Outcome<Self> = Outcome::RESULT;
    }

    /// The return types a `#[single_flight]` function may have: a result whose value is
    /// shared as JSON and whose error can carry a [`LockError`].
    #[cfg(feature = "once")]
    #[diagnostic::on_unimplemented(
        message = "a `#[single_flight]` function must return `Result<T, E>` with `T: Serialize + DeserializeOwned` and `E: From<LockError>`, not `{Self}`",
        label = "its value is shared with every caller, as JSON",
        note = "derive `serde::Serialize` and `serde::Deserialize` for the value, and add `impl From<rlock_runtime::LockError> for YourError`"
    )]
    pub trait SharedResult: Sized {
        /// Runs `body` once for `key` across every instance (see `LockClient::once`).
        fn run_once<F, Fut>(
            client: Result<LockClient, LockError>,
            key: Result<LockKey, LockError>,
            options: LockOptions,
            body: F,
        ) -> impl Future<Output = Self>
        where
            F: FnOnce() -> Fut,
            Fut: Future<Output = Self>;
    }

    #[cfg(feature = "once")]
    impl<T, E> SharedResult for Result<T, E>
    where
        T: ::serde::Serialize + ::serde::de::DeserializeOwned,
        E: From<LockError>,
    {
        async fn run_once<F, Fut>(
            client: Result<LockClient, LockError>,
            key: Result<LockKey, LockError>,
            options: LockOptions,
            body: F,
        ) -> Self
        where
            F: FnOnce() -> Fut,
            Fut: Future<Output = Self>,
        {
            let client = client?;
            let mut once = client.once(key?);
            if let Some(ttl) = options.ttl {
                once = once.ttl(ttl);
            }
            if let Some(wait) = options.wait {
                once = once.wait(wait);
            }
            once.run(body).await
        }
    }

    /// Acquires, runs the body with the fence, releases (see `LockClient::with_lock`).
    /// The macro passes `<ReturnType as LockResult>::OUTCOME` as `outcome`, named on the
    /// function's return type so that a wrong one is reported there, once.
    pub use crate::api::run::{Taking, run_locked, run_locked_all};

    /// The lease scripts' calls as the store builds them, for the model's conformance test.
    pub mod script_calls {
        pub use crate::backend::script_calls::*;
    }

    /// A key's Redis Cluster slot, for the benchmark's commands sent by hand to each
    /// master.
    pub fn cluster_slot(key: &[u8]) -> u16 {
        crate::util::slot::slot_of(key)
    }
}

// The support module under the versioned name generated code uses (`__private_0_1`), which
// the macro crate defines for both, as thiserror versions its `__private` module.
rlock_macros::__private_module!(crate::private);
