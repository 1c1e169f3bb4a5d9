//! What the engine leases. The hold's state machine, the watchdog, the waiting queue and the
//! release feed exist once; a [`Kind`] says what differs between the things they lease:
//!
//! - **its keys**: the stored key and the companions its scripts declare (a queue, a fence
//!   record, Redlock's awaited mark), all in the key's cluster slot;
//! - **its scripts**: acquire (what "busy" means is decided there), release (which also hands
//!   the lease to the queue's first live waiter, and withdraws a waiter that gives up),
//!   renew, extend and inspect, one set per kind under `scripts/<kind>/`;
//! - **its shortcut**: the plain command, if any, that does an uncontended acquire without a
//!   script (the lock's `SET NX PX`);
//! - **its argument**: a parameter of its own, last in its acquire call (a semaphore's
//!   permit count).
//!
//! A kind is a variant, not a trait object or a type parameter: the set is closed and known
//! here, a `match` names every kind that a new one must be taught, and a lease stays one small
//! `Copy` value through the layers above. What a topology cannot offer a kind safely, it
//! refuses through [`LeaseStore::refuses`](super::LeaseStore::refuses), as it refuses
//! features.

use std::sync::LazyLock;

use super::scripts::Lua;
use crate::key::Companion;

/// A kind of lease: what is taken, and the scripts that take, renew and give it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// An exclusive lock: one holder at a time, the key's value its owner token.
    Lock,
    /// `take` permits of a semaphore of `permits`, held together as one lease: at most
    /// `permits` in use at once. The key is a sorted set of the permits in use, scored by
    /// the end of each hold's lease, with the count stored beside them
    /// (`scripts/semaphore/`); a hold of `take` permits is that many members, its owner
    /// token (which ends in `*<take>` when more than one) and `<token>/2` to
    /// `<token>/<take>`.
    Permit { permits: u32, take: u32 },
    /// A reader of a read-write lock: many at once, none beside a writer. The key is a
    /// sorted set of the holders' tokens, each scored by the end of its lease, a reader's
    /// positive and the writer's negative (`scripts/rw/`).
    Read,
    /// The upgradeable reader of a read-write lock: a reader, of whom there is at most one,
    /// with the right to take the write lock beside its read (an upgrade: a writer's lease
    /// under a token naming it) before any other writer. Besides its lease as a reader, the
    /// set names it by a member scored 0 (`UPGRADER_MARK` and its token).
    UpgradeableRead,
    /// The writer of a read-write lock: alone, neither beside readers nor another writer.
    Write,
}

impl Kind {
    /// Its scripts, hashed once.
    pub(crate) fn scripts(self) -> &'static KindScripts {
        match self {
            Self::Lock => &LOCK,
            Self::Permit { .. } => &SEMAPHORE,
            Self::Read => &READ,
            Self::UpgradeableRead => &UPGRADEABLE_READ,
            Self::Write => &WRITE,
        }
    }

    /// Whether it is a read-write lock's (a reader, the upgradeable reader or the writer).
    pub(crate) fn is_read_write(self) -> bool {
        matches!(self, Self::Read | Self::UpgradeableRead | Self::Write)
    }

    /// Whether it reads a read-write lock (a reader or the upgradeable reader).
    pub(crate) fn is_read(self) -> bool {
        matches!(self, Self::Read | Self::UpgradeableRead)
    }

    /// Whether a waiter may join the queue with a plain `RPUSHX` ([`QueueCall::Append`]
    /// (super::QueueCall::Append)), without the acquire script. A lock's or a permit's
    /// entry says all its release needs, and a release drops an entry of another kind or
    /// another count, whose waiter its next check in refuses: it is never granted. A
    /// read-write lock's roles are not: a reader's arrival decides whether it may pass the
    /// queue, and an upgrade's stands at its head.
    pub(crate) fn joins_by_append(self) -> bool {
        match self {
            Self::Lock | Self::Permit { .. } => true,
            Self::Read | Self::UpgradeableRead | Self::Write => false,
        }
    }

    /// Whether its holder's release may leave the fence record undeclared, and be called
    /// again with it when the waiter it admits wants a fence: a lock's admits one waiter and
    /// can stop before changing anything; a read-write lock's may have admitted readers
    /// before it meets a fenced writer, so it always declares the record.
    pub(crate) fn short_release(self) -> bool {
        match self {
            Self::Lock | Self::Permit { .. } => true,
            Self::Read | Self::UpgradeableRead | Self::Write => false,
        }
    }

    /// Whether its holder's release may carry its token alone when it expects nobody behind
    /// the lease (see [`Behind::Nobody`](super::Behind::Nobody)), and be sent again in full
    /// when it finds a queue: a lock's, whose script looks for one before anything else.
    pub(crate) fn releases_bare(self) -> bool {
        match self {
            Self::Lock => true,
            Self::Permit { .. } | Self::Read | Self::UpgradeableRead | Self::Write => false,
        }
    }

    /// Whether an acquire that asks for nothing besides the lease (no fence, no wait, no
    /// queue) is one plain `SET key token NX PX ttl`: for a lock, the cheapest atomic acquire
    /// there is, with no script to run.
    pub(crate) fn acquires_with_set_nx(self) -> bool {
        match self {
            Self::Lock => true,
            Self::Permit { .. } | Self::Read | Self::UpgradeableRead | Self::Write => false,
        }
    }

    /// The companion keys its acquire, release and inspect scripts declare after the key
    /// itself, in this order: where waiters stand (the queue in Redis, or Redlock's awaited
    /// mark), then the fence record, or a semaphore's count record (permits carry no fence).
    pub(crate) fn companions(self, key: &str, queue: bool) -> [Companion<'_>; 2] {
        let waiters = if queue {
            Companion::waiters(key)
        } else {
            Companion::awaited(key)
        };
        match self {
            Self::Permit { .. } => [waiters, Companion::permits(key)],
            Self::Lock | Self::Read | Self::UpgradeableRead | Self::Write => {
                [waiters, Companion::fence(key)]
            }
        }
    }

    /// Its name in messages and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Permit { .. } => "semaphore",
            Self::Read => "read lock",
            Self::UpgradeableRead => "upgradeable read lock",
            Self::Write => "write lock",
        }
    }
}

/// The scripts of one kind (`scripts/<kind>/*.lua`). Every one starts with the line naming
/// its kind (`ME`, the kind's queue letter, and `SERVED`, the letters its releases grant),
/// then `scripts/protocol.lua`, the calling convention, which `protocol.rs` mirrors; the
/// acquire and release scripts then name their call's arguments (`scripts/calls/`) and take
/// the queue's functions (`scripts/queue.lua`): every kind that waits in Redis stands in the
/// same queue and is handed on by the same `hand_off`, which grants only its own kind.
///
/// | script | `KEYS` | `ARGV` | reply |
/// |---|---|---|---|
/// | acquire | key, [`companions`](Kind::companions) | [`ACQUIRE_ARGS`](super::protocol::ACQUIRE_ARGS) | [`AcquireReply`](super::protocol::AcquireReply) |
/// | release | key, queue (the short form), or key and both companions | [`RELEASE_ARGS`](super::protocol::RELEASE_ARGS) | [`released`](super::protocol::released) |
/// | renew | one key per lease | token and ttl ms per lease | 1 or 0 per lease |
/// | extend | key | token, ttl ms | 1 or 0 |
/// | inspect | key, queue where kept | | `{found, token or false, pttl, queued, count, {owners}}` |
pub(crate) struct KindScripts {
    /// Takes the lease if the kind allows it now, or reports busy (and queues the caller):
    /// what "busy" means for the kind is decided here.
    pub(crate) acquire: Lua,
    /// Gives the lease back if still the caller's, handing it to the first live waiter; with
    /// its leaving flag, a waiter's withdrawal (which also hands on a lease handed to it).
    pub(crate) release: Lua,
    /// Renews a batch of leases, each only if still its owner's and never shortening it.
    pub(crate) renew: Lua,
    /// Sets one lease to exactly a new length if still its owner's.
    pub(crate) extend: Lua,
    /// Reads what the key holds, the holder and what is left of its lease.
    pub(crate) inspect: Lua,
}

impl KindScripts {
    /// The ones every hold calls, for loading into a server's script cache up front (the
    /// others are sent whole the first time a server lacks them).
    pub(crate) fn hot(&'static self) -> [&'static Lua; 4] {
        [&self.acquire, &self.release, &self.extend, &self.renew]
    }

    /// All of them.
    #[cfg(test)]
    pub(crate) fn each(&'static self) -> [&'static Lua; 5] {
        [
            &self.acquire,
            &self.release,
            &self.renew,
            &self.extend,
            &self.inspect,
        ]
    }
}

/// Every kind's scripts, each source the kind's line, the protocol, then `$file`s.
macro_rules! kind_scripts {
    (me: $me:literal, served: $served:literal, $($script:ident: [$($file:literal),+]),+ $(,)?) => {
        LazyLock::new(|| KindScripts {
            $($script: Lua::new(concat!(
                "local ME, SERVED = '", $me, "', '", $served, "'\n",
                include_str!("../../scripts/protocol.lua"),
                $(include_str!(concat!("../../scripts/", $file))),+
            ))),+
        })
    };
}

static LOCK: LazyLock<KindScripts> = kind_scripts! {
    me: "l", served: "l",
    acquire: ["calls/acquire.lua", "state.lua", "queue.lua", "lock/acquire.lua"],
    // A lock's release, renewal and extend read its string and nothing else: no state.lua.
    release: [
        "calls/release.lua", "lock/release.lua", "queue.lua", "lock/release_queued.lua"
    ],
    renew: ["lock/renew.lua"],
    extend: ["lock/extend.lua"],
    inspect: ["state.lua", "lock/inspect.lua"],
};

/// Takes several locks of one slot, all or none (`lock_all`).
pub(crate) static LOCK_ALL: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        "local ME, SERVED = 'l', 'l'\n",
        include_str!("../../scripts/protocol.lua"),
        include_str!("../../scripts/state.lua"),
        include_str!("../../scripts/lock/acquire_all.lua")
    ))
});

/// Changes a semaphore's count at run time, keeping its holders (`set_permits`).
pub(crate) static RECOUNT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        "local ME, SERVED = 'p', 'p'\n",
        include_str!("../../scripts/protocol.lua"),
        include_str!("../../scripts/state.lua"),
        include_str!("../../scripts/queue.lua"),
        include_str!("../../scripts/semaphore/permits.lua"),
        include_str!("../../scripts/semaphore/resize.lua")
    ))
});

static SEMAPHORE: LazyLock<KindScripts> = kind_scripts! {
    me: "p", served: "p",
    acquire: [
        "calls/acquire.lua",
        "state.lua",
        "queue.lua",
        "semaphore/permits.lua",
        "semaphore/acquire.lua"
    ],
    release: [
        "calls/release.lua",
        "state.lua",
        "queue.lua",
        "members/expiry.lua",
        "semaphore/permits.lua",
        "semaphore/release.lua"
    ],
    renew: ["state.lua", "members/renew.lua"],
    extend: ["state.lua", "members/expiry.lua", "members/extend.lua"],
    inspect: ["state.lua", "semaphore/inspect.lua"],
};

/// A read-write lock's scripts, for its readers (`me` "r"), its upgradeable reader ("u") or
/// its writer ("w").
macro_rules! read_write_scripts {
    ($me:literal) => {
        kind_scripts! {
            me: $me, served: "rwu",
            acquire: [
                "calls/acquire.lua",
                "state.lua",
                "queue.lua",
                "rw/common.lua",
                "rw/acquire.lua"
            ],
            release: [
                "calls/release.lua",
                "state.lua",
                "queue.lua",
                "members/expiry.lua",
                "rw/common.lua",
                "rw/release.lua"
            ],
            renew: ["state.lua", "members/renew.lua"],
            extend: ["state.lua", "members/expiry.lua", "members/extend.lua"],
            inspect: ["state.lua", "rw/inspect.lua"],
        }
    };
}

static READ: LazyLock<KindScripts> = read_write_scripts!("r");
static UPGRADEABLE_READ: LazyLock<KindScripts> = read_write_scripts!("u");
static WRITE: LazyLock<KindScripts> = read_write_scripts!("w");

#[cfg(test)]
mod tests {
    use super::Kind;

    const KINDS: [Kind; 5] = [
        Kind::Lock,
        Kind::Permit {
            permits: 2,
            take: 1,
        },
        Kind::Read,
        Kind::UpgradeableRead,
        Kind::Write,
    ];

    #[test]
    fn only_a_locks_release_is_bare() {
        for kind in KINDS {
            assert_eq!(kind.releases_bare(), kind == Kind::Lock, "{kind:?}");
        }
    }

    #[test]
    fn every_kind_has_its_own_name_and_scripts() {
        let kinds = KINDS;
        for (i, a) in kinds.iter().enumerate() {
            for b in &kinds[i + 1..] {
                assert_ne!(a.name(), b.name());
                assert!(!std::ptr::eq(a.scripts(), b.scripts()));
            }
        }
        for kind in kinds {
            for lua in kind.scripts().each() {
                let first = lua.source().lines().next().unwrap_or_default();
                assert!(
                    first.starts_with(&format!("local ME, SERVED = '{}', '", kind.letter())),
                    "{kind:?}: {first}"
                );
            }
        }
    }
}
