//! The scripted lease store: one healing command connection shared by every task of the
//! client, and one subscribing connection for release announcements. [`RedisNode`] is a
//! single server (or the sentinels' master); on Redis Cluster the same scripts run on a
//! cluster connection, each script's keys in one slot, renewals batched per slot, and
//! releases announced on sharded channels.

use std::sync::Weak;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisError};

use std::collections::BTreeMap;

use futures_util::future::join_all;

use super::connection::{Connection, Opener};
use super::endpoint::Endpoint;
use super::pubsub::{Announcing, Connector, Feed};
use super::scripts::{Lua, ScriptCall, Waiters, query};
use super::{
    Attempt, AttemptAsks, CardFields, CardPost, Holder, KeepKey, Kind, Lease, LeaseStore, Misfit,
    Permits, QueueAsk, QueueCall, ReleaseListener, Scanned, millis,
};
use crate::error::{LockError, Operation};
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
enum Releaser {
    Holder,
    /// Its entry says whether it asked for a fence.
    LeavingWaiter {
        fenced: bool,
    },
}

/// The lease operations as scripts, over connections that `O` opens.
pub(crate) struct Scripted<O: Opener> {
    opener: O,
    conn: Connection<O>,
    /// Waiters queue here and releases hand the lock on; off for a Redlock master, whose
    /// releases announce to every waiter instead.
    queue: bool,
}

/// One Redis server, or the master the sentinels name.
pub(crate) type RedisNode = Scripted<Endpoint>;

impl<O: Opener> std::fmt::Debug for Scripted<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted").finish_non_exhaustive()
    }
}

impl<O: Opener> Scripted<O> {
    /// Opens the command connection; `timeout` bounds connecting and every later command.
    pub(crate) async fn connect(opener: O, timeout: Duration) -> Result<Self, LockError> {
        let store = Self::lazy(opener, timeout);
        store.load_scripts().await?;
        Ok(store)
    }

    /// A store whose connection opens on first use (a Redlock master may be down at start).
    pub(crate) fn lazy(opener: O, timeout: Duration) -> Self {
        let conn = Connection::lazy(opener.clone(), timeout);
        Self {
            opener,
            conn,
            queue: true,
        }
    }

    /// A Redlock master: no queue (each master would hand the lock to its own queue's
    /// head); a release announces itself to every waiter while one has marked the key.
    pub(crate) fn announcing_to_all(mut self) -> Self {
        self.queue = false;
        self
    }

    /// A call of the acquire or release script, with every key either may touch: the key,
    /// then its kind's companions (where waiters stand, the fence record), all in its slot.
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

    /// How this store's waiters wait.
    fn waiters(&self) -> Waiters {
        if self.queue {
            Waiters::Queued
        } else {
            Waiters::Marked
        }
    }

    /// Runs the release script for `releaser`; `fence_record` to declare the lock's fence
    /// record up front.
    async fn release_script(
        &self,
        lease: Lease<'_>,
        releaser: Releaser,
        fence_record: bool,
    ) -> Result<bool, LockError> {
        // The common release (plain announcements, a queue, not leaving, no fence) takes the
        // token alone, and the lock and its queue as keys: each key and argument costs Redis
        // strings to parse and to build for Lua, a key most of all. The fence record is
        // declared when the script asks for it (a fenced waiter is next).
        let script = &lease.kind.scripts().release;
        let announcing = O::announcing(lease.key);
        let common = announcing == Announcing::Plain
            && self.queue
            && releaser == Releaser::Holder
            && lease.kind.short_release()
            && !fence_record;
        let mut release = if common {
            let queue = Companion::waiters(lease.key);
            let mut call = script.start(2, lease.key.len() + queue.len());
            call.arg(lease.key).arg(queue);
            call
        } else {
            Self::keyed(script, lease, self.queue)
        };
        release.arg(lease.token);
        if !common {
            release
                .arg(self.waiters().arg())
                .arg(announcing.release_channel());
        }
        let operation = match releaser {
            Releaser::Holder => Operation::Release,
            Releaser::LeavingWaiter { fenced } => {
                release.arg("1").arg(handoff_lease(lease)).arg(flag(fenced));
                Operation::Withdraw
            }
        };
        let mut outcome: i64 = self
            .invoke(operation, self.conn.timeout(), &release)
            .await?;
        if outcome == NEEDS_FENCE_RECORD {
            // Boxed: a hand-off to a fenced waiter is the rare release.
            outcome = Box::pin(async {
                let mut again = Self::keyed(script, lease, true);
                again.arg(lease.token);
                self.invoke::<i64>(operation, self.conn.timeout(), &again)
                    .await
            })
            .await?;
        }
        Ok(outcome == 1)
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
    pub(crate) fn release_feed(&self, client: &str, listener: Weak<dyn ReleaseListener>) -> Feed<O>
    where
        O: Connector + Clone,
    {
        // With a queue, releases name their waiter on its client's own channel.
        let client = self.queue.then_some(client);
        Feed::new(self.opener.clone(), client, self.conn.timeout(), listener)
    }

    /// Runs a script call within `limit`.
    async fn invoke<T: FromRedisValue>(
        &self,
        operation: Operation,
        limit: Duration,
        call: &ScriptCall,
    ) -> Result<T, LockError> {
        self.conn
            .call(operation, limit, |c| call.run::<O, T>(c))
            .await
    }
}

impl<O: Opener> Scripted<O> {
    /// Without a fence and without waiting, a plain `SET key token NX PX ttl`: the cheapest
    /// atomic acquire there is. A waiter (which needs the holder's remaining lease when busy)
    /// or a fence takes the acquire script instead: still one round trip. Bounded by `limit`.
    pub(crate) async fn acquire_within(
        &self,
        lease: Lease<'_>,
        ask: AttemptAsks,
        timeout: Duration,
    ) -> Result<Attempt, LockError> {
        let queue = ask.queue.filter(|_| self.queue);
        if !ask.fence && !ask.remaining && queue.is_none() && lease.kind.acquires_with_set_nx() {
            let set: Option<String> = self
                .conn
                .call(Operation::Acquire, timeout, |c| async move {
                    let mut set = Cmd::with_capacity(6, 32 + lease.key.len() + lease.token.len());
                    set.arg("SET")
                        .arg(lease.key)
                        .arg(lease.token)
                        .arg("NX")
                        .arg("PX")
                        .arg(millis(lease.ttl));
                    query::<O, _>(c, &set).await
                })
                .await?;
            return Ok(if set.is_some() {
                Attempt::Acquired { fence: None }
            } else {
                Attempt::Busy {
                    remaining: None,
                    queued: false,
                }
            });
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
        let mut acquire = Self::keyed(&lease.kind.scripts().acquire, lease, self.queue);
        acquire
            .arg(lease.token)
            .arg(millis(lease.ttl))
            .arg(flag(ask.fence));
        if let Some(queue) = queue {
            let announcing = O::announcing(lease.key);
            acquire
                .arg(Waiters::Queued.arg())
                .arg(millis(WAITERS_QUEUE_LEASE))
                .arg(handoff_lease(lease))
                .arg(announcing.script_channel())
                .arg(announcing.command())
                .arg(WAITERS_QUEUE_MAX)
                .arg(flag(queue.fair))
                .arg(flag(queue.call == QueueCall::CheckIn));
        } else if ask.remaining && !self.queue {
            acquire
                .arg(Waiters::Marked.arg())
                .arg(millis(WAITERS_MARK_SLACK));
        } else {
            acquire.arg(Waiters::None.arg());
        }
        if let Some(argument) = lease.kind.argument() {
            acquire.arg(argument);
        }
        if lease.kind.is_read_write() {
            acquire.arg(ask.beside(lease.token).unwrap_or_default());
        }
        let reply: Vec<i64> = self.invoke(Operation::Acquire, timeout, &acquire).await?;
        let at = |i: usize| reply.get(i).copied().unwrap_or(0);
        // The script's fences are positive; a negative one cannot come from it.
        let fence = || ask.fence.then(|| u64::try_from(at(1)).unwrap_or(0));
        Ok(match at(0) {
            1 => Attempt::Acquired { fence: fence() },
            2 => Attempt::Handed {
                fence: fence(),
                left: lease_left(at(2)).unwrap_or_default(),
            },
            4 => Attempt::Misfit(Misfit::Permits {
                stored: u32::try_from(at(1)).unwrap_or(0),
            }),
            5 => Attempt::Misfit(Misfit::OtherKind),
            outcome => Attempt::Busy {
                remaining: lease_left(at(1)),
                queued: queue.is_some() && outcome == 0,
            },
        })
    }
}

impl<O: Opener> Scripted<O> {
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
        // As the acquire script writes it (see `scripts/queue.lua`).
        let entry = format!("{} {} {}", lease.token, handoff_lease(lease), flag(fenced));
        let entry = &entry;
        let length: u64 = self
            .conn
            .call(Operation::Acquire, timeout, |mut c| async move {
                let mut pipe = redis::pipe();
                pipe.cmd("RPUSHX").arg(queue).arg(entry);
                if refresh {
                    pipe.cmd("PEXPIRE")
                        .arg(queue)
                        .arg(millis(WAITERS_QUEUE_LEASE))
                        .ignore();
                }
                let (length,): (u64,) = pipe.query_async(&mut c).await?;
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
        Ok((length > 0).then_some(Attempt::Busy {
            remaining: None,
            queued: length <= u64::from(WAITERS_QUEUE_MAX),
        }))
    }
}

/// The release script's answer when the next waiter wants a fence and the call did not
/// declare the fence record: nothing was done, and the call comes again with it.
const NEEDS_FENCE_RECORD: i64 = -1;

/// A script flag.
fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// The lease a release gives the queued waiter of `lease` (see [`HANDOFF_LEASE`]), in ms.
fn handoff_lease(lease: Lease<'_>) -> u64 {
    millis(lease.ttl.min(HANDOFF_LEASE))
}

impl<O: Opener> LeaseStore for Scripted<O> {
    fn queues_in_redis(&self) -> bool {
        self.queue
    }

    /// How many times the server behind the connections changed (a Sentinel failover).
    fn master_switches(&self) -> u64 {
        self.opener.master_switches()
    }

    async fn acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Result<Attempt, LockError> {
        self.acquire_within(lease, ask, self.conn.timeout()).await
    }

    async fn release(&self, lease: Lease<'_>, fenced: bool) -> Result<bool, LockError> {
        self.release_script(lease, Releaser::Holder, fenced).await
    }

    async fn withdraw(&self, lease: Lease<'_>, fenced: bool) -> Result<bool, LockError> {
        let releaser = if self.queue {
            Releaser::LeavingWaiter { fenced }
        } else {
            Releaser::Holder
        };
        self.release_script(lease, releaser, true).await
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
            let group = (lease.kind, O::renewal_group(lease.key));
            groups.entry(group).or_default().push(i);
        }
        let calls = groups.values().map(|indexes| async move {
            let leases: Vec<Lease<'_>> = indexes.iter().map(|&i| batch[i]).collect();
            let renewed = self
                .conn
                .call(Operation::Renew, limit, |c| renew_group::<O>(c, leases))
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
                O::wait_replicas(c, lease.key, replicas, wait_ms)
            })
            .await
    }

    async fn inspect(&self, kind: Kind, key: &str) -> Result<Holder, LockError> {
        let queue = Companion::waiters(key);
        let call = if self.queue {
            let mut call = kind.scripts().inspect.start(2, key.len() + queue.len());
            call.arg(key).arg(queue);
            call
        } else {
            kind.scripts().inspect.call(&[key])
        };
        let (token, pttl, queued, count, owners): (Option<String>, i64, i64, i64, Vec<String>) =
            self.invoke(Operation::Inspect, self.conn.timeout(), &call)
                .await?;
        let permits = match kind {
            Kind::Lock => None,
            Kind::Permit { .. } | Kind::Read | Kind::Write => Some(Permits {
                count: u32::try_from(count).unwrap_or(0),
                owners,
            }),
        };
        Ok(Holder {
            // (A read-write lock held by readers alone has no writer's token, and a lease.)
            remaining: (token.is_some() || kind.is_read_write())
                .then(|| lease_left(pttl))
                .flatten(),
            token,
            queued: u32::try_from(queued).ok(),
            permits,
        })
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
            .call(Operation::Inspect, timeout, |c| O::scan_nodes(c))
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
                    .call(Operation::Inspect, timeout, |c| O::scan_page(c, node, cmd))
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

    async fn read_card(&self, key: &str, fields: &[&str]) -> Result<CardFields, LockError> {
        let mut read = redis::cmd("HMGET");
        read.arg(key).arg(fields);
        let values: Vec<Option<String>> = self
            .conn
            .call(Operation::Inspect, self.conn.timeout(), |c| {
                query::<O, Vec<Option<String>>>(c, &read)
            })
            .await?;
        Ok(CardFields { values })
    }

    async fn extend(&self, lease: Lease<'_>) -> Result<bool, LockError> {
        let mut extend = lease.kind.scripts().extend.call(&[lease.key]);
        extend.arg(lease.token).arg(millis(lease.ttl));
        let extended: i64 = self
            .invoke(Operation::Extend, self.conn.timeout(), &extend)
            .await?;
        Ok(extended == 1)
    }
}

/// One renew script call for leases of one kind that share a slot; a verdict per lease, `None`
/// when its call got no answer.
///
/// While a cluster slot is half-migrated, a call whose keys are split between the two nodes
/// gets `TRYAGAIN` for as long as the migration lasts. Each key then goes in a call of its own,
/// which the cluster client follows to whichever node has the key (`ASK`).
async fn renew_group<O: Opener>(
    conn: O::Conn,
    leases: Vec<Lease<'_>>,
) -> Result<Vec<Option<bool>>, RedisError> {
    let call = |leases: &[Lease<'_>]| {
        let keys: Vec<&str> = leases.iter().map(|lease| lease.key).collect();
        let kind = leases.first().map_or(Kind::Lock, |lease| lease.kind);
        let mut call = kind.scripts().renew.call(&keys);
        for lease in leases {
            call.arg(lease.token).arg(millis(lease.ttl));
        }
        call
    };
    match call(&leases).run::<O, Vec<i64>>(conn.clone()).await {
        Ok(renewed) => Ok(renewed.into_iter().map(|r| Some(r == 1)).collect()),
        Err(e) if leases.len() > 1 && O::splits_batch(&e) => {
            let singles = leases.iter().map(|lease| {
                let (conn, single) = (conn.clone(), call(std::slice::from_ref(lease)));
                async move {
                    let renewed = single.run::<O, Vec<i64>>(conn).await;
                    renewed.ok().and_then(|r| r.first().map(|&r| r == 1))
                }
            });
            Ok(join_all(singles).await)
        }
        Err(e) => Err(e),
    }
}

/// The holder's remaining lease from a `PTTL` reply. It is -1 for a key without expiry (set
/// by someone else) and -2 when the key just vanished; neither tells how long to wait.
fn lease_left(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}
