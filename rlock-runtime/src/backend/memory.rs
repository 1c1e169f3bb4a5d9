//! The in-process backend: the same semantics as Redis (expiry, ownership, fencing, a
//! semaphore's count, a read-write lock's readers and writer) inside one process, for unit
//! tests and single-instance tools. It keeps no queue: waiters try again when a release
//! tells them, so a read-write lock's waiting writer does not hold back new readers here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{
    Attempt, AttemptAsks, CardFields, CardPost, Holder, KeepKey, Kind, Lease, LeaseStore, Misfit,
    Permits, ReleaseListener, Scanned,
};
use crate::error::LockError;

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
}

#[derive(Debug, Default)]
struct Locks {
    entries: HashMap<String, Entry>,
    /// Semaphores with a permit in use (or whose permits ended since the last sweep).
    semaphores: HashMap<String, Semaphore>,
    /// Semaphores after their last sweep; the next waits until they double.
    semaphores_swept_at: usize,
    /// Read-write locks with a holder (or whose holders ended since the last sweep).
    read_writes: HashMap<String, ReadWrite>,
    /// Read-write locks after their last sweep; the next waits until they double.
    read_writes_swept_at: usize,
    /// Size after the last sweep of expired entries; the next sweep waits until it doubles.
    swept_at: usize,
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

/// One read-write lock: its writer and its readers, each with when its lease ends.
#[derive(Debug, Default)]
struct ReadWrite {
    writer: Option<(String, Instant)>,
    readers: HashMap<String, Instant>,
}

impl ReadWrite {
    /// Drops the leases that ended by `now`.
    fn live(&mut self, now: Instant) -> &mut Self {
        self.readers.retain(|_, ends| *ends > now);
        if self.writer.as_ref().is_some_and(|(_, ends)| *ends <= now) {
            self.writer = None;
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

impl MemoryBackend {
    fn locks(&self) -> MutexGuard<'_, Locks> {
        // A panic while holding this lock cannot leave the map half-updated (every update is
        // a single insert or remove), so a poisoned lock is still consistent.
        self.inner
            .locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn try_acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Attempt {
        let Lease {
            kind,
            key,
            token,
            ttl,
        } = lease;
        if let Kind::Permit { permits } = kind {
            return self.try_permit(lease, permits);
        }
        if kind.is_read_write() {
            return self.try_read_write(lease, ask);
        }
        let now = Instant::now();
        let mut locks = self.locks();
        if let Some(entry) = locks.entries.get(key)
            && entry.expires > now
        {
            return Attempt::Busy {
                remaining: Some(entry.expires - now),
                queued: false,
            };
        }
        if locks.entries.len() > 2 * locks.swept_at.max(512) {
            locks.entries.retain(|_, e| e.expires > now);
            locks.swept_at = locks.entries.len();
        }
        locks.entries.insert(
            key.to_owned(),
            Entry {
                token: token.to_owned(),
                expires: now + ttl,
            },
        );
        let fence = ask
            .fence
            .then(|| self.inner.last_fence.fetch_add(1, Ordering::Relaxed) + 1);
        Attempt::Acquired { fence }
    }

    /// A permit of the semaphore `lease.key` of `permits`, if one is free.
    fn try_permit(&self, lease: Lease<'_>, permits: u32) -> Attempt {
        let now = Instant::now();
        let mut locks = self.locks();
        // Semaphores whose permits all ended without a release go, as a lock's ended entries
        // do, so that a long-lived process does not keep every name it ever used.
        if locks.semaphores.len() > 2 * locks.semaphores_swept_at.max(512) {
            locks
                .semaphores
                .retain(|_, semaphore| !semaphore.live(now).is_empty());
            locks.semaphores_swept_at = locks.semaphores.len();
        }
        let semaphore = locks
            .semaphores
            .entry(lease.key.to_owned())
            .or_insert_with(|| Semaphore {
                count: permits,
                held: HashMap::new(),
            });
        let count = semaphore.count;
        let held = semaphore.live(now);
        if held.is_empty() {
            // The count goes with the last permit, as in Redis.
            semaphore.count = permits;
        } else if count != permits {
            return Attempt::Misfit(Misfit::Permits { stored: count });
        }
        let held = semaphore.live(now);
        if held.len() < usize::try_from(permits).unwrap_or(usize::MAX) {
            held.insert(lease.token.to_owned(), now + lease.ttl);
            return Attempt::Acquired { fence: None };
        }
        Attempt::Busy {
            remaining: held.values().min().map(|ends| *ends - now),
            queued: false,
        }
    }

    /// A read-write lock's read or write lease, if it can be had now: a reader beside other
    /// readers (or beside its own task's writer), a writer alone.
    fn try_read_write(&self, lease: Lease<'_>, ask: AttemptAsks) -> Attempt {
        let now = Instant::now();
        let beside = ask.beside(lease.token);
        let mut locks = self.locks();
        if locks.read_writes.len() > 2 * locks.read_writes_swept_at.max(512) {
            locks.read_writes.retain(|_, rw| !rw.live(now).is_empty());
            locks.read_writes_swept_at = locks.read_writes.len();
        }
        let rw = locks
            .read_writes
            .entry(lease.key.to_owned())
            .or_default()
            .live(now);
        let ends = now + lease.ttl;
        let writer_ends = rw.writer.as_ref().map(|(_, ends)| *ends);
        if lease.kind == Kind::Write {
            if rw.is_empty() {
                rw.writer = Some((lease.token.to_owned(), ends));
                let fence = ask
                    .fence
                    .then(|| self.inner.last_fence.fetch_add(1, Ordering::Relaxed) + 1);
                return Attempt::Acquired { fence };
            }
            let last = rw.readers.values().copied().chain(writer_ends).max();
            return Attempt::Busy {
                remaining: last.map(|ends| ends - now),
                queued: false,
            };
        }
        let own_writer = rw
            .writer
            .as_ref()
            .is_some_and(|(writer, _)| Some(writer) == beside.as_ref());
        if writer_ends.is_none() || own_writer {
            rw.readers.insert(lease.token.to_owned(), ends);
            return Attempt::Acquired { fence: None };
        }
        Attempt::Busy {
            remaining: writer_ends.map(|ends| ends - now),
            queued: false,
        }
    }

    /// Deletes the lock, or gives back the permit or the read-write lease, if `token` owns
    /// it, and tells every client's waiters.
    pub(crate) fn release_now(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        let released = {
            let mut locks = self.locks();
            match locks.entries.get(key) {
                Some(e) if e.token == token && e.expires > now => {
                    locks.entries.remove(key);
                    true
                }
                _ => match locks.semaphores.get_mut(key) {
                    Some(semaphore) => {
                        let ours = semaphore
                            .live(now)
                            .remove(token)
                            .is_some_and(|ends| ends > now);
                        if semaphore.held.is_empty() {
                            locks.semaphores.remove(key);
                        }
                        ours
                    }
                    None => match locks.read_writes.get_mut(key) {
                        Some(rw) => {
                            let rw = rw.live(now);
                            let ours = if rw.readers.remove(token).is_some() {
                                true
                            } else if rw.writer.as_ref().is_some_and(|(w, _)| w == token) {
                                rw.writer = None;
                                true
                            } else {
                                false
                            };
                            if rw.is_empty() {
                                locks.read_writes.remove(key);
                            }
                            ours
                        }
                        None => false,
                    },
                },
            }
        };
        if released {
            let listeners = self.listeners().clone();
            for listener in listeners.iter().filter_map(Weak::upgrade) {
                listener.released(key, None);
            }
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

    /// Tells `listener` of every release from now on.
    pub(crate) fn listen(&self, listener: Weak<dyn ReleaseListener>) {
        let mut listeners = self.listeners();
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(listener);
    }

    /// Sets the lease of `key` to `ttl` from now if `token` owns it; with `only_longer`, a
    /// lease that already ends later is left as it is (a renewal never shortens).
    fn set_lease(&self, lease: Lease<'_>, only_longer: bool) -> bool {
        let now = Instant::now();
        let mut locks = self.locks();
        let ends = match lease.kind {
            Kind::Lock => match locks.entries.get_mut(lease.key) {
                Some(e) if e.token == lease.token => Some(&mut e.expires),
                _ => None,
            },
            Kind::Permit { .. } => locks
                .semaphores
                .get_mut(lease.key)
                .and_then(|semaphore| semaphore.live(now).get_mut(lease.token)),
            Kind::Read | Kind::Write => locks
                .read_writes
                .get_mut(lease.key)
                .and_then(|rw| rw.live(now).lease_of(lease.kind, lease.token)),
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

impl LeaseStore for MemoryBackend {
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
            .entries
            .keys()
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
        // A semaphore is told by the permit that ends first, and all of them.
        let (first, permits) = match kind {
            Kind::Lock => (locks.entries.get(key).map(|e| (&e.token, e.expires)), None),
            Kind::Permit { .. } => match locks.semaphores.get_mut(key) {
                Some(semaphore) => {
                    let count = semaphore.count;
                    let held = semaphore.live(now);
                    let permits = Permits {
                        count: if held.is_empty() { 0 } else { count },
                        owners: held.keys().cloned().collect(),
                    };
                    let first = held.iter().min_by_key(|(_, ends)| **ends);
                    (first.map(|(t, e)| (t, *e)), Some(permits))
                }
                None => (None, Some(Permits::default())),
            },
            // A read-write lock is told by its writer, and how long until it or the reader
            // that ends last is done.
            Kind::Read | Kind::Write => {
                let Some(rw) = locks.read_writes.get_mut(key) else {
                    return Ok(Holder {
                        permits: Some(Permits::default()),
                        ..Holder::default()
                    });
                };
                let rw = rw.live(now);
                let last = rw.readers.values().max().copied();
                let writer = rw.writer.clone();
                return Ok(Holder {
                    remaining: writer
                        .as_ref()
                        .map(|(_, ends)| *ends)
                        .or(last)
                        .map(|e| e - now),
                    token: writer.map(|(token, _)| token),
                    queued: None,
                    permits: Some(Permits {
                        count: u32::try_from(rw.readers.len()).unwrap_or(u32::MAX),
                        owners: rw.readers.keys().cloned().collect(),
                    }),
                });
            }
        };
        Ok(match first {
            Some((token, ends)) if ends > now => Holder {
                token: Some(token.clone()),
                remaining: Some(ends - now),
                queued: None,
                permits,
            },
            _ => Holder {
                permits,
                ..Holder::default()
            },
        })
    }

    async fn acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Result<Attempt, LockError> {
        Ok(self.try_acquire(lease, ask))
    }

    async fn release(&self, lease: Lease<'_>, _fenced: bool) -> Result<bool, LockError> {
        Ok(self.release_now(lease.key, lease.token))
    }

    async fn withdraw(&self, lease: Lease<'_>, _fenced: bool) -> Result<bool, LockError> {
        Ok(self.release_now(lease.key, lease.token))
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
        downgrade_of: None,
    };

    /// Semaphores whose permits all ended unreleased are swept, as ended locks are: of
    /// 1,100 ended and 1,100 live, the ended ones go.
    #[test]
    fn ended_semaphores_do_not_pile_up() {
        let memory = MemoryBackend::default();
        let take = |key: String, ttl: Duration| {
            let lease = Lease {
                kind: Kind::Permit { permits: 2 },
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
        let kept = memory.locks().semaphores.len();
        assert!(kept < 1700, "{kept} semaphores kept");
    }
}
