//! Waiters of one client, queued per key and woken by release announcements.
//!
//! Within one client, only the waiter at the head of a key's queue retries when a release is
//! announced; the others wait their turn. So one release costs at most one attempt per client
//! that waits for the key, not one per waiting task, and a client's own waiters are served in
//! arrival order. When the head leaves without the lock (its budget ran out, or it was
//! cancelled), the next waiter is woken to try at once, so no announcement is lost.
//!
//! Each key also knows whether its announcements are *confirmed* (the backend's feed
//! subscribed it). Until they are, or when Redis refused the subscription or the feed lost
//! its connection, every waiter of the key re-checks on a short timer instead of trusting an
//! announcement that may never come. A confirmation wakes the head, since a release just
//! before it would have gone unheard.

pub(crate) mod timers;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;

use crate::backend::{Backend, ReleaseFeed, ReleaseListener};
use crate::tuning::WAIT_COURTESY;

/// Whether a key's release announcements reach this client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announced {
    /// Subscribed, not yet confirmed (or the feed reconnects).
    Pending,
    Confirmed,
    /// Redis refused the subscription.
    Refused,
}

#[derive(Debug)]
struct KeyWaiters {
    waiters: VecDeque<Arc<Waiter>>,
    announced: Announced,
}

impl KeyWaiters {
    fn wake_head(&self) {
        if let Some(head) = self.waiters.front() {
            head.wake.notify_one();
        }
    }
}

#[derive(Debug)]
pub(crate) struct WaitQueues {
    keys: Mutex<HashMap<String, KeyWaiters>>,
    /// Keys this client itself just released while it had waiters for them: its head waiter
    /// lets the other clients' waiters try first (see [`Ticket::courtesy`]).
    released_here: Mutex<HashSet<String>>,
    /// The backend's announcements; `None` when every release is announced in process.
    feed: Option<Arc<dyn ReleaseFeed>>,
}

#[derive(Debug, Default)]
struct Waiter {
    wake: Notify,
}

impl WaitQueues {
    /// The queues of one client, listening to `backend`'s release announcements.
    pub(crate) fn new(backend: &Backend) -> Arc<Self> {
        Arc::new_cyclic(|this: &Weak<Self>| {
            let listener: Weak<dyn ReleaseListener> = this.clone();
            Self {
                keys: Mutex::default(),
                released_here: Mutex::default(),
                feed: backend.release_feed(listener),
            }
        })
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<String, KeyWaiters>> {
        // Every update is a push, a removal or a flag, complete or not done: intact if poisoned.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a waiter for `redis_key`; it leaves the queue when the ticket is dropped.
    pub(crate) fn join(self: &Arc<Self>, redis_key: &str) -> Ticket {
        let waiter = Arc::new(Waiter::default());
        // Subscribing happens under the keys' lock, like unsubscribing in `Ticket::drop`, so
        // the two reach the feed in the order the queue emptied and filled again. (Both only
        // enqueue a request; they never wait.)
        {
            let mut keys = self.keys();
            let entry = keys.entry(redis_key.to_owned()).or_insert_with(|| {
                if let Some(feed) = &self.feed {
                    feed.subscribe(redis_key);
                }
                KeyWaiters {
                    waiters: VecDeque::new(),
                    announced: if self.feed.is_some() {
                        Announced::Pending
                    } else {
                        Announced::Confirmed
                    },
                }
            });
            entry.waiters.push_back(waiter.clone());
        }
        Ticket {
            queues: self.clone(),
            redis_key: redis_key.to_owned(),
            waiter,
            pass_turn: true,
        }
    }

    /// This client released `redis_key`: if it has waiters for it, the next one defers.
    pub(crate) fn released_here(&self, redis_key: &str) {
        // Under the keys' lock, so the last waiter's departure cannot slip in between and
        // leave the mark behind.
        let keys = self.keys();
        if keys.contains_key(redis_key) {
            self.released_set().insert(redis_key.to_owned());
        }
    }

    fn released_set(&self) -> MutexGuard<'_, HashSet<String>> {
        // Inserts and removals only: a poisoned set is intact.
        self.released_here.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `redis_key` has waiters in this client.
    pub(crate) fn has_waiters(&self, redis_key: &str) -> bool {
        self.keys().contains_key(redis_key)
    }

    fn set_announced(&self, redis_key: &str, announced: Announced) {
        if let Some(key) = self.keys().get_mut(redis_key) {
            key.announced = announced;
            key.wake_head();
        }
    }
}

impl ReleaseListener for WaitQueues {
    fn released(&self, redis_key: &str) {
        if let Some(key) = self.keys().get(redis_key) {
            key.wake_head();
        }
    }

    fn confirmed(&self, redis_key: &str) {
        self.set_announced(redis_key, Announced::Confirmed);
    }

    fn refused(&self, redis_key: &str) {
        self.set_announced(redis_key, Announced::Refused);
    }

    fn feed_lost(&self) {
        for key in self.keys().values_mut() {
            key.announced = Announced::Pending;
            key.wake_head();
        }
    }
}

/// A waiter's place in its key's queue.
#[derive(Debug)]
pub(crate) struct Ticket {
    queues: Arc<WaitQueues>,
    redis_key: String,
    waiter: Arc<Waiter>,
    /// Whether leaving wakes the next waiter (not when leaving with the lock).
    pass_turn: bool,
}

impl Ticket {
    /// Whether a release of this key will be announced to this client: if not, the waiter
    /// re-checks on a short timer.
    pub(crate) fn announced(&self) -> bool {
        self.queues
            .keys()
            .get(&self.redis_key)
            .is_some_and(|k| k.announced == Announced::Confirmed)
    }

    /// Leaves the queue after acquiring: the next waiter is not woken, since the lock is
    /// held now; the next release will wake it.
    pub(crate) fn leave_with_lock(mut self) {
        self.pass_turn = false;
    }

    /// Whether this waiter is the one that retries on the next announcement.
    pub(crate) fn is_head(&self) -> bool {
        self.queues
            .keys()
            .get(&self.redis_key)
            .and_then(|k| k.waiters.front())
            .is_some_and(|head| Arc::ptr_eq(head, &self.waiter))
    }

    /// Called by the head before it retries: when its own client was the one that released
    /// the key, it pauses briefly so that waiters of other clients, woken by the same
    /// announcement, get the first try. Without it the releasing client's next waiter, woken
    /// a little earlier in the same process, wins almost every handoff and starves the rest.
    pub(crate) async fn courtesy(&self) {
        if self.queues.released_set().remove(&self.redis_key) {
            tokio::time::sleep(WAIT_COURTESY).await;
        }
    }

    /// Resolves when this waiter should try again: an announcement or a confirmation reached
    /// it as head, or it became head because the previous one left. A wake-up sent while this
    /// waiter was busy trying is kept, not lost.
    pub(crate) async fn woken(&self) {
        self.waiter.wake.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut keys = self.queues.keys();
        let Some(key) = keys.get_mut(&self.redis_key) else {
            return;
        };
        let was_head = key
            .waiters
            .front()
            .is_some_and(|head| Arc::ptr_eq(head, &self.waiter));
        key.waiters.retain(|w| !Arc::ptr_eq(w, &self.waiter));
        if key.waiters.is_empty() {
            keys.remove(&self.redis_key);
            self.queues.released_set().remove(&self.redis_key);
            if let Some(feed) = &self.queues.feed {
                feed.unsubscribe(&self.redis_key);
            }
        } else if was_head && self.pass_turn {
            // The departing head may have consumed an announcement it did not act on; the
            // next one tries at once rather than wait for another.
            key.wake_head();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    #[tokio::test]
    async fn only_the_head_is_woken_and_leaving_passes_the_turn() {
        let queues = WaitQueues::new(&Backend::Memory(MemoryBackend::default()));
        let first = queues.join("k");
        let second = queues.join("k");
        assert!(first.is_head() && !second.is_head());
        assert!(
            first.announced(),
            "in-process releases are always announced"
        );
        queues.released("k");
        first.woken().await; // the permit is kept even though nobody was waiting yet
        drop(first);
        assert!(second.is_head());
        second.woken().await; // passed on by the departing head
        drop(second);
        assert!(!queues.has_waiters("k"));
    }

    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl ReleaseFeed for Recorder {
        fn subscribe(&self, key: &str) {
            self.0.lock().unwrap().push(format!("+{key}"));
        }
        fn unsubscribe(&self, key: &str) {
            self.0.lock().unwrap().push(format!("-{key}"));
        }
    }

    #[tokio::test]
    async fn announcements_count_only_once_confirmed_and_until_the_feed_is_lost() {
        let feed = Arc::new(Recorder::default());
        let queues = Arc::new(WaitQueues {
            keys: Mutex::default(),
            released_here: Mutex::default(),
            feed: Some(feed.clone()),
        });
        let a = queues.join("k");
        let b = queues.join("k");
        assert!(!a.announced() && !b.announced(), "pending: both re-check");
        queues.confirmed("k");
        assert!(a.announced() && b.announced());
        a.woken().await; // the confirmation woke the head
        queues.feed_lost();
        assert!(!b.announced());
        queues.refused("k");
        assert!(!b.announced());
        drop((a, b));
        assert_eq!(*feed.0.lock().unwrap(), ["+k", "-k"]);
    }
}
