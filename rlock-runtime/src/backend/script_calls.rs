//! The lease scripts' calls on one server, built by the scripted store's own code and handed
//! out unsent, with the readers of their replies. Not for users: the model's conformance test
//! (`model/tests/conformance.rs`) replays the model's paths through the real scripts with
//! them, so that the model, the scripts and the store's calling convention cannot drift. It
//! reaches them through the hidden support module.

use std::time::Duration;

use redis::{Cmd, Pipeline};

use super::protocol::{AcquireMode, entry};
use super::scripted::{
    Releaser, acquire_call, append_pipe, bare_release_call, handoff_lease, queue_args,
    recount_call, recounted, release_again_call, release_call, renew_call,
};
use super::scripts::ScriptCall;
use super::topology::{Announcing, RELEASE_CHANNEL_PREFIX};
use super::{CountChange, Kind, Lease, Recounted};
use crate::key::Companion;

pub use super::protocol::{AcquireReply, Found, released};

/// The calls of one kind's scripts on one key, as a client of one server sends them (plain
/// announcements, waiters queued in Redis), each an `EVAL` carrying the script's source.
#[derive(Debug, Clone)]
pub struct ScriptCalls {
    kind: Kind,
    key: String,
    ttl: Duration,
    /// Calls go as `EVALSHA`, as the store sends them (see [`by_hash`](Self::by_hash)).
    by_hash: bool,
}

impl ScriptCalls {
    /// A lock's calls on `key`, for leases of `ttl`.
    pub fn lock(key: &str, ttl: Duration) -> Self {
        Self::of(Kind::Lock, key, ttl)
    }

    /// A permit's calls on the semaphore of `permits` at `key`.
    pub fn permit(key: &str, permits: u32, ttl: Duration) -> Self {
        Self::of(Kind::Permit { permits, take: 1 }, key, ttl)
    }

    /// A reader's calls on the read-write lock at `key`.
    pub fn reader(key: &str, ttl: Duration) -> Self {
        Self::of(Kind::Read, key, ttl)
    }

    /// The upgradeable reader's calls on the read-write lock at `key`.
    pub fn upgradeable_reader(key: &str, ttl: Duration) -> Self {
        Self::of(Kind::UpgradeableRead, key, ttl)
    }

    /// The writer's calls on the read-write lock at `key` (an upgrade's too: its token names
    /// the upgradeable reader it upgrades).
    pub fn writer(key: &str, ttl: Duration) -> Self {
        Self::of(Kind::Write, key, ttl)
    }

    fn of(kind: Kind, key: &str, ttl: Duration) -> Self {
        Self {
            kind,
            key: key.to_owned(),
            ttl,
            by_hash: false,
        }
    }

    /// The same calls as `EVALSHA`, as the store sends them (the benchmark's rows of scripts
    /// by hand): load the scripts first with [`loads`](Self::loads).
    pub fn by_hash(mut self) -> Self {
        self.by_hash = true;
        self
    }

    /// `SCRIPT LOAD` of the acquire and release scripts of this kind.
    pub fn loads(&self) -> [Cmd; 2] {
        let lease = self.lease("");
        let mode = AcquireMode::Once;
        [
            acquire_call(lease, true, false, None, mode).load(),
            release_call(lease, Releaser::Holder, false, true, &Announcing::Plain).load(),
        ]
    }

    fn send(&self, call: &ScriptCall) -> Cmd {
        if self.by_hash {
            call.evalsha()
        } else {
            call.eval()
        }
    }

    /// An acquire that does not wait: one attempt, as the store sends a fenced lock's or any
    /// other kind's when no wait is asked.
    pub fn acquire_once(&self, token: &str, fenced: bool) -> Cmd {
        let call = acquire_call(self.lease(token), true, fenced, None, AcquireMode::Once);
        self.send(&call)
    }

    fn lease<'a>(&'a self, token: &'a str) -> Lease<'a> {
        Lease {
            kind: self.kind,
            key: &self.key,
            token,
            ttl: self.ttl,
        }
    }

    /// A waiting caller's acquire (the queue's mode): its arrival, or (`check_in`) a later
    /// call of a caller that believes it is queued; `fair` never passes a live waiter queued
    /// earlier. A reader asks to read beside no write token of its own.
    pub fn acquire(&self, token: &str, fenced: bool, fair: bool, check_in: bool) -> Cmd {
        let lease = self.lease(token);
        let announcing = Announcing::Plain;
        let mode = AcquireMode::Queue(queue_args(lease, &announcing, fair, check_in));
        self.send(&acquire_call(lease, true, fenced, None, mode))
    }

    /// The holder's release, as first sent (a fenced holder's declares the fence record).
    pub fn release(&self, token: &str, fenced: bool) -> Cmd {
        let lease = self.lease(token);
        self.send(&release_call(
            lease,
            Releaser::Holder,
            fenced,
            true,
            &Announcing::Plain,
        ))
    }

    /// A holder's bare release, as the store sends a lock's when its lease was taken without
    /// waiting: the token alone; it answers [`released::AGAIN_IN_FULL`] when it finds a queue.
    pub fn release_bare(&self, token: &str) -> Cmd {
        self.send(&bare_release_call(self.lease(token)))
    }

    /// A waiter's withdrawal from the queue (it gives up), whose entry is `fenced` or not.
    pub fn withdraw(&self, token: &str, fenced: bool) -> Cmd {
        let lease = self.lease(token);
        let leaving = Releaser::LeavingWaiter { fenced };
        self.send(&release_call(
            lease,
            leaving,
            true,
            true,
            &Announcing::Plain,
        ))
    }

    /// A release sent again after it answered [`released::AGAIN_IN_FULL`].
    pub fn release_again(&self, token: &str) -> Cmd {
        self.send(&release_again_call(self.lease(token), &Announcing::Plain))
    }

    /// The renewal of one lease (a batch of one).
    pub fn renew(&self, token: &str) -> Cmd {
        self.send(&renew_call(&[self.lease(token)]))
    }

    /// A waiter's plain join of the queue (`RPUSHX`, the queue's expiry renewed), as a lock
    /// waiter of a client that already waits for the key joins.
    pub fn append(&self, token: &str, fenced: bool) -> Pipeline {
        append_pipe(
            Companion::waiters(&self.key),
            &self.entry(token, fenced),
            true,
        )
    }

    /// The queue entry of a waiter of this kind.
    pub fn entry(&self, token: &str, fenced: bool) -> String {
        entry(token, handoff_lease(self.lease(token)), fenced, self.kind)
    }

    /// The queue entry of a permit waiter of this semaphore under the count `permits` (the
    /// count set at run time, which its entry carries instead of the one its caller names).
    pub fn entry_under(&self, token: &str, fenced: bool, permits: u32) -> String {
        let kind = match self.kind {
            Kind::Permit { take, .. } => Kind::Permit { permits, take },
            other => other,
        };
        entry(token, handoff_lease(self.lease(token)), fenced, kind)
    }

    /// The resize script's call setting this semaphore's count to `permits` at run time
    /// (`None`: clearing it), as `set_permits` and `clear_permits` send it.
    pub fn set_permits(&self, permits: Option<u32>) -> Cmd {
        let change = permits.map_or(CountChange::Clear, CountChange::Set);
        self.send(&recount_call(&self.key, change, &Announcing::Plain))
    }

    /// A resize's reply: the count after it, `None` when it refused (another kind's key,
    /// nothing to add to).
    pub fn recounted(reply: &[i64]) -> Option<u32> {
        match recounted(reply) {
            Recounted::Count(permits) => Some(permits),
            Recounted::NoCount | Recounted::Misfit(_) => None,
        }
    }

    /// The semaphore's count record (the count set at run time).
    pub fn count_key(&self) -> String {
        Companion::permits(&self.key).to_string()
    }

    /// The key's queue of waiters.
    pub fn queue_key(&self) -> String {
        Companion::waiters(&self.key).to_string()
    }

    /// The key's fence record.
    pub fn fence_key(&self) -> String {
        Companion::fence(&self.key).to_string()
    }

    /// The channel a release names a waiter of `client` on (the client is its tokens' part
    /// before the first `:`).
    pub fn channel(&self, client: &str) -> String {
        format!("{RELEASE_CHANNEL_PREFIX}{}:{client}", self.key)
    }

    /// An acquire's reply, read as the store reads it.
    pub fn acquired(reply: &[i64]) -> AcquireReply {
        AcquireReply::read(reply)
    }
}
