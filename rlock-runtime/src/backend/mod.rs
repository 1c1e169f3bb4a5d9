//! Where locks live. Every backend offers the same atomic operations on a [`Lease`] of any
//! [`Kind`] (acquire, release, renew a batch, extend) and a release feed; waiting, reentrancy,
//! renewal scheduling and the hold's state are built once above them. Every call is bounded
//! by the client's command timeout here, at the bottom, so no layer above can forget it.
//!
//! This layer imports nothing above it: it tells of releases through [`ReleaseListener`],
//! an interface it owns and the waiting layer implements.

pub(crate) mod address;
pub(crate) mod cluster;
pub(crate) mod cluster_conn;
pub(crate) mod connection;
pub(crate) mod deployment;
pub(crate) mod doctor;
pub(crate) mod endpoint;
pub(crate) mod kind;
pub(crate) mod memory;
pub(crate) mod protocol;
pub(crate) mod pubsub;
pub(crate) mod queue;
pub(crate) mod redlock;
pub(crate) mod script_calls;
pub(crate) mod scripted;
pub(crate) mod scripts;
pub(crate) mod sentinel;
pub(crate) mod single;
pub(crate) mod topology;
pub(crate) mod watch;

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::{KeyKind, LockError};
use crate::util::token::Token;
pub(crate) use kind::Kind;
pub(crate) use queue::{Handoff, QueueAsk, QueueCall, QueueEntry};

/// One lease as the backend sees it: what kind of thing is leased, its stored key, the owner
/// token, the lease length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
}

/// What a holder's release expects to find queued behind its lease, which decides what its
/// first call carries. The release is whole either way: a first call that finds what it did
/// not carry for (a queue, a fenced waiter) changes nothing, and is sent again in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behind {
    /// Most likely nobody: the lease was taken by a caller that would not wait, as callers of
    /// a key nobody waits for take it. A lock's release then carries its token alone, not the
    /// channel and command a hand-off needs (a bare release).
    Nobody,
    /// Maybe waiters (the lease was taken by a waiting caller, or handed on): the release
    /// carries what a hand-off needs, and declares the lock's fence record when `fenced`
    /// (the lease was fenced, as the waiters behind a fenced hold most often are).
    Waiters { fenced: bool },
}

impl Behind {
    /// Maybe waiters, fenced ones when `fenced` (see [`Behind::Waiters`]).
    pub(crate) fn waiters(fenced: bool) -> Self {
        Self::Waiters { fenced }
    }
}

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours, with a fencing token when one was asked for.
    Acquired { fence: Option<u64> },
    /// A release handed the lock to this queued waiter before this attempt came (its
    /// announcement is on the way, or was lost); the lease has `left` from when the attempt
    /// was sent.
    Handed { fence: Option<u64>, left: Duration },
    /// Another owner holds it; its lease has this much left, when the backend tells (in a
    /// queue in Redis: to the queue's head, on every call). The waiter is queued in Redis if
    /// it asked to be, unless the queue was full.
    Busy {
        remaining: Option<Duration>,
        queued: bool,
        standing: Standing,
    },
    /// Redlock: too few masters answered for a majority to grant it.
    NoQuorum { granted: usize, needed: usize },
    /// The key holds what this kind cannot take: nothing was done.
    Misfit(Misfit),
}

/// Where a busy attempt left its waiter in the queue in Redis, as its client's next waiter's
/// arrival needs to know: whether it may join with a plain `RPUSHX`
/// ([`Kind::joins_by_append`]) rather than the acquire script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// At the queue's head, or not in it: the next arrival takes the script, which takes a
    /// free lease in the same round trip.
    Head,
    /// Behind others: the next may join plainly.
    Behind,
    /// Behind others under a semaphore's count set at run time, which a plain join's entry
    /// (its caller's count) would not carry: the next arrival takes the script.
    Recounted,
}

/// Why a key cannot be taken as the kind asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Misfit {
    /// The semaphore was made with another permit count.
    Permits { stored: u32 },
    /// The key holds another kind of thing (a semaphore where a lock was asked for).
    OtherKind { found: KeyKind },
    /// An upgrade whose upgradeable read is no longer held: it was lost.
    NotHeld,
}

impl Misfit {
    /// The error for a request of `kind` on `key`.
    pub(crate) fn error(self, kind: Kind, key: impl std::fmt::Display) -> LockError {
        match (self, kind) {
            (Self::Permits { stored }, Kind::Permit { take, .. })
                if take > stored && stored > 0 =>
            {
                LockError::InvalidConfig(format!(
                    "semaphore `{key}` has {stored} permits now (set at run time), and this \
                     request takes {take} at once: it could never be granted; take fewer, or \
                     raise the count with `set_permits`"
                ))
            }
            (Self::Permits { stored }, Kind::Permit { permits, .. }) => {
                LockError::InvalidConfig(format!(
                    "semaphore `{key}` has {stored} permits in Redis, and this request names \
                     {permits}: every caller of a semaphore must name the same count (it is \
                     stored with the permits and ends with the last of them)"
                ))
            }
            (Self::Permits { .. }, _) => LockError::WrongKind {
                key: key.to_string(),
                asked: kind.key_kind(),
                found: KeyKind::Semaphore,
            },
            (Self::OtherKind { found }, _) => LockError::WrongKind {
                key: key.to_string(),
                asked: kind.key_kind(),
                found,
            },
            (Self::NotHeld, _) => LockError::Lost {
                key: key.to_string(),
            },
        }
    }
}

/// A change to a semaphore's count at run time (`scripts/semaphore/resize.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountChange {
    /// The count is this from now on, whatever callers name.
    Set(u32),
    /// The count set (or, with none set, the one in use) changes by this, to at least 0.
    Add(i64),
    /// No count is set any more: callers' counts apply again.
    Clear,
}

/// What a change to a semaphore's count found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recounted {
    /// Done: the count now (for [`CountChange::Clear`], the one the permits in use were
    /// taken under, 0 when none are).
    Count(u32),
    /// [`CountChange::Add`] found no count, neither set nor in use.
    NoCount,
    /// The key holds another kind: nothing was done.
    Misfit(Misfit),
}

/// The outcome of one attempt at several lock keys at once, all or none (`lock_all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllAttempt {
    /// Every key is the caller's now.
    Taken,
    /// The key at `index` is another owner's: nothing was taken.
    Busy { index: usize },
    /// The key at `index`, held by the caller already, no longer holds its token (its lease
    /// ended, or its hold was released): nothing was taken.
    NotHeld { index: usize },
    /// The key at `index` holds another kind: nothing was taken.
    Misfit { index: usize, misfit: Misfit },
}

/// One key of a group that [`LeaseStore::acquire_all`] takes: its lease under its owner
/// token, and whether the caller holds it already under that token (a key handed to it while
/// it waited, or one its locked scope holds). Such a key's lease is set anew only while the
/// key still holds that token: a call that runs after the hold's release (held back on its
/// way while the release went on another connection) must not take the key again for a hold
/// that nobody has any more.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupLease<'a> {
    pub(crate) lease: Lease<'a>,
    pub(crate) held: bool,
}

/// What an attempt must find out besides taking the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttemptAsks {
    /// Issue a fencing token with the lock.
    pub(crate) fence: bool,
    /// When busy, learn how long the holder's lease has left (for a waiter's timer).
    pub(crate) remaining: bool,
    /// Wait in the lock's queue in Redis (where the backend keeps one), to be handed the
    /// lock by a release.
    pub(crate) queue: Option<QueueAsk>,
    /// A read-write lock's only: the number of this client's token of another role of the
    /// key that the lease is taken beside (the token is the caller's client and this
    /// number): a reader's (or the upgradeable reader's) own writer (a downgrade), or a
    /// writer's own upgradeable reader (an upgrade, whose token names it already).
    pub(crate) beside_of: Option<u64>,
}

impl AttemptAsks {
    /// The write token a reader under `token` may hold beside (see
    /// [`beside_of`](Self::beside_of)): the reader's client's token of that number.
    pub(crate) fn beside(&self, token: &str) -> Option<String> {
        let number = self.beside_of?;
        let client = Token::parse(token)?.client;
        Some(Token::plain(client, number).to_string())
    }
}

/// Who holds a lock or a semaphore, as the backend sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Holder {
    /// What the key holds; another kind than the one inspected is not read (the rest is
    /// empty). `None` when it is free.
    pub(crate) found: Option<KeyKind>,
    /// The holder's owner token (a semaphore's: the permit that ends first); `None` when
    /// nobody holds it.
    pub(crate) token: Option<String>,
    /// What is left of its lease, when it has one.
    pub(crate) remaining: Option<Duration>,
    /// Entries in its queue in Redis (live or not), where it keeps one.
    pub(crate) queued: Option<u32>,
    /// A semaphore's permits in use, or a read-write lock's readers (`token` is then its
    /// writer's).
    pub(crate) permits: Option<Permits>,
}

/// A change to a client's holder card (`scripts/card.lua`): fields to set and to delete, and
/// the card's lease from now. Every call sets the client's name too, so a card that
/// expired comes back whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CardPost<'a> {
    /// The card's key.
    pub(crate) key: &'a str,
    /// How long the card lives unless posted again.
    pub(crate) lease: Duration,
    /// Fields and values to set: the client's name, and holds with their grant times.
    pub(crate) set: &'a [(String, String)],
    /// Fields to delete: holds that ended.
    pub(crate) delete: &'a [String],
}

/// A holder card's fields read for one hold (`HMGET`): the client's name, and the hold's
/// grant time when the card lists it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CardFields {
    /// `@service`, `@host`, `@pid`, then the hold's field; `None` where absent.
    pub(crate) values: Vec<Option<String>>,
}

/// Which keys a scan keeps (and counts towards its limit).
pub(crate) type KeepKey = dyn Fn(&str) -> bool + Send + Sync;

/// Keys found by a bounded scan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Scanned {
    /// The keys, each once.
    pub(crate) keys: Vec<String>,
    /// Whether every node's scan ran to its end (else a bound stopped it).
    pub(crate) complete: bool,
}

impl Scanned {
    /// Sorted, each key once, at most `limit` (not complete if more were found).
    pub(crate) fn finish(mut self, limit: usize) -> Self {
        self.keys.sort();
        self.keys.dedup();
        self.complete &= self.keys.len() <= limit;
        self.keys.truncate(limit);
        self
    }
}

/// A semaphore's permits in use (or a read-write lock's readers), as inspected.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Permits {
    /// A semaphore's stored count; a read-write lock's number of readers.
    pub(crate) count: u32,
    /// A semaphore's permits in use (a hold of several counting each).
    pub(crate) in_use: u32,
    /// The owner tokens of the first holds (readers), at most
    /// [`MOST_LISTED`](protocol::MOST_LISTED) of them; of a read-write lock, its upgradeable
    /// reader's first.
    pub(crate) owners: Vec<String>,
    /// A read-write lock's upgradeable reader (one of `owners`), if one holds.
    pub(crate) upgrader: Option<String>,
}

/// Told by a backend's release feed what it hears. Implemented by the waiting layer.
pub(crate) trait ReleaseListener: Send + Sync {
    /// A release of `key` was announced; `handed` names the waiter it was handed to, if any.
    fn released(&self, key: &str, handed: Option<Handoff>);
    /// Announcements for `key` will arrive from now on (its subscription is confirmed).
    fn confirmed(&self, key: &str);
    /// Announcements for `key` cannot arrive (Redis refused the subscription, e.g. an ACL
    /// user without channel rights).
    fn refused(&self, key: &str);
    /// The feed's connection failed: no key's announcements can be relied on until
    /// confirmed again, and some may have been missed.
    fn feed_lost(&self);
}

/// A backend's release announcements, subscribed per key.
pub(crate) trait ReleaseFeed: Send + Sync + std::fmt::Debug {
    /// Start announcing `key`'s releases; the listener hears `confirmed` or `refused`.
    fn subscribe(&self, key: &str);
    /// Stop announcing `key`'s releases.
    fn unsubscribe(&self, key: &str);
}

/// What a lock may ask for that not every topology can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feature {
    /// Fencing tokens that only grow per key.
    Fences,
    /// Fair waiting: never taken past a live waiter queued earlier.
    FairWaiting,
    /// A grant confirmed by replicas (`min_replicas`).
    ReplicaAcks,
    /// Semaphores: a count of permits kept in one place.
    Semaphores,
    /// Read-write locks: readers and a writer granted in arrival order from one queue.
    ReadWrite,
}

/// The lease operations every backend offers, each atomic on the server.
pub(crate) trait LeaseStore {
    /// Why `feature` cannot be had on this topology, if it cannot (a sentence for the
    /// configuration error). Every topology offers every feature unless it says otherwise.
    fn refuses(&self, feature: Feature) -> Option<&'static str> {
        let _ = feature;
        None
    }

    /// Whether waiters queue in Redis and releases hand the lock to the first of them (one
    /// server, Sentinel, Cluster); otherwise every client's first waiter is woken and tries.
    fn queues_in_redis(&self) -> bool {
        false
    }

    /// How many master switches the sentinels announced (0 off Sentinel).
    fn master_switches(&self) -> u64 {
        0
    }

    /// The group of lock keys that [`acquire_all`](Self::acquire_all) takes in one call with
    /// `redis_key`: a cluster slot, or one group for every key of one server; `None` where
    /// each key is taken alone (Redlock's independent masters), by [`acquire`](Self::acquire).
    fn taken_together(&self, redis_key: &str) -> Option<u16> {
        let _ = redis_key;
        None
    }

    /// Takes every lock of `leases` (one group of [`taken_together`](Self::taken_together),
    /// each with its owner token: a new one, or one of the caller's holds of it already,
    /// whose lease is set anew while it still holds that token), all or none, in one atomic
    /// step. Only called for a group.
    fn acquire_all(
        &self,
        leases: &[GroupLease<'_>],
    ) -> impl Future<Output = Result<AllAttempt, LockError>> + Send {
        let _ = leases;
        async {
            Err(LockError::InvalidConfig(
                "this topology takes several keys one by one".to_owned(),
            ))
        }
    }

    /// Takes the lock if it is free: value and expiry in one atomic step, with a fencing
    /// token issued in the same step when asked.
    fn acquire(
        &self,
        lease: Lease<'_>,
        ask: AttemptAsks,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send;

    /// Deletes the lock if `lease.token` still owns it, or hands it to the next waiter
    /// queued in Redis; `Ok(false)` when it did not own it. What is found `behind` the lease
    /// other than expected (a queue behind a bare release, a fenced waiter next without the
    /// fence record declared) costs the release a second round trip.
    fn release(
        &self,
        lease: Lease<'_>,
        behind: Behind,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// A waiter gives up: its entry (queued for `lease.ttl`, `fenced` or not) leaves the
    /// queue, and a lock handed to it meanwhile is released (handed on); `Ok(true)` when it
    /// held the lock. Without a queue in Redis, the same as [`release`](Self::release).
    fn withdraw(
        &self,
        lease: Lease<'_>,
        fenced: bool,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Renews many leases in one call, each only if still ours and never shortening it
    /// (a late renewal must not undo a longer `extend`); per lease `Some(true)` when still
    /// ours, `Some(false)` when not, `None` when it cannot be told (Redlock: too few masters
    /// answered either way). The reply is awaited at most `limit` (and the command timeout).
    fn renew(
        &self,
        batch: &[Lease<'_>],
        limit: Duration,
    ) -> impl Future<Output = Result<Vec<Option<bool>>, LockError>> + Send;

    /// Sets the lease to exactly `lease.ttl` from now if still ours; `Ok(false)` when not.
    fn extend(&self, lease: Lease<'_>) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// As [`extend`](Self::extend), and `successor` becomes the lease's owner in place of
    /// `lease.token` (a hold taken over by another client): the old token owns nothing
    /// after it.
    fn succeed(
        &self,
        lease: Lease<'_>,
        successor: &str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Reads who holds `key` (leased as `kind`) and how much of its lease is left, in one
    /// atomic step (Redlock: the token a majority of masters hold, if one does).
    fn inspect(
        &self,
        kind: Kind,
        key: &str,
    ) -> impl Future<Output = Result<Holder, LockError>> + Send;

    /// Changes the count of the semaphore at `key` at run time, keeping its holders, and
    /// grants the waiters a raised count lets in (Redlock keeps no semaphores: an error).
    fn recount(
        &self,
        key: &str,
        change: CountChange,
    ) -> impl Future<Output = Result<Recounted, LockError>> + Send;

    /// Posts a change to a holder card; `Ok(false)` when the card had expired before it (the
    /// caller posts it whole again). Redlock: to every master, at least one answering.
    fn post_card(&self, post: CardPost<'_>)
    -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Keys matching the glob `pattern`, by `SCAN … COUNT page` on every node (a cluster's
    /// masters, every Redlock master), at most `limit` keys that `keep` keeps and `limit / page + 10` pages
    /// per node, each page within the command timeout. Never `KEYS`.
    fn scan(
        &self,
        pattern: &str,
        page: u32,
        limit: usize,
        keep: &KeepKey,
    ) -> impl Future<Output = Result<Scanned, LockError>> + Send;

    #[cfg(any(feature = "once", feature = "idempotency"))]
    /// Reads the value stored at `key` by [`write_value`](Self::write_value), `None` when
    /// there is none (or it is not a plain value).
    fn read_value(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, LockError>> + Send;

    #[cfg(any(feature = "once", feature = "idempotency"))]
    /// Stores `value` at `key` for `ttl`, replacing what was there. Redlock keeps no shared
    /// values: an error.
    fn write_value(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Reads `fields` of the holder card at `key` (all `None` when there is no card).
    fn read_card(
        &self,
        key: &str,
        fields: &[&str],
    ) -> impl Future<Output = Result<CardFields, LockError>> + Send;

    /// Waits (within the command timeout) until `replicas` replicas have the grant of
    /// `lease`; returns how many confirmed it.
    fn confirm_replicas(
        &self,
        lease: Lease<'_>,
        replicas: u32,
    ) -> impl Future<Output = Result<u32, LockError>> + Send;
}

/// The backends, as an enum rather than a trait object: the set is closed and known here.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    Redis(Arc<scripted::RedisNode>),
    Cluster(Arc<cluster::ClusterStore>),
    Redlock(Arc<redlock::Redlock>),
    Memory(memory::MemoryBackend),
}

impl Backend {
    /// Connects `listener` to the backend's release announcements. `None` when every release
    /// is announced without subscribing (in process).
    pub(crate) fn release_feed(
        &self,
        client: &str,
        listener: Weak<dyn ReleaseListener>,
    ) -> Option<Arc<dyn ReleaseFeed>> {
        match self {
            Self::Redis(b) => Some(Arc::new(b.release_feed(client, listener))),
            Self::Cluster(b) => Some(Arc::new(b.release_feed(client, listener))),
            Self::Redlock(b) => Some(Arc::new(redlock::FanIn::new(b, &listener))),
            Self::Memory(b) => {
                b.listen(listener);
                None
            }
        }
    }

    /// Whether calls complete in process, without I/O (a release can be done from `Drop`).
    pub(crate) fn in_process(&self) -> Option<&memory::MemoryBackend> {
        match self {
            Self::Memory(b) => Some(b),
            Self::Redis(_) | Self::Cluster(_) | Self::Redlock(_) => None,
        }
    }
}

/// `$body` with `$store` bound to the backend's own store, whichever it is: one arm per
/// topology, written once (as tokio's `match_flavor!`).
macro_rules! each {
    ($backend:expr, $store:ident => $body:expr) => {
        match $backend {
            Backend::Redis($store) => $body,
            Backend::Cluster($store) => $body,
            Backend::Redlock($store) => $body,
            Backend::Memory($store) => $body,
        }
    };
}

impl LeaseStore for Backend {
    fn refuses(&self, feature: Feature) -> Option<&'static str> {
        each!(self, b => b.refuses(feature))
    }

    fn queues_in_redis(&self) -> bool {
        each!(self, b => b.queues_in_redis())
    }

    fn master_switches(&self) -> u64 {
        each!(self, b => b.master_switches())
    }

    fn taken_together(&self, redis_key: &str) -> Option<u16> {
        each!(self, b => b.taken_together(redis_key))
    }

    async fn acquire_all(&self, leases: &[GroupLease<'_>]) -> Result<AllAttempt, LockError> {
        each!(self, b => b.acquire_all(leases).await)
    }

    async fn acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Result<Attempt, LockError> {
        each!(self, b => b.acquire(lease, ask).await)
    }

    async fn release(&self, lease: Lease<'_>, behind: Behind) -> Result<bool, LockError> {
        each!(self, b => b.release(lease, behind).await)
    }

    async fn renew(
        &self,
        batch: &[Lease<'_>],
        limit: Duration,
    ) -> Result<Vec<Option<bool>>, LockError> {
        each!(self, b => b.renew(batch, limit).await)
    }

    async fn withdraw(&self, lease: Lease<'_>, fenced: bool) -> Result<bool, LockError> {
        each!(self, b => b.withdraw(lease, fenced).await)
    }

    async fn extend(&self, lease: Lease<'_>) -> Result<bool, LockError> {
        each!(self, b => b.extend(lease).await)
    }

    async fn succeed(&self, lease: Lease<'_>, successor: &str) -> Result<bool, LockError> {
        each!(self, b => b.succeed(lease, successor).await)
    }

    async fn inspect(&self, kind: Kind, key: &str) -> Result<Holder, LockError> {
        each!(self, b => b.inspect(kind, key).await)
    }

    async fn recount(&self, key: &str, change: CountChange) -> Result<Recounted, LockError> {
        each!(self, b => b.recount(key, change).await)
    }

    async fn confirm_replicas(&self, lease: Lease<'_>, replicas: u32) -> Result<u32, LockError> {
        each!(self, b => b.confirm_replicas(lease, replicas).await)
    }

    async fn post_card(&self, post: CardPost<'_>) -> Result<bool, LockError> {
        each!(self, b => b.post_card(post).await)
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn read_value(&self, key: &str) -> Result<Option<Vec<u8>>, LockError> {
        each!(self, b => b.read_value(key).await)
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn write_value(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), LockError> {
        each!(self, b => b.write_value(key, value, ttl).await)
    }

    async fn read_card(&self, key: &str, fields: &[&str]) -> Result<CardFields, LockError> {
        each!(self, b => b.read_card(key, fields).await)
    }

    async fn scan(
        &self,
        pattern: &str,
        page: u32,
        limit: usize,
        keep: &KeepKey,
    ) -> Result<Scanned, LockError> {
        each!(self, b => b.scan(pattern, page, limit, keep).await)
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
