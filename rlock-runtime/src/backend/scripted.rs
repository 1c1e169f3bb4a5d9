//! The scripted lease store: one healing command connection shared by every task of the
//! client, and one subscribing connection for release announcements. [`RedisNode`] is a
//! single server (or the sentinels' master); on Redis Cluster the same scripts run on a
//! cluster connection, each script's keys in one slot, renewals batched per slot, and
//! releases announced on sharded channels.

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisError};

use std::collections::BTreeMap;

use futures_util::future::join_all;

use super::connection::Connection;
use super::endpoint::Endpoint;
use super::kind::{LOCK_ALL, RECOUNT};
use super::protocol::{
    AcquireArgs, AcquireMode, AcquireReply, AllReply, Found, InspectReply, QueueArgs, acquired,
    entry, entry_kind, flag, inspected, lease_left, released,
};
use super::pubsub::{Connector, Feed};
use super::scripts::{Lua, ScriptCall, Waiters, query};
use super::topology::{Announcing, Topology};
use super::{
    AllAttempt, Attempt, AttemptAsks, Behind, CardFields, CardPost, CountChange, GroupLease,
    Holder, KeepKey, Kind, Lease, LeaseStore, Misfit, QueueAsk, QueueCall, Recounted,
    ReleaseListener, Scanned, Standing, millis,
};
use crate::error::{KeyKind, LockError, Operation};
use crate::key::Companion;
use crate::util::tuning::{
    HANDOFF_LEASE, REPLICA_WAIT_DIVISOR, WAITERS_MARK_SLACK, WAITERS_QUEUE_LEASE, WAITERS_QUEUE_MAX,
};

/// Posts holder cards (`scripts/card.lua`); off the locks' path, so not loaded up front.
static CARD: std::sync::LazyLock<Lua> =
    std::sync::LazyLock::new(|| Lua::new(include_str!("../../scripts/card.lua")));

/// Who releases: the holder, or a waiter leaving the queue (which gives up its entry, and a
/// lock handed to it meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Releaser {
    Holder,
    /// Its entry says whether it asked for a fence.
    LeavingWaiter {
        fenced: bool,
    },
}

/// The lease operations as scripts, over connections that its topology opens.
pub(crate) struct Scripted<D: Topology> {
    pub(super) topology: D,
    pub(super) conn: Connection<D>,
    /// Waiters queue here and releases hand the lock on; off for a Redlock master, whose
    /// releases announce to every waiter instead.
    queue: bool,
    /// The server takes `SET … NX … GET` (Redis 7.0 and later); cleared at the first
    /// refusal, after which the acquire script does what it did.
    set_nx_get: AtomicBool,
}

/// One Redis server, or the master the sentinels name.
pub(crate) type RedisNode = Scripted<Endpoint>;

impl<D: Topology> std::fmt::Debug for Scripted<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted").finish_non_exhaustive()
    }
}

impl<D: Topology> Scripted<D> {
    /// Opens the command connection; `timeout` bounds connecting and every later command.
    pub(crate) async fn connect(topology: D, timeout: Duration) -> Result<Self, LockError> {
        let store = Self::lazy(topology, timeout);
        store.load_scripts().await?;
        let topology = &store.topology;
        store
            .conn
            .call(Operation::Connect, timeout, |c| topology.learn(c))
            .await?;
        Ok(store)
    }

    /// A store whose connection opens on first use (a Redlock master may be down at start).
    pub(crate) fn lazy(topology: D, timeout: Duration) -> Self {
        let conn = Connection::lazy(topology.clone(), timeout);
        Self {
            topology,
            conn,
            queue: true,
            set_nx_get: AtomicBool::new(true),
        }
    }

    /// A Redlock master: no queue (each master would hand the lock to its own queue's
    /// head); a release announces itself to every waiter while one has marked the key.
    pub(crate) fn announcing_to_all(mut self) -> Self {
        self.queue = false;
        self
    }

    /// Runs the release script for `releaser`, which expects `behind` its lease what it
    /// says (a leaving waiter: anything).
    async fn release_script(
        &self,
        lease: Lease<'_>,
        releaser: Releaser,
        behind: Behind,
    ) -> Result<bool, LockError> {
        let bare = behind == Behind::Nobody
            && self.queue
            && releaser == Releaser::Holder
            && lease.kind.releases_bare();
        let release = if bare {
            bare_release_call(lease)
        } else {
            let fence_record = behind == Behind::Waiters { fenced: true };
            let announcing = self.topology.announcing(lease.key);
            release_call(lease, releaser, fence_record, self.queue, &announcing)
        };
        let operation = match releaser {
            Releaser::Holder => Operation::Release,
            Releaser::LeavingWaiter { .. } => Operation::Withdraw,
        };
        let mut outcome: i64 = self
            .invoke(operation, self.conn.timeout(), &release)
            .await?;
        if outcome == released::AGAIN_IN_FULL {
            // Boxed: a bare release that finds a queue, or a hand-off to a fenced waiter
            // after an unfenced hold, is the rare release.
            outcome = Box::pin(async {
                let again = release_again_call(lease, &self.topology.announcing(lease.key));
                self.invoke::<i64>(operation, self.conn.timeout(), &again)
                    .await
            })
            .await?;
        }
        Ok(match outcome {
            released::RELEASED => true,
            released::NOT_OURS => false,
            // AGAIN_IN_FULL a second time: nothing of ours was given back.
            _ => false,
        })
    }

    /// Connects and loads the lock's scripts up front, so the first calls do not all miss at
    /// once and load them again one by one. (After a server restart the cache is empty, and
    /// another kind's scripts are not loaded yet: EVALSHA reloads then.)
    pub(crate) async fn load_scripts(&self) -> Result<(), LockError> {
        for script in Kind::Lock.scripts().hot() {
            self.conn
                .call(
                    Operation::Connect,
                    self.conn.timeout(),
                    |mut c| async move { script.load(&mut c).await },
                )
                .await?;
        }
        Ok(())
    }

    /// A release feed on its own subscribing connection.
    pub(crate) fn release_feed(&self, client: &str, listener: Weak<dyn ReleaseListener>) -> Feed<D>
    where
        D: Connector + Clone,
    {
        // With a queue, releases name their waiter on its client's own channel.
        let client = self.queue.then_some(client);
        Feed::new(self.topology.clone(), client, self.conn.timeout(), listener)
    }

    /// Runs a script call within `limit`.
    async fn invoke<T: FromRedisValue>(
        &self,
        operation: Operation,
        limit: Duration,
        call: &ScriptCall,
    ) -> Result<T, LockError> {
        self.conn
            .call(operation, limit, |c| call.run::<D, T>(c))
            .await
    }
}

impl<D: Topology> Scripted<D> {
    /// Without a fence and without waiting, a plain `SET key token NX PX ttl GET`: the
    /// cheapest atomic acquire there is, whose reply also tells a lock held (the holder's
    /// token) from another kind's state (`WRONGTYPE`). A waiter (which needs the holder's
    /// remaining lease when busy), a fence, another kind's state, or a server without
    /// `SET … NX … GET` (before Redis 7.0) takes the acquire script instead: still one round
    /// trip. Bounded by `limit`.
    pub(crate) async fn acquire_within(
        &self,
        lease: Lease<'_>,
        ask: AttemptAsks,
        timeout: Duration,
    ) -> Result<Attempt, LockError> {
        let queue = ask.queue.filter(|_| self.queue);
        if !ask.fence
            && !ask.remaining
            && queue.is_none()
            && lease.kind.acquires_with_set_nx()
            && self.set_nx_get.load(Ordering::Relaxed)
        {
            match self.set_nx(lease, timeout).await? {
                SetNx::Taken => return Ok(Attempt::Acquired { fence: None }),
                SetNx::Busy => {
                    return Ok(Attempt::Busy {
                        remaining: None,
                        queued: false,
                        standing: Standing::Head,
                    });
                }
                SetNx::Unsupported => self.set_nx_get.store(false, Ordering::Relaxed),
                // The script names what the key holds.
                SetNx::OtherKind => {}
            }
        }
        // A kind whose every call the script must see (a semaphore's count, a read-write
        // lock's roles) never joins without it.
        if let Some(QueueAsk {
            call: QueueCall::Append { refresh },
            ..
        }) = queue
            && lease.kind.joins_by_append()
            && let Some(busy) = self.append(lease, refresh, ask.fence, timeout).await?
        {
            return Ok(busy);
        }
        let announcing = self.topology.announcing(lease.key);
        let mode = match queue {
            Some(queue) => AcquireMode::Queue(queue_args(
                lease,
                &announcing,
                queue.fair,
                queue.call == QueueCall::CheckIn,
            )),
            None if ask.remaining && !self.queue => AcquireMode::Mark {
                slack_ms: millis(WAITERS_MARK_SLACK),
            },
            None => AcquireMode::Once,
        };
        let beside = match lease.kind {
            Kind::Read | Kind::UpgradeableRead => ask.beside(lease.token),
            Kind::Lock | Kind::Permit { .. } | Kind::Write => None,
        };
        let acquire = acquire_call(lease, self.queue, ask.fence, beside, mode);
        let reply: Vec<i64> = self.invoke(Operation::Acquire, timeout, &acquire).await?;
        // The script's fences are positive; a negative one cannot come from it.
        let fence = |fence: i64| ask.fence.then(|| u64::try_from(fence).unwrap_or(0));
        Ok(match AcquireReply::read(&reply) {
            AcquireReply::Taken { fence: f } => Attempt::Acquired { fence: fence(f) },
            AcquireReply::Handed { fence: f, pttl } => Attempt::Handed {
                fence: fence(f),
                left: lease_left(pttl).unwrap_or_default(),
            },
            AcquireReply::OtherCount { stored } => Attempt::Misfit(Misfit::Permits {
                stored: u32::try_from(stored).unwrap_or(0),
            }),
            AcquireReply::OtherKind(found) => Attempt::Misfit(Misfit::OtherKind {
                found: found.key_kind().unwrap_or(KeyKind::Other),
            }),
            AcquireReply::NotHeld => Attempt::Misfit(Misfit::NotHeld),
            AcquireReply::Busy { pttl, queued } => {
                let queued = queue.is_some() && queued;
                let remaining = lease_left(pttl);
                Attempt::Busy {
                    remaining,
                    queued,
                    standing: match pttl {
                        acquired::RECOUNTED => Standing::Recounted,
                        // The script reads the holder's lease only for the queue's head.
                        _ if queued && remaining.is_none() => Standing::Behind,
                        _ => Standing::Head,
                    },
                }
            }
        })
    }

    /// `SET key token NX PX ttl GET`, read.
    async fn set_nx(&self, lease: Lease<'_>, timeout: Duration) -> Result<SetNx, LockError> {
        self.conn
            .call(Operation::Acquire, timeout, |c| async move {
                let mut set = Cmd::with_capacity(7, 32 + lease.key.len() + lease.token.len());
                set.arg("SET")
                    .arg(lease.key)
                    .arg(lease.token)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis(lease.ttl))
                    .arg("GET");
                match query::<D, Option<redis::Value>>(c, &set).await {
                    Ok(None) => Ok(SetNx::Taken),
                    Ok(Some(_)) => Ok(SetNx::Busy),
                    Err(e) if e.code() == Some("WRONGTYPE") => Ok(SetNx::OtherKind),
                    Err(e)
                        if e.code() == Some("ERR")
                            && e.detail().is_some_and(|d| d.contains("syntax")) =>
                    {
                        Ok(SetNx::Unsupported)
                    }
                    Err(e) => Err(e),
                }
            })
            .await
    }
}

/// What `SET key token NX PX ttl GET` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetNx {
    /// Nothing was there: the lock is ours.
    Taken,
    /// A lock (a string) was there: busy.
    Busy,
    /// Another kind's state (`WRONGTYPE`): nothing was done.
    OtherKind,
    /// The server does not take `NX` with `GET` (before Redis 7.0): nothing was done.
    Unsupported,
}

impl<D: Topology> Scripted<D> {
    /// The kind's extend script: sets the lease to exactly `lease.ttl` if still ours, and with
    /// a `successor`, makes it the owner in our place; whether it was ours.
    async fn extend_call(
        &self,
        lease: Lease<'_>,
        successor: Option<&str>,
    ) -> Result<bool, LockError> {
        let mut extend = lease.kind.scripts().extend.call(&[lease.key]);
        extend.arg(lease.token).arg(millis(lease.ttl));
        if let Some(successor) = successor {
            extend.arg(successor);
        }
        let extended: i64 = self
            .invoke(Operation::Extend, self.conn.timeout(), &extend)
            .await?;
        Ok(extended == 1)
    }

    /// Joins the lock's queue with a plain `RPUSHX` (and renews its expiry, when due, in the
    /// same round trip): `None` when there is no queue, and the acquire script must look at
    /// the lock. An entry past the queue's bound is taken back: the waiter waits on timers.
    async fn append(
        &self,
        lease: Lease<'_>,
        refresh: bool,
        fenced: bool,
        timeout: Duration,
    ) -> Result<Option<Attempt>, LockError> {
        let queue = Companion::waiters(lease.key);
        let entry = &entry(lease.token, handoff_lease(lease), fenced, lease.kind);
        let length: u64 = self
            .conn
            .call(Operation::Acquire, timeout, |mut c| async move {
                let (length,): (u64,) = append_pipe(queue, entry, refresh)
                    .query_async(&mut c)
                    .await?;
                if length > u64::from(WAITERS_QUEUE_MAX) {
                    redis::cmd("LREM")
                        .arg(queue)
                        .arg(-1)
                        .arg(entry)
                        .query_async::<()>(&mut c)
                        .await?;
                }
                Ok(length)
            })
            .await?;
        let queued = length <= u64::from(WAITERS_QUEUE_MAX);
        Ok((length > 0).then_some(Attempt::Busy {
            remaining: None,
            queued,
            standing: if queued {
                Standing::Behind
            } else {
                Standing::Head
            },
        }))
    }
}

/// The lease a release gives the queued waiter of `lease` (see [`HANDOFF_LEASE`]), in ms.
pub(super) fn handoff_lease(lease: Lease<'_>) -> u64 {
    millis(lease.ttl.min(HANDOFF_LEASE))
}

// The calls this store sends, built apart from sending them, so that they are built once
// whoever sends them (`script_calls.rs` builds the same for the model's conformance test).

/// A call of the acquire or release script, with every key either may touch: the key, then
/// its kind's companions (where waiters stand, the fence record), all in its slot.
fn keyed(lua: &'static Lua, lease: Lease<'_>, queue: bool) -> ScriptCall {
    let companions = lease.kind.companions(lease.key, queue);
    let bytes = lease.key.len() + companions.iter().map(Companion::len).sum::<usize>();
    let mut call = lua.start(1 + companions.len(), bytes);
    call.arg(lease.key);
    for companion in companions {
        call.arg(companion);
    }
    call
}

/// The queue's arguments of a waiting caller's acquire of `lease`: `fair`, and `queued` for a
/// check in.
pub(super) fn queue_args<'a>(
    lease: Lease<'_>,
    announcing: &'a Announcing,
    fair: bool,
    queued: bool,
) -> QueueArgs<'a> {
    QueueArgs {
        queue_lease_ms: millis(WAITERS_QUEUE_LEASE),
        handoff_ms: handoff_lease(lease),
        channel: announcing.script_channel(),
        publish: announcing.command(),
        most: WAITERS_QUEUE_MAX,
        fair,
        queued,
    }
}

/// The acquire script's call of `lease` (with the fence if `fenced`; a reader `beside` its own
/// task's write token), on a store whose waiters `queue` in Redis.
pub(super) fn acquire_call(
    lease: Lease<'_>,
    queue: bool,
    fenced: bool,
    beside: Option<String>,
    mode: AcquireMode<'_>,
) -> ScriptCall {
    let own = match lease.kind {
        Kind::Permit { permits, .. } => permits.to_string(),
        Kind::Read | Kind::UpgradeableRead => beside.unwrap_or_default(),
        Kind::Lock | Kind::Write => String::new(),
    };
    let mut acquire = keyed(&lease.kind.scripts().acquire, lease, queue);
    AcquireArgs {
        token: lease.token,
        lease_ms: millis(lease.ttl),
        fenced,
        own: &own,
        mode,
    }
    .write(&mut acquire);
    acquire
}

/// The resize script's call changing the count of the semaphore at `key`, announcing as
/// `announcing` says.
pub(super) fn recount_call(key: &str, change: CountChange, announcing: &Announcing) -> ScriptCall {
    let [queue, record] = Kind::Permit {
        permits: 1,
        take: 1,
    }
    .companions(key, true);
    let (change, amount) = match change {
        CountChange::Set(permits) => ("set", i64::from(permits)),
        CountChange::Add(delta) => ("add", delta),
        CountChange::Clear => ("clear", 0),
    };
    let mut call = RECOUNT.start(3, key.len() + queue.len() + record.len() + 64);
    call.arg(key).arg(queue).arg(record);
    call.arg(change)
        .arg(amount)
        .arg(announcing.script_channel())
        .arg(announcing.command());
    call
}

/// The resize script's reply, read.
pub(super) fn recounted(reply: &[i64]) -> Recounted {
    let at = |i: usize| reply.get(i).copied().unwrap_or(0);
    match at(0) {
        0 => Recounted::Count(u32::try_from(at(1)).unwrap_or(u32::MAX)),
        acquired::OTHER_KIND => Recounted::Misfit(Misfit::OtherKind {
            found: Found::from_code(at(1)).key_kind().unwrap_or(KeyKind::Other),
        }),
        _ => Recounted::NoCount,
    }
}

/// The release script's first call for `releaser` of `lease` (`fence_record`: the fence
/// record declared up front), on a store whose waiters `queue` in Redis.
pub(super) fn release_call(
    lease: Lease<'_>,
    releaser: Releaser,
    fence_record: bool,
    queue: bool,
    announcing: &Announcing,
) -> ScriptCall {
    // The common release (a queue, not leaving, no fence) takes the lock and its queue as
    // keys, and the token and the channel alone: each key and argument costs Redis strings
    // to parse and to build for Lua, a key most of all (and on a cluster a slot to check).
    // The fence record is declared when the script asks for it (a fenced waiter is next:
    // `release_again_call`).
    let script = &lease.kind.scripts().release;
    let common =
        queue && releaser == Releaser::Holder && lease.kind.short_release() && !fence_record;
    let mut release = if common {
        lock_and_queue(lease)
    } else {
        keyed(script, lease, queue)
    };
    release
        .arg(lease.token)
        .arg(announcing.script_channel())
        .arg(announcing.command());
    if !common {
        let waiters = if queue {
            Waiters::Queued
        } else {
            Waiters::Marked
        };
        release.arg(waiters.arg());
    }
    if let Releaser::LeavingWaiter { fenced } = releaser {
        release
            .arg("1")
            .arg(handoff_lease(lease))
            .arg(flag(fenced))
            .arg(entry_kind(lease.kind));
    }
    release
}

/// A holder's bare release of `lease` (its kind [releases bare](Kind::releases_bare)): the
/// lock and its queue as keys, and the token alone. The script answers `AGAIN_IN_FULL` when it
/// finds a queue, which a hand-off would need the channel and command for.
pub(super) fn bare_release_call(lease: Lease<'_>) -> ScriptCall {
    let mut call = lock_and_queue(lease);
    call.arg(lease.token);
    call
}

/// The release script's call of `lease` declaring the lock and its queue alone, the keys of
/// the common release and the bare one (not the fence record).
fn lock_and_queue(lease: Lease<'_>) -> ScriptCall {
    let queue = Companion::waiters(lease.key);
    let script = &lease.kind.scripts().release;
    let mut call = script.start(2, lease.key.len() + queue.len());
    call.arg(lease.key).arg(queue);
    call
}

/// The release script's call again after it answered `AGAIN_IN_FULL`, which only the common
/// release (see [`release_call`]) and the bare one can: the fence record declared, and the
/// hand-off's arguments given.
pub(super) fn release_again_call(lease: Lease<'_>, announcing: &Announcing) -> ScriptCall {
    let mut again = keyed(&lease.kind.scripts().release, lease, true);
    again
        .arg(lease.token)
        .arg(announcing.script_channel())
        .arg(announcing.command());
    again
}

/// A waiter's plain join of `queue`: `RPUSHX` of its `entry`, and (`refresh`) the queue's
/// expiry renewed; answers the queue's length, 0 when there was no queue.
pub(super) fn append_pipe(queue: Companion<'_>, entry: &str, refresh: bool) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("RPUSHX").arg(queue).arg(entry);
    if refresh {
        pipe.cmd("PEXPIRE")
            .arg(queue)
            .arg(millis(WAITERS_QUEUE_LEASE))
            .ignore();
    }
    pipe
}

/// The renew script's call for `leases`, all of one kind.
pub(super) fn renew_call(leases: &[Lease<'_>]) -> ScriptCall {
    let keys: Vec<&str> = leases.iter().map(|lease| lease.key).collect();
    let kind = leases.first().map_or(Kind::Lock, |lease| lease.kind);
    let mut call = kind.scripts().renew.call(&keys);
    for lease in leases {
        call.arg(lease.token).arg(millis(lease.ttl));
    }
    call
}

impl<D: Topology> LeaseStore for Scripted<D> {
    fn queues_in_redis(&self) -> bool {
        self.queue
    }

    /// How many times the server behind the connections changed (a Sentinel failover).
    fn master_switches(&self) -> u64 {
        self.topology.master_switches()
    }

    fn taken_together(&self, redis_key: &str) -> Option<u16> {
        // A Redlock master's key is taken with the other masters', one by one.
        self.queue.then(|| D::call_group(redis_key))
    }

    async fn acquire_all(&self, leases: &[GroupLease<'_>]) -> Result<AllAttempt, LockError> {
        let keys: Vec<&str> = leases.iter().map(|group| group.lease.key).collect();
        let mut call = LOCK_ALL.call(&keys);
        // One lease for all: a `lock_all` asks the same ttl of each key.
        call.arg(leases.first().map_or(1, |group| millis(group.lease.ttl)));
        let held: String = leases
            .iter()
            .map(|group| if group.held { 'h' } else { 'n' })
            .collect();
        call.arg(held);
        for group in leases {
            call.arg(group.lease.token);
        }
        let reply: Vec<i64> = self
            .invoke(Operation::Acquire, self.conn.timeout(), &call)
            .await?;
        Ok(match AllReply::read(&reply) {
            AllReply::Taken => AllAttempt::Taken,
            AllReply::Busy { index } => AllAttempt::Busy { index },
            AllReply::NotHeld { index } => AllAttempt::NotHeld { index },
            AllReply::OtherKind { index, found } => AllAttempt::Misfit {
                index,
                misfit: Misfit::OtherKind {
                    found: found.key_kind().unwrap_or(KeyKind::Other),
                },
            },
        })
    }

    async fn acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Result<Attempt, LockError> {
        self.acquire_within(lease, ask, self.conn.timeout()).await
    }

    async fn release(&self, lease: Lease<'_>, behind: Behind) -> Result<bool, LockError> {
        self.release_script(lease, Releaser::Holder, behind).await
    }

    async fn withdraw(&self, lease: Lease<'_>, fenced: bool) -> Result<bool, LockError> {
        let releaser = if self.queue {
            Releaser::LeavingWaiter { fenced }
        } else {
            Releaser::Holder
        };
        // The fence record declared: the waiter next may want a fence.
        self.release_script(lease, releaser, Behind::Waiters { fenced: true })
            .await
    }

    async fn renew(
        &self,
        batch: &[Lease<'_>],
        limit: Duration,
    ) -> Result<Vec<Option<bool>>, LockError> {
        // One script call per kind, and per slot on a cluster (a script's keys must share
        // one), all at once.
        let mut groups: BTreeMap<(Kind, u16), Vec<usize>> = BTreeMap::new();
        for (i, lease) in batch.iter().enumerate() {
            let group = (lease.kind, D::call_group(lease.key));
            groups.entry(group).or_default().push(i);
        }
        let calls = groups.values().map(|indexes| async move {
            let leases: Vec<Lease<'_>> = indexes.iter().map(|&i| batch[i]).collect();
            let renewed = self
                .conn
                .call(Operation::Renew, limit, |c| renew_group::<D>(c, leases))
                .await;
            (indexes, renewed)
        });
        let mut verdicts = vec![None; batch.len()];
        let mut first_error = None;
        for (indexes, renewed) in join_all(calls).await {
            match renewed {
                Ok(renewed) => {
                    for (&i, r) in indexes.iter().zip(renewed) {
                        verdicts[i] = r;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            // Nothing answered: the whole call failed.
            Some(e) if verdicts.iter().all(Option::is_none) => Err(e),
            _ => Ok(verdicts),
        }
    }

    async fn confirm_replicas(&self, lease: Lease<'_>, replicas: u32) -> Result<u32, LockError> {
        let timeout = self.conn.timeout();
        // Redis's own wait ends well inside ours, so that its count, not our timeout, answers.
        let wait_ms = millis(timeout / REPLICA_WAIT_DIVISOR);
        self.conn
            .call(Operation::ConfirmReplicas, timeout, |c| {
                D::wait_replicas(c, lease.key, replicas, wait_ms)
            })
            .await
    }

    async fn inspect(&self, kind: Kind, key: &str) -> Result<Holder, LockError> {
        let call = if self.queue {
            let [queue, record] = kind.companions(key, true);
            let mut call =
                (kind.scripts().inspect).start(3, key.len() + queue.len() + record.len());
            call.arg(key).arg(queue).arg(record);
            call
        } else {
            kind.scripts().inspect.call(&[key])
        };
        let reply: InspectReply = self
            .invoke(Operation::Inspect, self.conn.timeout(), &call)
            .await?;
        Ok(inspected(kind, reply))
    }

    async fn recount(&self, key: &str, change: CountChange) -> Result<Recounted, LockError> {
        let call = recount_call(key, change, &self.topology.announcing(key));
        let reply: Vec<i64> = self
            .invoke(Operation::SetPermits, self.conn.timeout(), &call)
            .await?;
        Ok(recounted(&reply))
    }

    async fn post_card(&self, post: CardPost<'_>) -> Result<bool, LockError> {
        let mut call = CARD.call(&[post.key]);
        call.arg(millis(post.lease)).arg(post.set.len());
        for (field, value) in post.set {
            call.arg(field).arg(value);
        }
        for field in post.delete {
            call.arg(field);
        }
        let existed: i64 = self
            .invoke(Operation::PostCard, self.conn.timeout(), &call)
            .await?;
        Ok(existed == 1)
    }

    async fn scan(
        &self,
        pattern: &str,
        page: u32,
        limit: usize,
        keep: &KeepKey,
    ) -> Result<Scanned, LockError> {
        let timeout = self.conn.timeout();
        let nodes = self
            .conn
            .call(Operation::Inspect, timeout, |c| D::scan_nodes(c))
            .await?;
        let most_pages = limit / page.max(1) as usize + 10;
        let mut found = Scanned {
            keys: Vec::new(),
            complete: true,
        };
        for node in nodes {
            let mut cursor = 0u64;
            let mut pages = 0;
            loop {
                if found.keys.len() >= limit || pages >= most_pages {
                    found.complete = false;
                    break;
                }
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(page);
                let node = node.clone();
                let (next, keys) = self
                    .conn
                    .call(Operation::Inspect, timeout, |c| D::scan_page(c, node, cmd))
                    .await?;
                pages += 1;
                found.keys.extend(keys.into_iter().filter(|k| keep(k)));
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(found.finish(limit))
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn read_value(&self, key: &str) -> Result<Option<Vec<u8>>, LockError> {
        let mut read = redis::cmd("GET");
        read.arg(key);
        let value = self
            .conn
            .call(Operation::ReadResult, self.conn.timeout(), |c| {
                query::<D, redis::Value>(c, &read)
            })
            .await?;
        // Anything but a plain value (another type's WRONGTYPE answers an error above) is
        // no stored result.
        Ok(match value {
            redis::Value::BulkString(bytes) => Some(bytes),
            _ => None,
        })
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn write_value(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), LockError> {
        let mut write = redis::cmd("SET");
        write.arg(key).arg(value).arg("PX").arg(millis(ttl));
        self.conn
            .call(Operation::StoreResult, self.conn.timeout(), |c| {
                query::<D, ()>(c, &write)
            })
            .await
    }

    async fn read_card(&self, key: &str, fields: &[&str]) -> Result<CardFields, LockError> {
        let mut read = redis::cmd("HMGET");
        read.arg(key).arg(fields);
        let values: Vec<Option<String>> = self
            .conn
            .call(Operation::Inspect, self.conn.timeout(), |c| {
                query::<D, Vec<Option<String>>>(c, &read)
            })
            .await?;
        Ok(CardFields { values })
    }

    async fn extend(&self, lease: Lease<'_>) -> Result<bool, LockError> {
        self.extend_call(lease, None).await
    }

    async fn succeed(&self, lease: Lease<'_>, successor: &str) -> Result<bool, LockError> {
        self.extend_call(lease, Some(successor)).await
    }
}

/// One renew script call for leases of one kind that share a slot; a verdict per lease, `None`
/// when its call got no answer.
///
/// While a cluster slot is half-migrated, a call whose keys are split between the two nodes
/// gets `TRYAGAIN` for as long as the migration lasts. Each key then goes in a call of its own,
/// which the cluster client follows to whichever node has the key (`ASK`).
async fn renew_group<D: Topology>(
    conn: D::Conn,
    leases: Vec<Lease<'_>>,
) -> Result<Vec<Option<bool>>, RedisError> {
    let call = renew_call;
    match call(&leases).run::<D, Vec<i64>>(conn.clone()).await {
        Ok(renewed) => Ok(renewed.into_iter().map(|r| Some(r == 1)).collect()),
        Err(e) if leases.len() > 1 && D::splits_batch(&e) => {
            let singles = leases.iter().map(|lease| {
                let (conn, single) = (conn.clone(), call(std::slice::from_ref(lease)));
                async move {
                    let renewed = single.run::<D, Vec<i64>>(conn).await;
                    renewed.ok().and_then(|r| r.first().map(|&r| r == 1))
                }
            });
            Ok(join_all(singles).await)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys, then the arguments, of a script call as sent (after `EVALSHA <hash>`).
    fn sent(call: &ScriptCall) -> (Vec<String>, Vec<String>) {
        let words: Vec<String> = call
            .evalsha()
            .args_iter()
            .skip(2)
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect();
        let keys: usize = words[0].parse().unwrap();
        (words[1..=keys].to_vec(), words[keys + 1..].to_vec())
    }

    /// A holder's release with no fence to issue declares the lock and its queue alone, and
    /// sends the token, the channel and its command, on one server and on a cluster alike
    /// (a cluster master checks the slot of every key a call declares). Its call again, when
    /// a fenced waiter is next, declares the fence record and announces on the same channel.
    #[test]
    fn a_holders_release_declares_two_keys_on_every_server() {
        let lease = Lease {
            kind: Kind::Lock,
            key: "order:1",
            token: "c:1",
            ttl: Duration::from_secs(10),
        };
        for announcing in [
            Announcing::Plain,
            Announcing::Sharded("rlock:released:{order:1}".to_owned()),
        ] {
            let release = release_call(lease, Releaser::Holder, false, true, &announcing);
            let (keys, args) = sent(&release);
            assert_eq!(keys, ["order:1", "{order:1}:waiters"], "{announcing:?}");
            assert_eq!(
                args,
                ["c:1", announcing.script_channel(), announcing.command()],
                "{announcing:?}"
            );
            let (keys, args) = sent(&release_again_call(lease, &announcing));
            assert_eq!(keys.len(), 3, "the fence record declared: {keys:?}");
            assert_eq!(
                args,
                ["c:1", announcing.script_channel(), announcing.command()],
                "{announcing:?}"
            );
        }
    }

    #[test]
    fn a_bare_release_sends_its_token_alone() {
        let lease = Lease {
            kind: Kind::Lock,
            key: "order:1",
            token: "c:1",
            ttl: Duration::from_secs(10),
        };
        let (keys, args) = sent(&bare_release_call(lease));
        assert_eq!(keys, ["order:1", "{order:1}:waiters"]);
        assert_eq!(args, ["c:1"]);
    }
}
