//! The calling convention of the lease scripts, the Rust half of `scripts/protocol.lua`: what
//! a key holds and how a refusal names it, the scripts' answers, the queue's entries, the
//! arguments of an acquire and a release call, in order. The store (`scripted.rs`) builds
//! every call and reads every reply through these; a test holds them to the Lua half's names
//! and values, so the two cannot drift.

use std::time::Duration;

use super::kind::Kind;
use super::scripts::ScriptCall;
use super::{Holder, Permits};
use crate::error::KeyKind;

/// What a key holds, as the scripts find it (`kind_of` in `protocol.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Nothing: the key is free for any kind.
    Free,
    /// A string: a lock (rlock's, or another client's `SET NX PX` lock).
    Lock,
    /// A sorted set marked with a count (`#permits`).
    Semaphore,
    /// A sorted set marked as a read-write lock's (`#rw`).
    ReadWrite,
    /// Data rlock did not write (another type, or a sorted set without a mark).
    Foreign,
}

impl Found {
    /// As the scripts name it (`FREE`, `LOCK`, `SEMAPHORE`, `READ_WRITE`, `FOREIGN`).
    pub(crate) fn from_code(code: i64) -> Self {
        match code {
            FREE => Self::Free,
            LOCK => Self::Lock,
            SEMAPHORE => Self::Semaphore,
            READ_WRITE => Self::ReadWrite,
            FOREIGN => Self::Foreign,
            // Not from these scripts: nothing rlock can take.
            _ => Self::Foreign,
        }
    }

    /// What a user is told the key holds; `None` when it is free.
    pub(crate) fn key_kind(self) -> Option<KeyKind> {
        match self {
            Self::Free => None,
            Self::Lock => Some(KeyKind::Lock),
            Self::Semaphore => Some(KeyKind::Semaphore),
            Self::ReadWrite => Some(KeyKind::ReadWriteLock),
            Self::Foreign => Some(KeyKind::Other),
        }
    }

    /// Whether a lease of `kind` may live here: the key is free or holds that kind.
    pub(crate) fn admits(self, kind: Kind) -> bool {
        self == Self::Free || self.key_kind() == Some(kind.key_kind())
    }
}

/// What a key holds, as the scripts answer it.
pub(crate) const FREE: i64 = 0;
pub(crate) const LOCK: i64 = 1;
pub(crate) const SEMAPHORE: i64 = 2;
pub(crate) const READ_WRITE: i64 = 3;
pub(crate) const FOREIGN: i64 = 4;

/// The member of a semaphore's sorted set that holds its count (scored by minus it). (The
/// scripts alone read the marks; named here for the test that holds both halves alike.)
#[cfg(test)]
pub(crate) const PERMITS_MEMBER: &str = "#permits";
/// The member that marks a read-write lock's sorted set (scored 0).
#[cfg(test)]
pub(crate) const READ_WRITE_MEMBER: &str = "#rw";
/// What names the upgradeable reader of a read-write lock, followed by its token: a member
/// scored 0 beside the mark, and the upgradeable reader's entry in an inspection's owners.
pub(crate) const UPGRADER_MARK: &str = "#up:";

/// An acquire's answers, first in its reply.
pub(crate) mod acquired {
    /// `{0, pttl}`: another holds it; queued if asked.
    pub(crate) const BUSY: i64 = 0;
    /// `{1, fence}`: taken by this call.
    pub(crate) const TAKEN: i64 = 1;
    /// `{2, fence, pttl}`: a release handed it to this waiter before this call.
    pub(crate) const HANDED: i64 = 2;
    /// `{3, pttl}`: busy, and the queue is full: not queued.
    pub(crate) const FULL: i64 = 3;
    /// `{4, stored count}`: the semaphore has another count.
    pub(crate) const OTHER_COUNT: i64 = 4;
    /// `{5, what the key holds}`: another kind's state; nothing was done.
    pub(crate) const OTHER_KIND: i64 = 5;
    /// `{6}`: an upgrade whose upgradeable read is no longer held; nothing was done. (Of a
    /// `lock_all`, `{6, i}`: its `i`th key, which the caller held, no longer holds its token.)
    pub(crate) const NOT_HELD: i64 = 6;
    /// A busy answer's pttl when it tells no lease: a waiter behind others, whose client's
    /// next waiter may join the queue with a plain `RPUSHX`. (Told apart from a lease by its
    /// sign alone; named for the test that holds both halves alike.)
    #[cfg(test)]
    pub(crate) const NOT_TOLD: i64 = -3;
    /// A busy answer's pttl for a semaphore's waiter behind others under a count set at run
    /// time: a plain join's entry would carry its caller's count, which no release of that
    /// semaphore serves, so the client's next waiter arrives through the script.
    pub(crate) const RECOUNTED: i64 = -4;
}

/// A release's answers.
pub mod released {
    /// The lease had ended, is another's, or the key holds another kind.
    pub const NOT_OURS: i64 = 0;
    /// Given back, or handed on.
    pub const RELEASED: i64 = 1;
    /// Nothing done: call again in full, with the fence record declared and the hand-off's
    /// arguments given (the waiter next wants a fence, or a bare release found a queue).
    pub const AGAIN_IN_FULL: i64 = -1;
}

/// The most queue entries a script looks at in one call: every loop over a queue stops
/// there. At least the queue's bound ([`WAITERS_QUEUE_MAX`](crate::util::tuning::WAITERS_QUEUE_MAX)).
pub(crate) const MOST_ENTRIES: u32 = 10_100;

/// The most holders an inspection names (a semaphore's holds, a read-write lock's readers):
/// it counts them all.
pub(crate) const MOST_LISTED: usize = 64;

/// The most permits one hold of a semaphore takes at once: each is a member of the set, all
/// written in one command.
pub(crate) const MOST_TAKEN: u32 = rlock_macros::__limit!(MAX_TAKE);
const _: () = assert!(MOST_ENTRIES >= crate::util::tuning::WAITERS_QUEUE_MAX);

impl Kind {
    /// Its letter in queue entries, and in its scripts (`ME`).
    pub(crate) fn letter(self) -> char {
        match self {
            Self::Lock => 'l',
            Self::Permit { .. } => 'p',
            Self::Read => 'r',
            Self::UpgradeableRead => 'u',
            Self::Write => 'w',
        }
    }

    /// What a user is told it is.
    pub(crate) fn key_kind(self) -> KeyKind {
        match self {
            Self::Lock => KeyKind::Lock,
            Self::Permit { .. } => KeyKind::Semaphore,
            Self::Read | Self::UpgradeableRead | Self::Write => KeyKind::ReadWriteLock,
        }
    }
}

/// A waiter's entry in its key's queue, as the scripts write and read it (`entry` in
/// `queue.lua`): `"<token> <handoff lease ms> <0|1 fenced> <kind>"`.
pub(crate) fn entry(token: &str, handoff_ms: u64, fenced: bool, kind: Kind) -> String {
    format!("{token} {handoff_ms} {} {}", flag(fenced), entry_kind(kind))
}

/// A kind as a queue entry names it: its letter, and a permit's count after it (`p3`: a
/// semaphore's release serves only waiters of its own count).
pub(crate) fn entry_kind(kind: Kind) -> String {
    match kind {
        Kind::Permit { permits, .. } => format!("{}{permits}", kind.letter()),
        Kind::Lock | Kind::Read | Kind::UpgradeableRead | Kind::Write => kind.letter().to_string(),
    }
}

/// A script flag.
pub(crate) fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// The names of an acquire call's arguments, in order (`calls/acquire.lua` names `ARGV` so;
/// [`AcquireArgs::write`] writes them so, and a test holds the three alike).
#[cfg(test)]
pub(crate) const ACQUIRE_ARGS: [&str; 12] = [
    "token",
    "lease",
    "fenced",
    "own",
    "mode",
    "mode_lease",
    "handoff",
    "channel",
    "publish",
    "most",
    "fair",
    "queued",
];

/// The names of a release call's arguments, in order (`calls/release.lua`).
#[cfg(test)]
pub(crate) const RELEASE_ARGS: [&str; 8] = [
    "token",
    "channel",
    "publish",
    "mode",
    "leaving",
    "handoff",
    "entry_fenced",
    "entry_kind",
];

/// An acquire call's arguments after the first five ([`ACQUIRE_ARGS`]), by how the caller
/// waits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AcquireMode<'a> {
    /// It will not wait: `'0'`.
    Once,
    /// Redlock: it marks the key awaited for this many ms past the holder's lease: `'m'`.
    Mark { slack_ms: u64 },
    /// In the queue: `'q'` and the queue's arguments.
    Queue(QueueArgs<'a>),
}

/// The queue's arguments of an acquire call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueArgs<'a> {
    pub(crate) queue_lease_ms: u64,
    pub(crate) handoff_ms: u64,
    pub(crate) channel: &'a str,
    pub(crate) publish: &'static str,
    pub(crate) most: u32,
    pub(crate) fair: bool,
    pub(crate) queued: bool,
}

/// An acquire call's arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireArgs<'a> {
    pub(crate) token: &'a str,
    pub(crate) lease_ms: u64,
    pub(crate) fenced: bool,
    /// The kind's own argument: a semaphore's count, a reader's beside token, or empty.
    pub(crate) own: &'a str,
    pub(crate) mode: AcquireMode<'a>,
}

impl AcquireArgs<'_> {
    /// Writes them into `call`, in [`ACQUIRE_ARGS`]' order.
    pub(super) fn write(&self, call: &mut ScriptCall) {
        call.arg(self.token)
            .arg(self.lease_ms)
            .arg(flag(self.fenced))
            .arg(self.own);
        match self.mode {
            AcquireMode::Once => {
                call.arg("0");
            }
            AcquireMode::Mark { slack_ms } => {
                call.arg("m").arg(slack_ms);
            }
            AcquireMode::Queue(q) => {
                call.arg("q")
                    .arg(q.queue_lease_ms)
                    .arg(q.handoff_ms)
                    .arg(q.channel)
                    .arg(q.publish)
                    .arg(q.most)
                    .arg(flag(q.fair))
                    .arg(flag(q.queued));
            }
        }
    }
}

/// An acquire's reply, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireReply {
    /// `TAKEN`: taken by this call.
    Taken {
        /// Its fence, 0 when none was asked.
        fence: i64,
    },
    /// `HANDED`: a release handed it to this waiter before this call.
    Handed {
        /// The fence the release issued, 0 when none was asked.
        fence: i64,
        /// What is left of the lease, in ms.
        pttl: i64,
    },
    /// `BUSY` or `FULL`: another holds it.
    Busy {
        /// The holder's lease left in ms, when told (negative when not).
        pttl: i64,
        /// Queued as asked (`BUSY`), or not (`FULL`).
        queued: bool,
    },
    /// `OTHER_COUNT`: the semaphore has another count.
    OtherCount {
        /// The count it has.
        stored: i64,
    },
    /// `OTHER_KIND`: the key holds another kind; nothing was done.
    OtherKind(Found),
    /// `NOT_HELD`: the upgradeable read an upgrade builds on is no longer held.
    NotHeld,
}

impl AcquireReply {
    /// Reads `reply` (missing values read as 0).
    pub(crate) fn read(reply: &[i64]) -> Self {
        let at = |i: usize| reply.get(i).copied().unwrap_or(0);
        match at(0) {
            acquired::TAKEN => Self::Taken { fence: at(1) },
            acquired::HANDED => Self::Handed {
                fence: at(1),
                pttl: at(2),
            },
            acquired::OTHER_COUNT => Self::OtherCount { stored: at(1) },
            acquired::OTHER_KIND => Self::OtherKind(Found::from_code(at(1))),
            acquired::NOT_HELD => Self::NotHeld,
            acquired::FULL => Self::Busy {
                pttl: at(1),
                queued: false,
            },
            // BUSY, and anything these scripts do not answer: not taken.
            code => Self::Busy {
                pttl: at(1),
                queued: code == acquired::BUSY,
            },
        }
    }
}

/// A `lock_all` script's reply, read (`lock/acquire_all.lua`; its indexes count from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllReply {
    Taken,
    Busy {
        index: usize,
    },
    /// The key at `index`, which the caller held, no longer holds its token.
    NotHeld {
        index: usize,
    },
    OtherKind {
        index: usize,
        found: Found,
    },
}

impl AllReply {
    /// Reads `reply` (missing values read as 0); indexes count from 0 here.
    pub(crate) fn read(reply: &[i64]) -> Self {
        let at = |i: usize| reply.get(i).copied().unwrap_or(0);
        let index = usize::try_from(at(1) - 1).unwrap_or(0);
        match at(0) {
            acquired::TAKEN => Self::Taken,
            acquired::NOT_HELD => Self::NotHeld { index },
            acquired::OTHER_KIND => Self::OtherKind {
                index,
                found: Found::from_code(at(2)),
            },
            _ => Self::Busy { index },
        }
    }
}

/// An inspect script's reply (`scripts/<kind>/inspect.lua`): the code of what the key holds,
/// the holder's token (a lock's, a semaphore's first permit's, the writer's), the lease left
/// in ms (-1 none, -2 gone), the waiters queued, the count (a semaphore's; a read-write lock's
/// readers), the owners of the set's first [`MOST_LISTED`] leases, and a semaphore's permits
/// in use.
pub(crate) type InspectReply = (i64, Option<String>, i64, i64, i64, Vec<String>, i64);

/// Who holds a key inspected as `kind`, from its inspect script's `reply`. Another kind's
/// state is named and not read.
pub(crate) fn inspected(kind: Kind, reply: InspectReply) -> Holder {
    let (found, token, pttl, queued, count, owners, in_use) = reply;
    let found = Found::from_code(found);
    if !found.admits(kind) {
        return Holder {
            found: found.key_kind(),
            ..Holder::default()
        };
    }
    let permits = match kind {
        Kind::Lock => None,
        Kind::Permit { .. } | Kind::Read | Kind::UpgradeableRead | Kind::Write => {
            let mut upgrader = None;
            let owners = (owners.into_iter())
                .map(|owner| match owner.strip_prefix(UPGRADER_MARK) {
                    Some(token) => {
                        upgrader = Some(token.to_owned());
                        token.to_owned()
                    }
                    None => owner,
                })
                .collect();
            Some(Permits {
                count: u32::try_from(count).unwrap_or(0),
                in_use: u32::try_from(in_use).unwrap_or(0),
                owners,
                upgrader,
            })
        }
    };
    Holder {
        found: found.key_kind(),
        // (A read-write lock held by readers alone has no writer's token, and a lease.)
        remaining: (token.is_some() || kind.is_read_write())
            .then(|| lease_left(pttl))
            .flatten(),
        token,
        queued: u32::try_from(queued).ok(),
        permits,
    }
}

/// The holder's remaining lease from a `PTTL` reply. It is -1 for a key without expiry (set
/// by someone else) and -2 when the key just vanished; neither tells how long to wait.
pub(crate) fn lease_left(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn an_inspection_reads_its_own_kind_and_names_another() {
        let lock = inspected(
            Kind::Lock,
            (LOCK, Some("c:1".into()), 1500, 2, 0, vec![], 0),
        );
        assert_eq!(lock.found, Some(KeyKind::Lock));
        assert_eq!(lock.token.as_deref(), Some("c:1"));
        assert_eq!(lock.remaining, Some(Duration::from_millis(1500)));
        assert_eq!(lock.queued, Some(2));
        assert_eq!(lock.permits, None);
        let free = inspected(Kind::Lock, (FREE, None, -2, 0, 0, vec![], 0));
        assert_eq!((free.found, free.token, free.remaining), (None, None, None));
        let readers = inspected(
            Kind::Read,
            (
                READ_WRITE,
                None,
                900,
                0,
                2,
                vec!["#up:a:1".into(), "b:2".into()],
                0,
            ),
        );
        assert_eq!(readers.remaining, Some(Duration::from_millis(900)));
        let readers = readers.permits.unwrap();
        assert_eq!(readers.owners, ["a:1", "b:2"]);
        assert_eq!(readers.upgrader.as_deref(), Some("a:1"));
        let other = inspected(
            Kind::Permit {
                permits: 2,
                take: 1,
            },
            (LOCK, Some("c:1".into()), 1500, 0, 0, vec![], 0),
        );
        assert_eq!(other.found, Some(KeyKind::Lock));
        assert_eq!(
            (other.token, other.permits),
            (None, None),
            "another kind is not read"
        );
        assert_eq!(lease_left(-1), None, "a key without expiry tells no wait");
    }

    pub(super) const PROTOCOL: &str = include_str!("../../scripts/protocol.lua");

    /// Names and the values given them.
    pub(super) type Named = HashMap<String, String>;

    /// The values `local A, B = 1, 'x'` statements of `source` give their names (whole-line
    /// statements only, possibly continued on the next line).
    pub(super) fn locals(source: &str) -> Named {
        let mut named = HashMap::new();
        let mut lines = source.lines().peekable();
        while let Some(line) = lines.next() {
            let Some(rest) = line.strip_prefix("local ") else {
                continue;
            };
            let Some((names, values)) = rest.split_once(" = ") else {
                continue;
            };
            if names.contains('(') {
                continue;
            }
            let mut values = values.to_owned();
            if values.trim_end().ends_with(',') {
                values.push_str(lines.next().unwrap_or_default());
            }
            let values: Vec<&str> = values.split(',').map(str::trim).collect();
            for (name, value) in names.split(',').map(str::trim).zip(values) {
                named.insert(name.to_owned(), value.trim_matches('\'').to_owned());
            }
        }
        named
    }

    #[test]
    fn the_lua_half_names_the_same_values() {
        let lua = locals(PROTOCOL);
        let number = |name: &str| -> i64 {
            lua.get(name)
                .unwrap_or_else(|| panic!("protocol.lua names no {name}"))
                .parse()
                .unwrap_or_else(|_| panic!("{name} is no number"))
        };
        for (name, value) in [
            ("FREE", FREE),
            ("LOCK", LOCK),
            ("SEMAPHORE", SEMAPHORE),
            ("READ_WRITE", READ_WRITE),
            ("FOREIGN", FOREIGN),
            ("BUSY", acquired::BUSY),
            ("TAKEN", acquired::TAKEN),
            ("HANDED", acquired::HANDED),
            ("FULL", acquired::FULL),
            ("OTHER_COUNT", acquired::OTHER_COUNT),
            ("OTHER_KIND", acquired::OTHER_KIND),
            ("NOT_HELD", acquired::NOT_HELD),
            ("NOT_TOLD", acquired::NOT_TOLD),
            ("RECOUNTED", acquired::RECOUNTED),
            ("NOT_OURS", released::NOT_OURS),
            ("RELEASED", released::RELEASED),
            ("AGAIN_IN_FULL", released::AGAIN_IN_FULL),
            ("MOST_ENTRIES", i64::from(MOST_ENTRIES)),
            ("MOST_TAKEN", i64::from(MOST_TAKEN)),
            ("MOST_LISTED", MOST_LISTED as i64),
        ] {
            assert_eq!(number(name), value, "{name}");
        }
        assert_eq!(lua["PERMITS_MEMBER"], PERMITS_MEMBER);
        assert_eq!(lua["READ_WRITE_MEMBER"], READ_WRITE_MEMBER);
        assert_eq!(lua["UPGRADER_MARK"], UPGRADER_MARK);
    }

    /// `calls/*.lua` name `ARGV[1..]` in the order the store writes them.
    #[test]
    fn the_calls_name_their_arguments_in_the_stores_order() {
        for (source, names) in [
            (
                include_str!("../../scripts/calls/acquire.lua"),
                &ACQUIRE_ARGS[..],
            ),
            (
                include_str!("../../scripts/calls/release.lua"),
                &RELEASE_ARGS[..],
            ),
        ] {
            let lua = locals(source);
            for (i, name) in names.iter().enumerate() {
                let value = lua
                    .get(*name)
                    .unwrap_or_else(|| panic!("{name} is not named"));
                assert!(
                    value.starts_with(&format!("ARGV[{}]", i + 1))
                        || value.starts_with(&format!("tonumber(ARGV[{}])", i + 1)),
                    "{name} is {value}, not argument {}",
                    i + 1
                );
            }
        }
    }

    #[test]
    fn entries_carry_their_kind() {
        assert_eq!(entry("c:7", 2000, true, Kind::Lock), "c:7 2000 1 l");
        assert_eq!(
            entry(
                "c:8",
                500,
                false,
                Kind::Permit {
                    permits: 3,
                    take: 1
                }
            ),
            "c:8 500 0 p3"
        );
        assert_eq!(entry("c:9", 1, false, Kind::Read), "c:9 1 0 r");
        assert_eq!(entry("c:9", 1, true, Kind::Write), "c:9 1 1 w");
    }

    #[test]
    fn replies_are_read_by_their_code() {
        assert_eq!(
            AcquireReply::read(&[1, 42]),
            AcquireReply::Taken { fence: 42 }
        );
        assert_eq!(
            AcquireReply::read(&[2, 0, 900]),
            AcquireReply::Handed {
                fence: 0,
                pttl: 900
            }
        );
        assert_eq!(
            AcquireReply::read(&[0, -3]),
            AcquireReply::Busy {
                pttl: -3,
                queued: true
            }
        );
        assert_eq!(
            AcquireReply::read(&[3, 10]),
            AcquireReply::Busy {
                pttl: 10,
                queued: false
            }
        );
        assert_eq!(
            AcquireReply::read(&[4, 5]),
            AcquireReply::OtherCount { stored: 5 }
        );
        for (code, found) in [
            (1, Found::Lock),
            (2, Found::Semaphore),
            (3, Found::ReadWrite),
            (4, Found::Foreign),
        ] {
            assert_eq!(
                AcquireReply::read(&[5, code]),
                AcquireReply::OtherKind(found)
            );
        }
    }
}

/// No script can run unbounded: a script that cannot finish stops the whole server (every
/// client is answered `BUSY`, and one that has written cannot be killed). Every script file
/// is read here: no `while`, `repeat` or `goto`; every `for` either walks a table
/// (`ipairs`/`pairs`, or up to its length `#t`, both fixed when the loop starts) or counts to
/// a literal or to a constant `protocol.lua` names with a literal; no function calls itself.
#[cfg(test)]
mod bounds {
    use std::path::{Path, PathBuf};

    /// Every `.lua` file under `dir`.
    fn scripts(dir: &Path, found: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                scripts(&path, found);
            } else if path.extension().is_some_and(|e| e == "lua") {
                found.push(path);
            }
        }
    }

    /// The code of `source`, comments cut.
    fn code(source: &str) -> Vec<&str> {
        source
            .lines()
            .map(|line| line.split("--").next().unwrap_or_default())
            .collect()
    }

    fn words(line: &str) -> impl Iterator<Item = &str> {
        line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
    }

    /// Why the loop `line` (which starts with `for`) may not end, if it may not.
    fn unbounded(line: &str, constants: &super::tests::Named) -> Option<String> {
        let head = line.trim().strip_prefix("for ")?;
        let head = head.strip_suffix(" do").unwrap_or(head);
        if let Some((_, walked)) = head.split_once(" in ") {
            let walks = walked.starts_with("ipairs(") || walked.starts_with("pairs(");
            return (!walks).then(|| format!("walks {walked}, not a table"));
        }
        let Some((_, range)) = head.split_once(" = ") else {
            return Some("neither counts nor walks".to_owned());
        };
        let limit = range.split(',').nth(1).map(str::trim).unwrap_or_default();
        let literal = limit.parse::<u64>().is_ok();
        let length = limit.starts_with('#') && words(limit).count() == 1;
        let constant = constants
            .get(limit)
            .is_some_and(|value| value.parse::<u64>().is_ok());
        (!(literal || length || constant)).then(|| format!("counts to {limit}"))
    }

    #[test]
    fn every_loop_in_every_script_has_a_constant_bound() {
        let constants = super::tests::locals(super::tests::PROTOCOL);
        let mut files = Vec::new();
        scripts(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts"),
            &mut files,
        );
        assert!(files.len() >= 15, "{files:?}");
        let mut loops = 0;
        for file in &files {
            let source = std::fs::read_to_string(file).unwrap_or_default();
            let lines = code(&source);
            for (n, line) in lines.iter().enumerate() {
                for word in words(line) {
                    assert!(
                        !matches!(word, "while" | "repeat" | "goto"),
                        "{file:?}:{}: `{word}` loops without a bound",
                        n + 1
                    );
                }
                if line.trim_start().starts_with("for ") {
                    loops += 1;
                    if let Some(why) = unbounded(line, &constants) {
                        panic!("{file:?}:{}: a loop that {why}", n + 1);
                    }
                }
                // A function's body runs to the first line that is `end` at its indent.
                let indent = line.len() - line.trim_start().len();
                if let Some(name) = line
                    .trim_start()
                    .strip_prefix("local function ")
                    .and_then(|rest| rest.split('(').next())
                {
                    let close = format!("{}end", " ".repeat(indent));
                    let body = lines[n + 1..].iter().take_while(|l| l.trim_end() != close);
                    for (i, body_line) in body.enumerate() {
                        let calls = body_line.match_indices(&format!("{name}(")).any(|(at, _)| {
                            !body_line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                        });
                        assert!(!calls, "{file:?}:{}: `{name}` calls itself", n + i + 2);
                    }
                }
            }
        }
        assert!(loops >= 9, "{loops} loops found");
    }

    /// The check finds what it looks for.
    #[test]
    fn the_check_refuses_unbounded_loops() {
        let constants = super::tests::locals(super::tests::PROTOCOL);
        for refused in [
            "for i = 1, tonumber(ARGV[3]) do",
            "for i = 1, permits do",
            "for k, v in next, t do",
        ] {
            assert!(unbounded(refused, &constants).is_some(), "{refused}");
        }
        for bounded in [
            "  for _ = 1, MOST_ENTRIES do",
            "for i = 1, #permits, 2 do",
            "for i, key in ipairs(KEYS) do",
            "for i = 1, 16 do",
        ] {
            assert_eq!(unbounded(bounded, &constants), None, "{bounded}");
        }
    }
}
