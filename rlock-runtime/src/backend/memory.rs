//! The in-process backend: the same semantics as Redis (expiry, ownership, fencing, a
//! semaphore's count, a read-write lock's readers and writer) inside one process, for unit
//! tests and single-instance tools. It keeps no queue: waiters try again when a release
//! tells them, so a read-write lock's waiting writer does not hold back new readers here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::protocol::MOST_LISTED;
use super::{
    AllAttempt, Attempt, AttemptAsks, Behind, CardFields, CardPost, CountChange, GroupLease,
    Holder, KeepKey, Kind, Lease, LeaseStore, Misfit, Permits, Recounted, ReleaseListener, Scanned,
    Standing,
};
use crate::error::{KeyKind, LockError};
use crate::util::token::{Token, permits_taken};

#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryBackend {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    locks: Mutex<Locks>,
    /// One counter for every key: strictly increasing per key too, and nothing per key to keep.
    last_fence: AtomicU64,
    /// The waiters of every client on this backend, told of each release.
    listeners: Mutex<Vec<Weak<dyn ReleaseListener>>>,
    /// Holder cards by key (no expiry: a client in process deletes its card when it goes).
    cards: Mutex<HashMap<String, HashMap<String, String>>>,
    /// Shared values (once-only work's results) by key, each with its end.
    #[cfg(any(feature = "once", feature = "idempotency"))]
    values: Mutex<HashMap<String, (Vec<u8>, Instant)>>,
}

/// Shared values kept before a write drops the ones that ended.
#[cfg(any(feature = "once", feature = "idempotency"))]
const VALUES_SWEPT_PAST: usize = 1024;

#[derive(Debug, Default)]
struct Locks {
    /// What each name holds: one kind of thing at a time, as in Redis.
    states: HashMap<String, State>,
    /// Semaphores' counts set at run time, by name (no expiry, as their records in Redis).
    counts: HashMap<String, u32>,
    /// Names after the last sweep of ended states; the next sweep waits until they double.
    swept_at: usize,
}

/// What a name holds: a lock, a semaphore's permits or a read-write lock's holders.
#[derive(Debug)]
enum State {
    Lock(Entry),
    Semaphore(Semaphore),
    ReadWrite(ReadWrite),
}

impl State {
    /// Drops the leases that ended by `now`; whether anything is still held.
    fn live(&mut self, now: Instant) -> bool {
        match self {
            Self::Lock(entry) => entry.expires > now,
            Self::Semaphore(semaphore) => !semaphore.live(now).is_empty(),
            Self::ReadWrite(rw) => !rw.live(now).is_empty(),
        }
    }

    /// What a user is told it is.
    fn key_kind(&self) -> KeyKind {
        match self {
            Self::Lock(_) => KeyKind::Lock,
            Self::Semaphore(_) => KeyKind::Semaphore,
            Self::ReadWrite(_) => KeyKind::ReadWriteLock,
        }
    }
}

impl Locks {
    /// What `key` holds at `now`, if anything is still held there (an ended state is gone).
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut State> {
        let ended = !self.states.get_mut(key)?.live(now);
        if ended {
            self.states.remove(key);
            return None;
        }
        self.states.get_mut(key)
    }

    /// Sets `lease.key` to a lock of `lease.token` from `now`.
    fn lock(&mut self, lease: Lease<'_>, now: Instant) {
        let entry = Entry {
            token: lease.token.to_owned(),
            expires: now + lease.ttl,
        };
        self.states.insert(lease.key.to_owned(), State::Lock(entry));
    }

    /// Drops every ended state once the map has doubled since the last sweep, so that a
    /// long-lived process does not keep every name it ever used.
    fn sweep(&mut self, now: Instant) {
        if self.states.len() > 2 * self.swept_at.max(512) {
            self.states.retain(|_, state| state.live(now));
            self.swept_at = self.states.len();
        }
    }
}

#[derive(Debug)]
struct Entry {
    token: String,
    expires: Instant,
}

/// One semaphore: its count, and when each permit in use ends, by owner token.
#[derive(Debug)]
struct Semaphore {
    count: u32,
    held: HashMap<String, Instant>,
}

impl Semaphore {
    /// The permits still in their lease at `now`; the ended ones are free again.
    fn live(&mut self, now: Instant) -> &mut HashMap<String, Instant> {
        self.held.retain(|_, ends| *ends > now);
        &mut self.held
    }
}

/// One read-write lock: its writer and its readers, each with when its lease ends, and
/// which reader, if any, is the upgradeable one.
#[derive(Debug, Default)]
struct ReadWrite {
    writer: Option<(String, Instant)>,
    readers: HashMap<String, Instant>,
    upgrader: Option<String>,
}

impl ReadWrite {
    /// Drops the leases that ended by `now`.
    fn live(&mut self, now: Instant) -> &mut Self {
        self.readers.retain(|_, ends| *ends > now);
        if self.writer.as_ref().is_some_and(|(_, ends)| *ends <= now) {
            self.writer = None;
        }
        if (self.upgrader.as_ref()).is_some_and(|token| !self.readers.contains_key(token)) {
            self.upgrader = None;
        }
        self
    }

    fn is_empty(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    /// The lease of `token` as `kind`, if it holds one.
    fn lease_of(&mut self, kind: Kind, token: &str) -> Option<&mut Instant> {
        match kind {
            Kind::Write => self
                .writer
                .as_mut()
                .filter(|(writer, _)| writer == token)
                .map(|(_, ends)| ends),
            _ => self.readers.get_mut(token),
        }
    }
}

/// The answer to a request of another kind than `state` holds.
fn misfit(state: &State) -> Attempt {
    Attempt::Misfit(other_kind(state))
}

/// Why a request of another kind than `state` holds cannot be granted.
fn other_kind(state: &State) -> Misfit {
    Misfit::OtherKind {
        found: state.key_kind(),
    }
}

impl MemoryBackend {
    fn locks(&self) -> MutexGuard<'_, Locks> {
        // A panic while holding this lock cannot leave the map half-updated (every update is
        // a single insert or remove), so a poisoned lock is still consistent.
        self.inner
            .locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next_fence(&self, asked: bool) -> Option<u64> {
        asked.then(|| self.inner.last_fence.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn try_acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Attempt {
        let now = Instant::now();
        let mut locks = self.locks();
        locks.sweep(now);
        match lease.kind {
            Kind::Lock => match locks.live(lease.key, now) {
                Some(State::Lock(entry)) => Attempt::Busy {
                    remaining: Some(entry.expires - now),
                    queued: false,
                    standing: Standing::Head,
                },
                Some(other) => misfit(other),
                None => {
                    locks.lock(lease, now);
                    Attempt::Acquired {
                        fence: self.next_fence(ask.fence),
                    }
                }
            },
            Kind::Permit { permits, .. } => {
                // A count set at run time is the count, whatever the caller names.
                let set = locks.counts.get(lease.key).copied();
                let permits = set.unwrap_or(permits);
                match locks.live(lease.key, now) {
                    Some(State::Semaphore(semaphore)) => {
                        if set.is_some() {
                            semaphore.count = permits;
                        }
                        take_permit(semaphore, lease, permits, now)
                    }
                    Some(other) => misfit(other),
                    None => {
                        let mut semaphore = Semaphore {
                            count: permits,
                            held: HashMap::new(),
                        };
                        let taken = take_permit(&mut semaphore, lease, permits, now);
                        locks
                            .states
                            .insert(lease.key.to_owned(), State::Semaphore(semaphore));
                        taken
                    }
                }
            }
            Kind::Read | Kind::UpgradeableRead | Kind::Write => {
                let beside = ask.beside(lease.token);
                let fence = || self.next_fence(ask.fence);
                match locks.live(lease.key, now) {
                    Some(State::ReadWrite(rw)) => take_read_write(rw, lease, beside, now, fence),
                    Some(other) => misfit(other),
                    None => {
                        let mut rw = ReadWrite::default();
                        let taken = take_read_write(&mut rw, lease, beside, now, fence);
                        locks
                            .states
                            .insert(lease.key.to_owned(), State::ReadWrite(rw));
                        taken
                    }
                }
            }
        }
    }

    /// Deletes the lock, or gives back the permit or the read-write lease, if `token` owns
    /// it as `kind`, and tells every client's waiters. Another kind's state is not touched.
    pub(crate) fn release_now(&self, kind: Kind, key: &str, token: &str) -> bool {
        let now = Instant::now();
        let released = {
            let mut locks = self.locks();
            let (released, emptied) = match (kind, locks.live(key, now)) {
                (Kind::Lock, Some(State::Lock(entry))) if entry.token == token => (true, true),
                (Kind::Permit { .. }, Some(State::Semaphore(semaphore))) => {
                    let ours = semaphore.held.remove(token).is_some();
                    (ours, semaphore.held.is_empty())
                }
                (Kind::Read | Kind::UpgradeableRead, Some(State::ReadWrite(rw))) => {
                    if rw.upgrader.as_deref() == Some(token) {
                        rw.upgrader = None;
                    }
                    (rw.readers.remove(token).is_some(), rw.is_empty())
                }
                (Kind::Write, Some(State::ReadWrite(rw)))
                    if rw
                        .writer
                        .as_ref()
                        .is_some_and(|(writer, _)| writer == token) =>
                {
                    rw.writer = None;
                    (true, rw.is_empty())
                }
                _ => (false, false),
            };
            if emptied {
                locks.states.remove(key);
            }
            released
        };
        if released {
            self.announce(key);
        }
        released
    }

    fn listeners(&self) -> MutexGuard<'_, Vec<Weak<dyn ReleaseListener>>> {
        // Pushes and retains only: a poisoned list is intact.
        self.inner
            .listeners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells every client's waiters that `key` may have room: they try again.
    fn announce(&self, key: &str) {
        let listeners = self.listeners().clone();
        for listener in listeners.iter().filter_map(Weak::upgrade) {
            listener.released(key, None);
        }
    }

    /// Tells `listener` of every release from now on.
    pub(crate) fn listen(&self, listener: Weak<dyn ReleaseListener>) {
        let mut listeners = self.listeners();
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(listener);
    }

    /// Sets the lease to `ttl` from now and makes `successor` its owner, if `lease.token`
    /// owns it as `lease.kind` (see [`LeaseStore::succeed`]).
    fn succeed_now(&self, lease: Lease<'_>, successor: &str) -> bool {
        let now = Instant::now();
        let ends = now + lease.ttl;
        let mut locks = self.locks();
        match (lease.kind, locks.live(lease.key, now)) {
            (Kind::Lock, Some(State::Lock(entry))) if entry.token == lease.token => {
                entry.token = successor.to_owned();
                entry.expires = ends;
                true
            }
            (Kind::Permit { .. }, Some(State::Semaphore(semaphore))) => {
                let ours = semaphore.held.remove(lease.token).is_some();
                if ours {
                    semaphore.held.insert(successor.to_owned(), ends);
                }
                ours
            }
            (Kind::Read | Kind::UpgradeableRead, Some(State::ReadWrite(rw))) => {
                let ours = rw.readers.remove(lease.token).is_some();
                if ours {
                    rw.readers.insert(successor.to_owned(), ends);
                    if rw.upgrader.as_deref() == Some(lease.token) {
                        rw.upgrader = Some(successor.to_owned());
                    }
                }
                ours
            }
            (Kind::Write, Some(State::ReadWrite(rw)))
                if rw
                    .writer
                    .as_ref()
                    .is_some_and(|(writer, _)| writer == lease.token) =>
            {
                rw.writer = Some((successor.to_owned(), ends));
                true
            }
            _ => false,
        }
    }

    /// Sets the lease of `key` to `ttl` from now if `token` owns it as `lease.kind`; with
    /// `only_longer`, a lease that already ends later is left as it is (a renewal never
    /// shortens).
    fn set_lease(&self, lease: Lease<'_>, only_longer: bool) -> bool {
        let now = Instant::now();
        let mut locks = self.locks();
        let ends = match (lease.kind, locks.live(lease.key, now)) {
            (Kind::Lock, Some(State::Lock(entry))) if entry.token == lease.token => {
                Some(&mut entry.expires)
            }
            (Kind::Permit { .. }, Some(State::Semaphore(semaphore))) => {
                semaphore.held.get_mut(lease.token)
            }
            (Kind::Read | Kind::UpgradeableRead | Kind::Write, Some(State::ReadWrite(rw))) => {
                rw.lease_of(lease.kind, lease.token)
            }
            _ => None,
        };
        match ends {
            Some(ends) if *ends > now => {
                let expires = now + lease.ttl;
                if !only_longer || expires > *ends {
                    *ends = expires;
                }
                true
            }
            _ => false,
        }
    }
}

/// A permit of `semaphore` (live at `now`) for a request naming `permits`, if one is free.
fn take_permit(semaphore: &mut Semaphore, lease: Lease<'_>, permits: u32, now: Instant) -> Attempt {
    let count = semaphore.count;
    let held = semaphore.live(now);
    if held.is_empty() {
        // The count goes with the last permit, as in Redis.
        semaphore.count = permits;
    } else if count != permits {
        return Attempt::Misfit(Misfit::Permits { stored: count });
    }
    let held = semaphore.live(now);
    let wanted = u64::from(permits_taken(lease.token));
    if wanted > u64::from(permits) && permits > 0 {
        // More than a count set at run time: never granted while it lasts (0 pauses it).
        return Attempt::Misfit(Misfit::Permits { stored: permits });
    }
    if held
        .keys()
        .map(|t| u64::from(permits_taken(t)))
        .sum::<u64>()
        + wanted
        <= u64::from(permits)
    {
        held.insert(lease.token.to_owned(), now + lease.ttl);
        return Attempt::Acquired { fence: None };
    }
    Attempt::Busy {
        remaining: held.values().min().map(|ends| *ends - now),
        queued: false,
        standing: Standing::Head,
    }
}

/// A read-write lock's lease in `rw` (live at `now`), if it can be had now: a reader beside
/// other readers (or beside the write lease it may read beside, `beside`); the upgradeable
/// reader so too, when no other upgradeable reader holds; a writer alone, or an upgrade
/// beside its own upgradeable reader alone.
fn take_read_write(
    rw: &mut ReadWrite,
    lease: Lease<'_>,
    beside: Option<String>,
    now: Instant,
    fence: impl FnOnce() -> Option<u64>,
) -> Attempt {
    let ends = now + lease.ttl;
    let writer_ends = rw.writer.as_ref().map(|(_, ends)| *ends);
    if lease.kind == Kind::Write {
        let upgrading = Token::parse(lease.token)
            .and_then(|token| Some(Token::plain(token.client, token.upgrading?).to_string()));
        if upgrading.is_some() && upgrading != rw.upgrader {
            return Attempt::Misfit(Misfit::NotHeld);
        }
        let alone = match &upgrading {
            Some(upgrader) => {
                rw.writer.is_none() && rw.readers.len() == 1 && rw.readers.contains_key(upgrader)
            }
            None => rw.is_empty(),
        };
        if alone {
            rw.writer = Some((lease.token.to_owned(), ends));
            return Attempt::Acquired { fence: fence() };
        }
        let last = rw.readers.values().copied().chain(writer_ends).max();
        return Attempt::Busy {
            remaining: last.map(|ends| ends - now),
            queued: false,
            standing: Standing::Head,
        };
    }
    let own_writer = rw
        .writer
        .as_ref()
        .is_some_and(|(writer, _)| Some(writer) == beside.as_ref());
    let upgradeable = lease.kind == Kind::UpgradeableRead;
    if (writer_ends.is_none() || own_writer) && !(upgradeable && rw.upgrader.is_some()) {
        rw.readers.insert(lease.token.to_owned(), ends);
        if upgradeable {
            rw.upgrader = Some(lease.token.to_owned());
        }
        return Attempt::Acquired { fence: None };
    }
    Attempt::Busy {
        remaining: writer_ends.map(|ends| ends - now),
        queued: false,
        standing: Standing::Head,
    }
}

impl LeaseStore for MemoryBackend {
    async fn recount(&self, key: &str, change: CountChange) -> Result<Recounted, LockError> {
        let now = Instant::now();
        let recounted = {
            let mut locks = self.locks();
            let stored = match locks.live(key, now) {
                Some(State::Semaphore(semaphore)) => Some(semaphore.count),
                Some(other) => return Ok(Recounted::Misfit(other_kind(other))),
                None => None,
            };
            let current = locks.counts.get(key).copied().or(stored);
            let permits = match change {
                CountChange::Clear => {
                    locks.counts.remove(key);
                    return Ok(Recounted::Count(stored.unwrap_or(0)));
                }
                CountChange::Set(permits) => permits,
                CountChange::Add(delta) => match current {
                    Some(current) => {
                        u32::try_from((i64::from(current) + delta).max(0)).unwrap_or(u32::MAX)
                    }
                    None => return Ok(Recounted::NoCount),
                },
            };
            locks.counts.insert(key.to_owned(), permits);
            if let Some(State::Semaphore(semaphore)) = locks.live(key, now) {
                semaphore.count = permits;
            }
            Recounted::Count(permits)
        };
        // Waiters here try again when told: a raised count may let them in.
        self.announce(key);
        Ok(recounted)
    }

    async fn post_card(&self, post: CardPost<'_>) -> Result<bool, LockError> {
        let mut cards = self
            .inner
            .cards
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let existed = cards.contains_key(post.key);
        let card = cards.entry(post.key.to_owned()).or_default();
        card.extend(post.set.iter().cloned());
        for field in post.delete {
            card.remove(field);
        }
        // As the script does: a card naming no hold goes.
        if card.len() <= 3 {
            cards.remove(post.key);
        }
        Ok(existed)
    }

    /// The plain locks' keys only, for a pattern with at most a trailing `*`: listing in
    /// process is for tests; operators list Redis.
    async fn scan(
        &self,
        pattern: &str,
        _page: u32,
        limit: usize,
        keep: &KeepKey,
    ) -> Result<Scanned, LockError> {
        let prefix = pattern.strip_suffix('*').unwrap_or(pattern);
        if prefix.contains(['*', '?', '[']) {
            return Err(LockError::InvalidConfig(format!(
                "in process, a key pattern may only end in `*`: {pattern:?}"
            )));
        }
        let exact = !pattern.ends_with('*');
        let keys: Vec<String> = self
            .locks()
            .states
            .iter()
            .filter(|(_, state)| matches!(state, State::Lock(_)))
            .map(|(k, _)| k)
            .filter(|k| {
                if exact {
                    *k == prefix
                } else {
                    k.starts_with(prefix)
                }
            })
            .filter(|k| keep(k))
            .cloned()
            .collect();
        Ok(Scanned {
            keys,
            complete: true,
        }
        .finish(limit))
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn read_value(&self, key: &str) -> Result<Option<Vec<u8>>, LockError> {
        let values = self
            .inner
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        Ok(values
            .get(key)
            .filter(|(_, ends)| *ends > now)
            .map(|(value, _)| value.clone()))
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn write_value(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), LockError> {
        let mut values = self
            .inner
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if values.len() >= VALUES_SWEPT_PAST {
            values.retain(|_, (_, ends)| *ends > now);
        }
        // A value is kept at most a year: no absurd ttl overflows the clock.
        let ends = now + ttl.min(Duration::from_secs(365 * 24 * 60 * 60));
        values.insert(key.to_owned(), (value.to_vec(), ends));
        Ok(())
    }

    async fn read_card(&self, key: &str, fields: &[&str]) -> Result<CardFields, LockError> {
        let cards = self
            .inner
            .cards
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let card = cards.get(key);
        Ok(CardFields {
            values: fields
                .iter()
                .map(|f| card.and_then(|c| c.get(*f).cloned()))
                .collect(),
        })
    }

    async fn inspect(&self, kind: Kind, key: &str) -> Result<Holder, LockError> {
        let now = Instant::now();
        let mut locks = self.locks();
        let set = locks.counts.get(key).copied();
        let state = locks.live(key, now);
        let found = state.as_ref().map(|state| state.key_kind());
        let empty = match kind {
            Kind::Lock => Holder::default(),
            Kind::Permit { .. } | Kind::Read | Kind::UpgradeableRead | Kind::Write => Holder {
                permits: Some(Permits::default()),
                ..Holder::default()
            },
        };
        Ok(match (kind, state) {
            (Kind::Lock, Some(State::Lock(entry))) => Holder {
                found,
                token: Some(entry.token.clone()),
                remaining: Some(entry.expires - now),
                queued: None,
                permits: None,
            },
            // A semaphore is told by the permit that ends first, and all of them.
            (Kind::Permit { .. }, Some(State::Semaphore(semaphore))) => {
                let count = set.unwrap_or(semaphore.count);
                let held = semaphore.live(now);
                let mut holds: Vec<(&String, &Instant)> = held.iter().collect();
                holds.sort_by_key(|&(token, ends)| (*ends, token));
                let in_use: u64 = held.keys().map(|t| u64::from(permits_taken(t))).sum();
                Holder {
                    found,
                    token: holds.first().map(|(token, _)| (*token).clone()),
                    remaining: holds.first().map(|(_, ends)| **ends - now),
                    queued: None,
                    permits: Some(Permits {
                        count,
                        in_use: u32::try_from(in_use).unwrap_or(u32::MAX),
                        // The holds of the first MOST_LISTED permits, as the script lists
                        // them.
                        owners: (holds.iter())
                            .scan(0, |listed, (token, _)| {
                                let first = *listed;
                                *listed += permits_taken(token) as usize;
                                (first < MOST_LISTED).then(|| (*token).clone())
                            })
                            .collect(),
                        upgrader: None,
                    }),
                }
            }
            // A read-write lock is told by its writer, and how long until it or the reader
            // that ends last is done.
            (Kind::Read | Kind::UpgradeableRead | Kind::Write, Some(State::ReadWrite(rw))) => {
                let last = rw.readers.values().max().copied();
                let writer = rw.writer.clone();
                Holder {
                    found,
                    remaining: writer
                        .as_ref()
                        .map(|(_, ends)| *ends)
                        .or(last)
                        .map(|e| e - now),
                    token: writer.map(|(token, _)| token),
                    queued: None,
                    permits: Some(Permits {
                        count: u32::try_from(rw.readers.len()).unwrap_or(u32::MAX),
                        in_use: 0,
                        // The upgradeable reader first, as the script lists them.
                        owners: (rw.upgrader.iter())
                            .chain(
                                rw.readers
                                    .keys()
                                    .filter(|t| Some(*t) != rw.upgrader.as_ref()),
                            )
                            .take(MOST_LISTED)
                            .cloned()
                            .collect(),
                        upgrader: rw.upgrader.clone(),
                    }),
                }
            }
            // A free semaphore's count set at run time, read as Redis's script reads it.
            (Kind::Permit { .. }, None) if set.is_some() => Holder {
                found: Some(KeyKind::Semaphore),
                permits: Some(Permits {
                    count: set.unwrap_or(0),
                    ..Permits::default()
                }),
                ..Holder::default()
            },
            // Free, or another kind's: not read.
            _ => Holder { found, ..empty },
        })
    }

    fn taken_together(&self, _redis_key: &str) -> Option<u16> {
        Some(0)
    }

    async fn acquire_all(&self, leases: &[GroupLease<'_>]) -> Result<AllAttempt, LockError> {
        let now = Instant::now();
        let mut locks = self.locks();
        for (index, group) in leases.iter().enumerate() {
            let lease = group.lease;
            match locks.live(lease.key, now) {
                // A held key is the caller's only while it holds its token still.
                Some(State::Lock(entry)) if group.held && entry.token == lease.token => {}
                None | Some(State::Lock(_)) if group.held => {
                    return Ok(AllAttempt::NotHeld { index });
                }
                Some(State::Lock(_)) => return Ok(AllAttempt::Busy { index }),
                None => {}
                Some(other) => {
                    return Ok(AllAttempt::Misfit {
                        index,
                        misfit: other_kind(other),
                    });
                }
            }
        }
        for group in leases {
            locks.lock(group.lease, now);
        }
        Ok(AllAttempt::Taken)
    }

    async fn acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Result<Attempt, LockError> {
        Ok(self.try_acquire(lease, ask))
    }

    async fn release(&self, lease: Lease<'_>, _behind: Behind) -> Result<bool, LockError> {
        Ok(self.release_now(lease.kind, lease.key, lease.token))
    }

    async fn withdraw(&self, lease: Lease<'_>, _fenced: bool) -> Result<bool, LockError> {
        Ok(self.release_now(lease.kind, lease.key, lease.token))
    }

    async fn renew(
        &self,
        batch: &[Lease<'_>],
        _limit: Duration,
    ) -> Result<Vec<Option<bool>>, LockError> {
        Ok(batch
            .iter()
            .map(|&l| Some(self.set_lease(l, true)))
            .collect())
    }

    async fn extend(&self, lease: Lease<'_>) -> Result<bool, LockError> {
        Ok(self.set_lease(lease, false))
    }

    async fn succeed(&self, lease: Lease<'_>, successor: &str) -> Result<bool, LockError> {
        Ok(self.succeed_now(lease, successor))
    }

    /// In process there is nothing to replicate to: every grant counts as confirmed, so code
    /// that asks for replicas runs unchanged in unit tests.
    async fn confirm_replicas(&self, _lease: Lease<'_>, replicas: u32) -> Result<u32, LockError> {
        Ok(replicas)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Kind, Lease, MemoryBackend};
    use crate::backend::{Attempt, AttemptAsks};

    const ASKS: AttemptAsks = AttemptAsks {
        fence: false,
        remaining: false,
        queue: None,
        beside_of: None,
    };

    /// Semaphores whose permits all ended unreleased are swept, as ended locks are: of
    /// 1,100 ended and 1,100 live, the ended ones go.
    #[test]
    fn ended_semaphores_do_not_pile_up() {
        let memory = MemoryBackend::default();
        let take = |key: String, ttl: Duration| {
            let lease = Lease {
                kind: Kind::Permit {
                    permits: 2,
                    take: 1,
                },
                key: &key,
                token: "t",
                ttl,
            };
            assert_eq!(
                memory.try_acquire(lease, ASKS),
                Attempt::Acquired { fence: None }
            );
        };
        for i in 0..1100 {
            take(format!("ended:{i}"), Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        for i in 0..1100 {
            take(format!("live:{i}"), Duration::from_secs(60));
        }
        let kept = memory.locks().states.len();
        assert!(kept < 1700, "{kept} semaphores kept");
    }
}
