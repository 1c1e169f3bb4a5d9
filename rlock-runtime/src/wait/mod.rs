//! Waiters of one client, queued per key, and woken by release announcements.
//!
//! On one server, Sentinel and Cluster, each waiter also stands in its lock's queue in Redis,
//! and a release hands the lock to the first live waiter there and names it in its
//! announcement: only that waiter's client acts on it, and it needs no command to take the
//! lock. Here the announcement finds the waiter by its token ([`Ticket::handed`]). The
//! announcement goes to the client's own channel for the key, and a release skips the
//! entries of a client that does not listen (its process died, or its subscription is not
//! confirmed yet). Every check in of a queued waiter (at least one per
//! [`WAITER_CHECK_INTERVAL`]) keeps the queue alive and puts the waiter's entry back if it is
//! gone, so a live waiter is out of the queue for at most one check in (WAITING.md states
//! the protocol and its invariants; the `rlock-model` crate checks them).
//!
//! Without a queue in Redis (Redlock, in process), an announcement says only "released":
//! within one client only the waiter at the head of a key's queue retries, and the others
//! wait their turn. When the head leaves without the lock (its budget ran out, or it was
//! cancelled), the next waiter is woken to try at once, so no announcement is lost.
//!
//! Each key also knows whether its announcements are *confirmed* (the backend's feed
//! subscribed it). Until they are, or when Redis refused the subscription or the feed lost
//! its connection, every waiter of the key re-checks on a short timer instead of trusting an
//! announcement that may never come. A confirmation wakes the waiters, since a release just
//! before it would have gone unheard. A key stays subscribed for a while after its last
//! waiter left, so that a client that waits for the same key again and again does not
//! subscribe and unsubscribe every time.

pub(crate) mod timers;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{
    Backend, Handoff, Lease, LeaseStore, QueueAsk, QueueEntry, ReleaseFeed, ReleaseListener,
};
use crate::util::tuning::{SUBSCRIPTION_LINGER, WAIT_COURTESY, WAITER_CHECK_INTERVAL};

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
    /// Whether the feed was asked to subscribe the key.
    subscribed: bool,
    announced: Announced,
    /// When the last waiter left (the subscription lingers a while).
    idle_since: Option<Instant>,
    /// When the last call of this client that renewed the key's queue's expiry was sent.
    refreshed_at: Option<Instant>,
    /// Whether this client's last arrival found others queued (its next one then joins
    /// with a plain `RPUSHX`; after one that found the queue empty or the lock free, the
    /// script, which takes a free lock in the same round trip).
    crowded: bool,
}

impl KeyWaiters {
    fn wake_head(&self) {
        if let Some(head) = self.waiters.front() {
            head.wake.notify_one();
        }
    }

    fn wake_all(&self) {
        for waiter in &self.waiters {
            waiter.wake.notify_one();
        }
    }
}

#[derive(Debug)]
pub(crate) struct WaitQueues {
    keys: Mutex<HashMap<String, KeyWaiters>>,
    /// Keys this client itself just released while it had waiters for them: its head waiter
    /// lets the other clients' waiters try first (see [`Ticket::courtesy`]). Only without a
    /// queue in Redis.
    released_here: Mutex<HashSet<String>>,
    /// The backend's announcements; `None` when every release is announced in process.
    feed: Option<Arc<dyn ReleaseFeed>>,
    /// For a waiter that gives up: it leaves its queue in Redis.
    backend: Backend,
    /// Whether a sweep of lingering subscriptions is scheduled.
    sweeping: AtomicBool,
}

#[derive(Debug)]
struct Waiter {
    wake: Notify,
    /// Its owner token: the lock is handed to it under this token.
    token: Mutex<String>,
    /// The announcement that handed it the lock, once heard.
    handed: Mutex<Option<Handoff>>,
}

impl Waiter {
    fn token(&self) -> MutexGuard<'_, String> {
        // Replaced whole or not at all: intact if poisoned.
        self.token.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn handed(&self) -> MutexGuard<'_, Option<Handoff>> {
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

    fn keys(&self) -> MutexGuard<'_, HashMap<String, KeyWaiters>> {
        // Every update is a push, a removal or a flag, complete or not done: intact if poisoned.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a waiter for `redis_key` under `token`; it leaves the queue when the ticket is
    /// dropped. Nothing is subscribed yet: see [`Ticket::listen`].
    pub(crate) fn join(self: &Arc<Self>, redis_key: &str, token: String) -> Ticket {
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
        Ticket {
            queues: self.clone(),
            redis_key: redis_key.to_owned(),
            waiter,
            pass_turn: true,
            queued_in_redis: None,
        }
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

    fn released_set(&self) -> MutexGuard<'_, HashSet<String>> {
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
    fn set_announced(&self, redis_key: &str, announced: Announced) {
        if let Some(key) = self.keys().get_mut(redis_key) {
            key.announced = announced;
            key.wake_all();
        }
    }

    /// Unsubscribes, [`SUBSCRIPTION_LINGER`] from now, the keys that have had no waiter
    /// since; one sweep at a time, rescheduled while idle subscriptions remain.
    fn schedule_sweep(self: &Arc<Self>) {
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

/// What a busy reply told a waiter of its place in the queue in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy {
    /// It stands in the queue now.
    pub(crate) queued: bool,
    /// It is the queue's head (for an arrival: its arrival made the queue).
    pub(crate) first: bool,
}

/// A waiter's place in its key's queue.
#[derive(Debug)]
pub(crate) struct Ticket {
    queues: Arc<WaitQueues>,
    redis_key: String,
    waiter: Arc<Waiter>,
    /// Whether leaving wakes the next waiter (not when leaving with the lock).
    pass_turn: bool,
    /// Its entry, when one may be in the lock's queue in Redis (it leaves it on drop).
    queued_in_redis: Option<QueueEntry>,
}

impl Ticket {
    /// The owner token it waits under.
    pub(crate) fn token(&self) -> String {
        self.waiter.token().clone()
    }

    /// Waits under a new token from now on (an attempt under the old one went unanswered:
    /// it is withdrawn in the background, and must not be confused with this waiter's).
    pub(crate) fn change_token(&mut self, token: String) {
        *self.waiter.token() = token;
        self.queued_in_redis = None;
    }

    /// An attempt may have queued it in Redis as `entry`: on drop without the lock it
    /// withdraws.
    pub(crate) fn queued_in_redis(&mut self, entry: QueueEntry) {
        self.queued_in_redis = Some(entry);
    }

    /// What its next call, sent at `now`, asks of the queue in Redis: with `queued` when it
    /// stands there already (a check in, which also puts its entry back if it is gone). A
    /// waiter not queued yet joins with one plain command while the key's announcements are
    /// confirmed and the client's last arrival found others queued; that command renews the
    /// queue's expiry too when no call of the client has for a check interval (waiters
    /// served before their first check in must keep the queue alive: a queue that lapses
    /// costs each of its waiters a check interval).
    pub(crate) fn queue_ask(&self, fair: bool, queued: bool, now: Instant) -> QueueAsk {
        let keys = self.queues.keys();
        let key = keys.get(&self.redis_key);
        QueueAsk {
            fair,
            queued,
            append: !queued
                && key.is_some_and(|k| k.crowded && k.announced == Announced::Confirmed),
            refresh: key
                .and_then(|k| k.refreshed_at)
                .is_none_or(|at| now.saturating_duration_since(at) >= WAITER_CHECK_INTERVAL),
        }
    }

    /// A call that asked `ask`, sent at `sent_at`, found the lock busy, and left the waiter
    /// at `busy`.
    pub(crate) fn answered(&self, ask: QueueAsk, sent_at: Instant, busy: Busy) {
        let mut keys = self.queues.keys();
        let Some(key) = keys.get_mut(&self.redis_key) else {
            return;
        };
        // A script call always renews the queue's expiry; a plain join when asked to.
        let renewed = !ask.append || ask.refresh;
        if renewed && key.refreshed_at.is_none_or(|at| at < sent_at) {
            key.refreshed_at = Some(sent_at);
        }
        if !ask.queued {
            key.crowded = busy.queued && !busy.first;
        }
    }

    /// Its arrival took the lock: the queue, if any, was empty.
    pub(crate) fn granted_on_arrival(&self) {
        if let Some(key) = self.queues.keys().get_mut(&self.redis_key) {
            key.crowded = false;
        }
    }

    /// Subscribes its key's release announcements, if not yet (the waiter found it busy).
    pub(crate) fn listen(&self) {
        let mut keys = self.queues.keys();
        if let Some(key) = keys.get_mut(&self.redis_key) {
            match &self.queues.feed {
                Some(feed) if !key.subscribed => {
                    key.subscribed = true;
                    feed.subscribe(&self.redis_key);
                }
                _ => {}
            }
        }
    }

    /// Whether a release of this key will be announced to this client: if not, the waiter
    /// re-checks on a short timer.
    pub(crate) fn announced(&self) -> bool {
        self.queues
            .keys()
            .get(&self.redis_key)
            .is_some_and(|k| k.announced == Announced::Confirmed)
    }

    /// The announcement that handed this waiter the lock, if one came.
    pub(crate) fn handed(&self) -> Option<Handoff> {
        self.waiter
            .handed()
            .take()
            .filter(|h| h.token == *self.waiter.token())
    }

    /// Whether an announcement handed this waiter the lock (without taking it).
    pub(crate) fn has_handoff(&self) -> bool {
        self.waiter.handed().is_some()
    }

    /// Leaves the queue after acquiring: the next waiter is not woken, since the lock is
    /// held now; the next release will wake it.
    pub(crate) fn leave_with_lock(mut self) {
        self.pass_turn = false;
        self.queued_in_redis = None;
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

    /// Resolves when this waiter should look again: the lock was handed to it, an
    /// announcement or a confirmation reached it, or it became head because the previous
    /// one left. A wake-up sent while this waiter was busy trying is kept, not lost.
    pub(crate) async fn woken(&self) {
        self.waiter.wake.notified().await;
    }

    /// Leaves the lock's queue in Redis in the background; a lock handed to this waiter
    /// meanwhile is handed on.
    fn withdraw(&self, entry: QueueEntry) {
        let backend = self.queues.backend.clone();
        let (key, token) = (self.redis_key.clone(), self.token());
        crate::util::background::spawn(async move {
            let lease = Lease {
                key: &key,
                token: &token,
                ttl: entry.ttl,
            };
            // Best effort: if it fails, a release that finds the entry at the head hands it
            // the lock, which ends with the handoff lease (or skips it, once this client no
            // longer listens).
            let _ = backend.withdraw(lease, entry.fenced).await;
        });
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(entry) = self.queued_in_redis {
            self.withdraw(entry);
        }
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
            self.queues.released_set().remove(&self.redis_key);
            if key.subscribed {
                key.idle_since = Some(Instant::now());
                drop(keys);
                self.queues.schedule_sweep();
            } else {
                keys.remove(&self.redis_key);
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

    fn in_process() -> Arc<WaitQueues> {
        WaitQueues::new(&Backend::Memory(MemoryBackend::default()), "c")
    }

    #[tokio::test]
    async fn only_the_head_is_woken_and_leaving_passes_the_turn() {
        let queues = in_process();
        let first = queues.join("k", String::new());
        let second = queues.join("k", String::new());
        assert!(first.is_head() && !second.is_head());
        assert!(
            first.announced(),
            "in-process releases are always announced"
        );
        queues.released("k", None);
        first.woken().await; // the permit is kept even though nobody was waiting yet
        drop(first);
        assert!(second.is_head());
        second.woken().await; // passed on by the departing head
        drop(second);
        assert!(!queues.has_waiters("k"));
    }

    #[tokio::test]
    async fn a_handoff_wakes_only_the_waiter_it_names() {
        let queues = in_process();
        let first = queues.join("k", "c:1".into());
        let mut second = queues.join("k", "c:2".into());
        let handoff = |token: &str| Handoff {
            token: token.into(),
            fence: Some(7),
        };
        queues.released("k", Some(handoff("c:2")));
        queues.released("k", Some(handoff("other-client:5")));
        assert!(!first.has_handoff());
        assert_eq!(second.handed(), Some(handoff("c:2")));
        second.woken().await;
        // A handoff under a token the waiter gave up is not its own.
        queues.released("k", Some(handoff("c:2")));
        second.change_token("c:3".into());
        assert_eq!(second.handed(), None);
        drop((first, second));
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

    fn with_feed(feed: Arc<Recorder>) -> Arc<WaitQueues> {
        Arc::new(WaitQueues {
            keys: Mutex::default(),
            released_here: Mutex::default(),
            feed: Some(feed),
            backend: Backend::Memory(MemoryBackend::default()),
            sweeping: AtomicBool::new(false),
        })
    }

    fn queued_first() -> Busy {
        Busy {
            queued: true,
            first: true,
        }
    }

    /// A newcomer joins with a plain `RPUSHX` only while the key's announcements are
    /// confirmed and the client's last arrival found others queued; a check in never does.
    /// A plain join renews the queue's expiry when the client's calls have not for a check
    /// interval.
    #[tokio::test]
    async fn a_newcomer_appends_only_behind_others_and_while_confirmed() {
        let queues = with_feed(Arc::new(Recorder::default()));
        let now = Instant::now();
        let first = queues.join("k", "c:1".into());
        let ask = first.queue_ask(false, false, now);
        assert!(!ask.append && ask.refresh, "{ask:?}");
        first.answered(ask, now, queued_first());
        first.listen();
        queues.confirmed("k");
        let second = queues.join("k", "c:2".into());
        let ask = second.queue_ask(false, false, now);
        assert!(
            !ask.append,
            "the last arrival made the queue: the script, {ask:?}"
        );
        let crowded = Busy {
            first: false,
            ..queued_first()
        };
        second.answered(ask, now, crowded);
        let third = queues.join("k", "c:3".into());
        let ask = third.queue_ask(false, false, now);
        assert!(ask.append && !ask.refresh, "renewed a moment ago: {ask:?}");
        let later = now + WAITER_CHECK_INTERVAL;
        assert!(
            third.queue_ask(false, false, later).refresh,
            "a plain join renews the queue once per check interval"
        );
        assert!(!first.queue_ask(false, true, now).append, "a check in");
        queues.feed_lost();
        assert!(!third.queue_ask(false, false, now).append);
        drop((first, second, third));
    }

    #[tokio::test]
    async fn announcements_count_only_once_confirmed_and_until_the_feed_is_lost() {
        let feed = Arc::new(Recorder::default());
        let queues = with_feed(feed.clone());
        let a = queues.join("k", String::new());
        let b = queues.join("k", String::new());
        assert!(
            feed.0.lock().unwrap().is_empty(),
            "nothing subscribed before a busy reply"
        );
        a.listen();
        b.listen();
        assert!(!a.announced() && !b.announced(), "pending: both re-check");
        queues.confirmed("k");
        assert!(a.announced() && b.announced());
        a.woken().await; // the confirmation woke the waiters
        b.woken().await;
        queues.feed_lost();
        assert!(!b.announced());
        queues.refused("k");
        assert!(!b.announced());
        drop((a, b));
        // The subscription lingers, then goes.
        assert_eq!(*feed.0.lock().unwrap(), ["+k"]);
        for _ in 0..100 {
            if feed.0.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(SUBSCRIPTION_LINGER / 10).await;
        }
        assert_eq!(*feed.0.lock().unwrap(), ["+k", "-k"]);
        assert!(!queues.has_waiters("k"));
    }
}
