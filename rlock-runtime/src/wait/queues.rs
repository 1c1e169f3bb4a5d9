//! A client's waiters, per key: who waits, whether the key's announcements are confirmed,
//! and the feed's listener that wakes them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Backend, Handoff, LeaseStore as _, ReleaseFeed, ReleaseListener};
use crate::util::tuning::SUBSCRIPTION_LINGER;

/// Whether a key's release announcements reach this client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Announced {
    /// Subscribed, not yet confirmed (or the feed reconnects).
    Pending,
    Confirmed,
    /// Redis refused the subscription.
    Refused,
}

#[derive(Debug)]
pub(super) struct KeyWaiters {
    pub(super) waiters: VecDeque<Arc<Waiter>>,
    /// Whether the feed was asked to subscribe the key.
    pub(super) subscribed: bool,
    pub(super) announced: Announced,
    /// When the last waiter left (the subscription lingers a while).
    pub(super) idle_since: Option<Instant>,
    /// When the last call of this client that renewed the key's queue's expiry was sent.
    pub(super) refreshed_at: Option<Instant>,
    /// Whether this client's last arrival found others queued (its next one then joins
    /// with a plain `RPUSHX`; after one that found the queue empty or the lock free, the
    /// script, which takes a free lock in the same round trip).
    pub(super) crowded: bool,
}

impl KeyWaiters {
    pub(super) fn wake_head(&self) {
        if let Some(head) = self.waiters.front() {
            head.wake.notify_one();
        }
    }

    pub(super) fn wake_all(&self) {
        for waiter in &self.waiters {
            waiter.wake.notify_one();
        }
    }
}

#[derive(Debug)]
pub(crate) struct WaitQueues {
    pub(super) keys: Mutex<HashMap<String, KeyWaiters>>,
    /// Keys this client itself just released while it had waiters for them: its head waiter
    /// lets the other clients' waiters try first (see
    /// [`Ticket::courtesy`](super::ticket::Ticket::courtesy)). Only without a
    /// queue in Redis.
    pub(super) released_here: Mutex<HashSet<String>>,
    /// The backend's announcements; `None` when every release is announced in process.
    pub(super) feed: Option<Arc<dyn ReleaseFeed>>,
    /// For a waiter that gives up: it leaves its queue in Redis.
    pub(super) backend: Backend,
    /// Whether a sweep of lingering subscriptions is scheduled.
    pub(super) sweeping: AtomicBool,
}

#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) wake: Notify,
    /// Its owner token: the lock is handed to it under this token.
    pub(super) token: Mutex<String>,
    /// The announcement that handed it the lock, once heard.
    pub(super) handed: Mutex<Option<Handoff>>,
}

impl Waiter {
    pub(super) fn token(&self) -> MutexGuard<'_, String> {
        // Replaced whole or not at all: intact if poisoned.
        self.token.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn handed(&self) -> MutexGuard<'_, Option<Handoff>> {
        self.handed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl WaitQueues {
    /// The queues of one client, listening to `backend`'s release announcements.
    /// `client` is the client's id, the start of its tokens: releases name its waiters on
    /// its own channels.
    pub(crate) fn new(backend: &Backend, client: &str) -> Arc<Self> {
        Arc::new_cyclic(|this: &Weak<Self>| {
            let listener: Weak<dyn ReleaseListener> = this.clone();
            Self {
                keys: Mutex::default(),
                released_here: Mutex::default(),
                feed: backend.release_feed(client, listener),
                backend: backend.clone(),
                sweeping: AtomicBool::new(false),
            }
        })
    }

    pub(super) fn keys(&self) -> MutexGuard<'_, HashMap<String, KeyWaiters>> {
        // Every update is a push, a removal or a flag, complete or not done: intact if poisoned.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a waiter for `redis_key` under `token` (its [`Ticket`](super::ticket::Ticket)
    /// takes it out).
    pub(super) fn enqueue(&self, redis_key: &str, token: String) -> Arc<Waiter> {
        let waiter = Arc::new(Waiter {
            wake: Notify::new(),
            token: Mutex::new(token),
            handed: Mutex::new(None),
        });
        {
            let mut keys = self.keys();
            let entry = keys
                .entry(redis_key.to_owned())
                .or_insert_with(|| KeyWaiters {
                    waiters: VecDeque::new(),
                    subscribed: false,
                    // In process, every release is announced.
                    announced: if self.feed.is_some() {
                        Announced::Pending
                    } else {
                        Announced::Confirmed
                    },
                    idle_since: None,
                    refreshed_at: None,
                    crowded: false,
                });
            entry.idle_since = None;
            entry.waiters.push_back(waiter.clone());
        }
        waiter
    }

    /// This client released `redis_key`: if it has waiters for it, the next one defers.
    pub(crate) fn released_here(&self, redis_key: &str) {
        // With a queue in Redis, the release hands the lock to the queue's head itself, and
        // nobody races for it: no mark (and no lock taken on every release).
        if self.backend.queues_in_redis() {
            return;
        }
        // Under the keys' lock, so the last waiter's departure cannot slip in between and
        // leave the mark behind.
        let keys = self.keys();
        if keys.get(redis_key).is_some_and(|k| !k.waiters.is_empty()) {
            self.released_set().insert(redis_key.to_owned());
        }
    }

    pub(super) fn released_set(&self) -> MutexGuard<'_, HashSet<String>> {
        // Inserts and removals only: a poisoned set is intact.
        self.released_here.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `redis_key` has waiters in this client.
    pub(crate) fn has_waiters(&self, redis_key: &str) -> bool {
        self.keys()
            .get(redis_key)
            .is_some_and(|k| !k.waiters.is_empty())
    }

    /// A confirmation wakes every waiter of the key: a release before it found nobody
    /// listening and skipped their entries, which their check ins put back.
    pub(super) fn set_announced(&self, redis_key: &str, announced: Announced) {
        if let Some(key) = self.keys().get_mut(redis_key) {
            key.announced = announced;
            key.wake_all();
        }
    }

    /// Unsubscribes, [`SUBSCRIPTION_LINGER`] from now, the keys that have had no waiter
    /// since; one sweep at a time, rescheduled while idle subscriptions remain.
    pub(super) fn schedule_sweep(self: &Arc<Self>) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::downgrade(self);
        let scheduled = crate::util::background::spawn(async move {
            tokio::time::sleep(SUBSCRIPTION_LINGER).await;
            let Some(this) = this.upgrade() else { return };
            this.sweeping.store(false, Ordering::Release);
            if this.sweep(Instant::now()) {
                this.schedule_sweep();
            }
        });
        if !scheduled {
            self.sweeping.store(false, Ordering::Release);
        }
    }

    /// Unsubscribes the keys idle for [`SUBSCRIPTION_LINGER`]; whether others still linger.
    fn sweep(&self, now: Instant) -> bool {
        let mut lingering = false;
        self.keys().retain(|key, waiters| {
            let Some(idle) = waiters.idle_since else {
                return true;
            };
            if now.saturating_duration_since(idle) < SUBSCRIPTION_LINGER {
                lingering = true;
                return true;
            }
            if let Some(feed) = &self.feed {
                feed.unsubscribe(key);
            }
            false
        });
        lingering
    }
}

impl ReleaseListener for WaitQueues {
    fn released(&self, redis_key: &str, handed: Option<Handoff>) {
        let keys = self.keys();
        let Some(key) = keys.get(redis_key) else {
            return;
        };
        match handed {
            // The lock was handed to a waiter: wake it if it is one of ours, nobody otherwise.
            Some(handoff) => {
                let ours = key.waiters.iter().find(|w| *w.token() == handoff.token);
                if let Some(waiter) = ours {
                    *waiter.handed() = Some(handoff);
                    waiter.wake.notify_one();
                }
            }
            None => key.wake_head(),
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
            key.wake_all();
        }
    }
}
