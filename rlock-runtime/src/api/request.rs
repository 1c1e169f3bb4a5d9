//! A lock request: what it is of (one key as a kind, or several lock keys) and its options;
//! `acquire` hands it to `acquire.rs` (one key) or `multi.rs` (several).

use std::time::Duration;

use crate::api::acquire::acquire_one;
use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::multi::acquire_all;
use crate::api::options::{LockOptions, OnLost};
use crate::backend::Kind;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};

impl LockClient {
    /// Starts a lock request for `key`; finish it with [`LockRequest::acquire`].
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let user_id = 42;
    /// let guard = client.lock(format!("order:{user_id}")).acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, key: impl IntoLockKey) -> LockRequest<'_> {
        self.lock_checked(key.into_lock_key())
    }

    /// A request for one of `permits` permits of the semaphore `key`: at most `permits`
    /// holders at once across every instance (Redisson's `RPermitExpirableSemaphore`). Each
    /// permit is a lease of its own, renewed by the watchdog and given back by its guard, so
    /// a crashed holder's permit comes back when its lease ends, by Redis's clock. Waiting is
    /// queued like a lock's: a release hands its permit to the first live waiter.
    ///
    /// The count is stored with the semaphore while a permit is in use: a request naming
    /// another count gets [`LockError::InvalidConfig`], as does `permits` of 0, a fenced
    /// request (permits carry no fencing token), or a Redlock client (independent masters
    /// cannot keep one count). Inside a locked scope, asking again for the same semaphore
    /// re-enters the permit held instead of taking a second one. A name is a lock or a
    /// semaphore, not both.
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let first = client.semaphore("export:acme", 2).acquire().await?;
    /// let second = client.semaphore("export:acme", 2).acquire().await?;
    /// // At most two exports per tenant at once:
    /// assert!(client.semaphore("export:acme", 2).acquire().await.unwrap_err().is_busy());
    /// first.release().await?;
    /// let third = client.semaphore("export:acme", 2).acquire().await?;
    /// # drop((second, third)); Ok(()) }
    /// ```
    pub fn semaphore(&self, key: impl IntoLockKey, permits: u32) -> LockRequest<'_> {
        self.semaphore_checked(key.into_lock_key(), permits)
    }

    /// A request for the read lock of `key`: many readers at once, none beside a writer
    /// (Redisson's `RReadWriteLock.readLock()`). Each reader's share is a lease of its own,
    /// renewed by the watchdog and given back by its guard, so a crashed reader's share ends
    /// with its own lease, by Redis's clock, whatever the other readers do.
    ///
    /// Waiting is queued in arrival order, always: a reader does not pass a writer that
    /// waits (writers are not starved), and a writer's release admits the readers queued
    /// behind it together. A reader with no wait (`wait` of zero) is refused while a
    /// writer waits.
    ///
    /// A write holder may take the read lock beside its write (a downgrade), and the read
    /// stays held on its own once the write is released: with the write guard's
    /// [`downgrade`](crate::LockGuard::downgrade), or by asking for the read lock inside a
    /// locked write scope (an annotated function, `run`, `with_lock`). Inside a locked read
    /// scope, asking for the write lock gets [`LockError::WouldDeadlock`] at once instead of
    /// waiting for itself. These rights follow the guard and the scope, never the task
    /// that once took a lock: a guard moved to another task takes them along, and a read
    /// asked outside any scope is an ordinary reader (beside a write guard this task still
    /// has, it waits like anyone else). A read lease carries no fencing token (`fenced` is refused: fence the writes); Redlock
    /// refuses read-write locks. A name is one kind of thing: a lock, a semaphore or a
    /// read-write lock (the in-process backend keeps no queue, so there a waiting writer
    /// does not hold back new readers).
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let (other, writer) = (client.sibling(), client.sibling()); // other instances
    /// let a = client.read_lock("config:42").acquire().await?;
    /// let b = other.read_lock("config:42").acquire().await?; // readers share it
    /// assert!(writer.write_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// // Inside a read scope, asking for the write lock would wait for itself.
    /// let upgrade = client
    ///     .read_lock("config:42")
    ///     .run(async { client.write_lock("config:42").acquire().await.map(drop) })
    ///     .await?;
    /// assert!(matches!(upgrade, Err(LockError::WouldDeadlock { .. })));
    /// # drop((a, b)); Ok(()) }
    /// ```
    pub fn read_lock(&self, key: impl IntoLockKey) -> LockRequest<'_> {
        LockRequest::new(
            self,
            Kind::Read,
            key.into_lock_key(),
            LockOptions::default(),
        )
    }

    /// A request for the upgradeable read lock of `key` (DistributedLock's
    /// `UpgradeableReadLock`): a reader, beside any other readers, of whom there is at most
    /// one at a time, with the right to become the writer
    /// ([`upgrade`](LockGuard::upgrade)) without letting another writer in between. It
    /// waits as a reader does, and also for another upgradeable reader; a write holder may
    /// take it beside its write (a downgrade), and a write lock asked for inside its scope is
    /// its upgrade. Not fenced itself: the write it upgrades to always is.
    ///
    /// The read-then-write pattern without holding the write lock while reading: many
    /// readers keep reading until the one that decides to write upgrades, and then the write
    /// waits only for the readers already in.
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let other = client.sibling(); // another instance, as far as locks go
    /// let config = client.upgradeable_read_lock("config:42").acquire().await?;
    /// let reader = other.read_lock("config:42").acquire().await?; // readers share it
    /// assert!(other.write_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// assert!(other.upgradeable_read_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// reader.release().await?;
    /// let write = config.upgrade().await?; // no writer came between
    /// # drop((write, config)); Ok(()) }
    /// ```
    pub fn upgradeable_read_lock(&self, key: impl IntoLockKey) -> LockRequest<'_> {
        LockRequest::new(
            self,
            Kind::UpgradeableRead,
            key.into_lock_key(),
            LockOptions::default(),
        )
    }

    /// A request for the write lock of `key`: one writer, with no reader beside it
    /// (Redisson's `RReadWriteLock.writeLock()`). It may be fenced. See
    /// [`read_lock`](Self::read_lock) for waiting, downgrades and what is refused.
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let other = client.sibling(); // another instance, as far as locks go
    /// let writer = client.write_lock("config:42").fenced().acquire().await?;
    /// assert!(writer.fence().is_some());
    /// assert!(other.read_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// // The writer may read (a downgrade), and keeps reading after the write ends:
    /// let reader = writer.downgrade().await?;
    /// writer.release().await?;
    /// assert!(other.write_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// let shared = other.read_lock("config:42").acquire().await?;
    /// # drop((reader, shared)); Ok(()) }
    /// ```
    pub fn write_lock(&self, key: impl IntoLockKey) -> LockRequest<'_> {
        LockRequest::new(
            self,
            Kind::Write,
            key.into_lock_key(),
            LockOptions::default(),
        )
    }

    pub(crate) fn semaphore_checked(
        &self,
        key: Result<LockKey, LockError>,
        permits: u32,
    ) -> LockRequest<'_> {
        LockRequest::new(
            self,
            Kind::Permit { permits, take: 1 },
            key,
            LockOptions::default(),
        )
    }

    pub(crate) fn lock_checked(&self, key: Result<LockKey, LockError>) -> LockRequest<'_> {
        LockRequest::new(self, Kind::Lock, key, LockOptions::default())
    }

    /// A request for all of `keys` or none: "transfer between two accounts" takes both
    /// accounts' locks (Redisson's `RMultiLock`, DistributedLock's composite locks). Each key
    /// is an ordinary lock key, which `lock`, `inspect` and `force_unlock` see held.
    ///
    /// The keys of one server (or Sentinel's master, or the in-process backend) are taken in
    /// one atomic script call, all or none; on Redis Cluster, the keys of each slot together,
    /// slot after slot in one canonical order (their Redis keys' byte order, whatever order
    /// they were named in); on Redlock, key after key. When a key is busy, every key taken
    /// so far is given back and the call waits, within the one wait budget, for that key
    /// alone, queued like any of its waiters; handed it, it tries again with that key its
    /// own. So a waiting `lock_all` holds none of its keys (users of one of them never queue
    /// behind a transfer that is not running), two callers naming the same keys in
    /// different orders never deadlock, and a caller never keeps some of the keys. The
    /// guard's `lost()` fires when any key's lease is lost, `extend` extends each, and
    /// `release` gives each back (in the reverse order); inside a locked scope, a nested
    /// `lock` of one of the keys re-enters it, and a `lock_all` naming a key the scope holds
    /// re-enters that one.
    ///
    /// Duplicate keys, no keys, and `fenced` (ask each key for its own fence with `lock`)
    /// are refused with [`LockError::InvalidConfig`]; a key that holds another kind with
    /// [`LockError::WrongKind`].
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let both = client
    ///     .lock_all(["account:1", "account:2"])
    ///     .wait(Duration::from_secs(1))
    ///     .acquire()
    ///     .await?;
    /// // Another caller naming them the other way round waits, it does not deadlock.
    /// let other = client.lock_all(["account:2", "account:1"]).acquire().await;
    /// assert!(other.unwrap_err().is_busy());
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<K: IntoLockKey>(&self, keys: impl IntoIterator<Item = K>) -> LockRequest<'_> {
        let keys = keys
            .into_iter()
            .map(IntoLockKey::into_lock_key)
            .collect::<Result<Vec<LockKey>, LockError>>()
            .map(Keys::All);
        LockRequest::of_keys(self, Kind::Lock, keys, LockOptions::default())
    }
}

/// A lock request being configured; created by [`LockClient::lock`].
///
/// ```
/// use rlock_runtime::LockClient;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let guard = client
///     .lock("voucher:3")
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_millis(200))
///     .acquire()
///     .await?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a lock request does nothing until `.acquire().await`"]
pub struct LockRequest<'a> {
    client: &'a LockClient,
    /// What it leases.
    kind: Kind,
    keys: Result<Keys, LockError>,
    options: LockOptions,
}

/// The keys a request takes: one, or all of several ([`LockClient::lock_all`]).
#[derive(Debug)]
pub(crate) enum Keys {
    One(LockKey),
    All(Vec<LockKey>),
}

impl<'a> LockRequest<'a> {
    pub(crate) fn new(
        client: &'a LockClient,
        kind: Kind,
        key: Result<LockKey, LockError>,
        options: LockOptions,
    ) -> Self {
        Self::of_keys(client, kind, key.map(Keys::One), options)
    }

    pub(crate) fn of_keys(
        client: &'a LockClient,
        kind: Kind,
        keys: Result<Keys, LockError>,
        options: LockOptions,
    ) -> Self {
        Self {
            client,
            kind,
            keys,
            options,
        }
    }

    /// The lease length (default: the client's default ttl).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = Some(ttl);
        self
    }

    /// How long to wait while another owner holds the lock (default: the client's
    /// [`default_wait`](crate::LockClientBuilder::default_wait), zero — one attempt — unless
    /// configured). The budget is a deadline: `acquire` returns by it, whatever Redis does.
    /// `Duration::MAX` waits until granted (any budget over thirty years counts as thirty
    /// years).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// The lock's label in exported metrics (the `metrics` feature): its key template, never
    /// the rendered key. See [`LockOptions::metrics_label`].
    pub fn metrics_label(mut self, label: &'static str) -> Self {
        self.options.label = Some(label);
        self
    }

    /// Whether the watchdog renews the lease while the guard lives (default: on).
    pub fn renew(mut self, renew: bool) -> Self {
        self.options.renew = renew;
        self
    }

    /// A hard cap on the total time held, renewals included.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.options.max_hold = Some(max_hold);
        self
    }

    /// Keeps the key taken at least `min_hold` after the grant, even when the guard is
    /// released sooner (ShedLock's `lockAtLeastFor`): a job that every instance's scheduler
    /// starts at the same moment runs once, since an instance whose clock or start is a little
    /// late finds the key still taken instead of free.
    ///
    /// A release before `min_hold` has passed does not delete the key: it sets the key's
    /// lease, if still this owner's, to what is left of `min_hold` (counted from when the
    /// grant's reply arrived, so never shorter than `min_hold` after the grant itself), and
    /// the key ends on Redis's clock. Nobody is handed the lock then; waiters take it at
    /// their next check in after it ends. A release after `min_hold` is an ordinary release.
    /// If the release cannot reach Redis, the key ends with its current lease. `min_hold`
    /// may be longer than the ttl (renewal keeps the lease while held) and is at most
    /// [`MAX_TTL`](crate::MAX_TTL), and at most `max_hold` when both are set.
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let run = client
    ///     .lock("job:daily-report")
    ///     .min_hold(Duration::from_secs(30))
    ///     .acquire()
    ///     .await?;
    /// run.release().await?; // the report took a second
    /// // Another instance's scheduler, a moment late, skips this run.
    /// assert!(client.lock("job:daily-report").acquire().await.unwrap_err().is_busy());
    /// # Ok(()) }
    /// ```
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.options.min_hold = Some(min_hold);
        self
    }

    /// For a semaphore: takes `n` of its permits at once, held and given back together as
    /// one lease (Redisson's `acquire(n)`, tokio's `acquire_many`); default 1. A heavy export
    /// takes 3 of a tenant's 10 slots:
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let export = client.semaphore("export:acme", 10).permits(3).acquire().await?;
    /// let small = client.semaphore("export:acme", 10).permits(7).acquire().await?;
    /// assert!(client.semaphore("export:acme", 10).acquire().await.unwrap_err().is_busy());
    /// export.release().await?; // all three come back
    /// let next = client.semaphore("export:acme", 10).permits(3).acquire().await?;
    /// # drop((small, next)); Ok(()) }
    /// ```
    ///
    /// Waiting stays queued and herd-free, and is in arrival order for a hold of several
    /// permits, as tokio's semaphore: while one waits at the head of the queue, the permits
    /// that come free are kept for it, and no request arriving later takes them, so a
    /// stream of single permits never starves it. (A request for one permit may otherwise
    /// take a free one past the queue, unless it is [`fair`](Self::fair); the in-process
    /// backend keeps no queue.) A hold's token ends in `*<n>`, and
    /// [`inspect_semaphore`](LockClient::inspect_semaphore) counts its permits. Inside a
    /// locked scope, a request re-enters the hold of the same semaphore only when it asks for
    /// the same number.
    ///
    /// `n` of 0, more than the semaphore's count or more than 1000, or `permits` on anything
    /// but a semaphore, is [`LockError::InvalidConfig`].
    pub fn permits(mut self, n: u32) -> Self {
        match &mut self.kind {
            Kind::Permit { take, .. } => *take = n,
            other => {
                let kind = other.name();
                self.keys = self.keys.and_then(|keys| {
                    let named = match keys {
                        Keys::One(key) => format!("`{key}`"),
                        Keys::All(_) => "of several keys".to_owned(),
                    };
                    Err(LockError::InvalidConfig(format!(
                        "`permits({n})` on a {kind} {named}: only a semaphore's request takes \
                         several permits at once"
                    )))
                });
            }
        }
        self
    }

    /// Issue a fencing token with the lock ([`LockGuard::fence`]); off by default, since it
    /// costs a second key write in Redis on every acquisition.
    pub fn fenced(mut self) -> Self {
        self.options.fenced = true;
        self
    }

    /// Counts the grant only once `replicas` replicas have confirmed it (`WAIT replicas
    /// timeout` right after the acquisition, Redisson's `syncSlaves`); when fewer confirm
    /// within the command timeout, the lock is released and [`LockError::NotReplicated`]
    /// returned. It closes the window in which a master that fails right after granting a
    /// lock loses it on failover (the replica promoted in its place has it); it is not
    /// consensus: replication stays asynchronous for everything else, and a replica that
    /// confirmed may still not be the one promoted. Default: the client's
    /// ([`LockClientBuilder::min_replicas`](crate::LockClientBuilder::min_replicas), 0).
    /// Not available on Redlock, whose masters are independent.
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.options.min_replicas = Some(replicas);
        self
    }

    /// Grants the lock to waiters strictly in the order they arrived, across all instances
    /// (Redisson's fair lock).
    ///
    /// Without it, waiting is already queued: every waiter stands in the lock's queue in
    /// Redis, and a release hands the lock to the first live one (one announcement, one
    /// waiter acting on it, whatever the number of instances). What `fair` adds: a request
    /// that finds the lock *free* takes it only if no live waiter queued before it; without
    /// `fair` it takes it (as Redisson's default lock and redis-py's `Lock` do), which is
    /// cheaper and only differs when a handoff failed (a waiter died) or was not announced.
    ///
    /// A waiter that is cancelled or times out leaves the queue at once. One whose process
    /// dies is skipped by the next release (Redis dropped its client's subscription with its
    /// connection, and nobody receives the announcement naming it). One whose process hangs
    /// while still connected is handed the lock, which ends with the 2 s handoff lease; the
    /// next waiter has it from the check in that finds it free, within 3 s.
    ///
    /// Applies on one server, Sentinel and Cluster; on the in-process backend waiters are
    /// served in arrival order within the process; Redlock refuses it (its masters keep no
    /// common queue). A client that is not rlock (redis-py's `Lock` on the same key) knows
    /// nothing of the queue and takes the lock whenever it finds it free.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let guard = client
    ///     .lock("ticket:9")
    ///     .wait(Duration::from_secs(5))
    ///     .fair()
    ///     .acquire()
    ///     .await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn fair(mut self) -> Self {
        self.options.fair = true;
        self
    }

    /// Replaces all options at once.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// What a locked body does when the lease is lost: the request's own choice, else the
    /// client's default.
    pub(crate) fn on_lost(&self) -> OnLost {
        self.options
            .on_lost
            .unwrap_or(self.client.shared().default_on_lost)
    }

    /// Takes the lock: one round trip when it is free, none when the current task's call
    /// chain already holds it (reentry; the reentrant guard shares the outer hold and its
    /// options). While another owner holds it, waits up to the wait budget, then fails with
    /// [`LockError::Busy`].
    ///
    /// Waiting is queued in Redis, not polled: a waiter that finds the lock busy enters the
    /// lock's queue (in the same cluster slot), and a release hands the lock to the first
    /// live waiter there and names it in its announcement (Redis pub/sub, one subscribing
    /// connection per client). Only that waiter's client acts on it, and it needs no
    /// further command: the lock is already its own. So a handoff costs the same whether 2
    /// or 200 instances wait. While it waits, a waiter checks in every 0.67 s (one script
    /// call), which keeps the queue alive and puts its entry back if it is gone (a hand-off
    /// it missed, a queue Redis lost). The check also takes the lock if it finds it free
    /// with nobody told (a holder that crashed, an announcement that was lost). The queue's
    /// head is told the holder's remaining lease at each check in; when that ends sooner,
    /// it checks in at its end plus a few milliseconds. While a key's announcements are not
    /// confirmed (the subscription is pending, refused by an ACL, or its connection is
    /// down), waiters check every 50 ms.
    /// A failed attempt (Redis restarting, a timeout) is retried with backoff within the
    /// budget; when the budget runs out, `Busy` is returned only if Redis last said the lock
    /// was busy, else the last error (or [`LockError::Timeout`] when nothing answered).
    /// On Redlock, which keeps no queue, a release wakes the first waiter of each client,
    /// which tries again.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        match self.keys? {
            Keys::One(key) => acquire_one(self.client, self.kind, key, self.options).await,
            // Boxed: a rare path, whose state would ride inline in every acquisition.
            Keys::All(keys) => Box::pin(acquire_all(self.client, keys, self.options)).await,
        }
    }
}
