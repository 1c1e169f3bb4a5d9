//! The in-process backend: the same semantics as Redis (expiry, ownership, fencing) inside
//! one process, for unit tests and single-instance tools.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{Attempt, AttemptAsks};
use crate::queue::WaitQueues;

#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryBackend {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    locks: Mutex<Locks>,
    /// One counter for every key: strictly increasing per key too, and nothing per key to keep.
    last_fence: AtomicU64,
    /// The wait queues of every client on this backend, told of each release.
    listeners: Mutex<Vec<Weak<WaitQueues>>>,
}

#[derive(Debug, Default)]
struct Locks {
    entries: HashMap<String, Entry>,
    /// Size after the last sweep of expired entries; the next sweep waits until it doubles.
    swept_at: usize,
}

#[derive(Debug)]
struct Entry {
    token: String,
    expires: Instant,
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

    pub(crate) fn try_acquire(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        ask: AttemptAsks,
    ) -> Attempt {
        let now = Instant::now();
        let mut locks = self.locks();
        if let Some(entry) = locks.entries.get(key)
            && entry.expires > now
        {
            return Attempt::Busy {
                remaining: Some(entry.expires - now),
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

    pub(crate) fn release(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        let released = {
            let mut locks = self.locks();
            match locks.entries.get(key) {
                Some(e) if e.token == token && e.expires > now => {
                    locks.entries.remove(key);
                    true
                }
                _ => false,
            }
        };
        if released {
            let listeners = self.listeners().clone();
            for queues in listeners.iter().filter_map(Weak::upgrade) {
                queues.released(key);
            }
        }
        released
    }

    fn listeners(&self) -> MutexGuard<'_, Vec<Weak<WaitQueues>>> {
        // Pushes and retains only: a poisoned list is intact.
        self.inner
            .listeners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells `queues` of every release from now on.
    pub(crate) fn listen(&self, queues: &Arc<WaitQueues>) {
        let mut listeners = self.listeners();
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(Arc::downgrade(queues));
    }

    pub(crate) fn extend(&self, key: &str, token: &str, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut locks = self.locks();
        match locks.entries.get_mut(key) {
            Some(e) if e.token == token && e.expires > now => {
                e.expires = now + ttl;
                true
            }
            _ => false,
        }
    }
}
