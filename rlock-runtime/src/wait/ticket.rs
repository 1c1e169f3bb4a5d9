//! One waiter's place in its key's queue: what it asks of the queue in Redis, what it was
//! told, and how it leaves.

use std::sync::Arc;

use tokio::time::Instant;

use super::queues::{Announced, WaitQueues, Waiter};
use crate::backend::connection::CallerConnection;
use crate::backend::{Handoff, Lease, LeaseStore, QueueAsk, QueueCall, QueueEntry, Standing};
use crate::util::tuning::{WAIT_COURTESY, WAITER_CHECK_INTERVAL};

/// Where a busy reply left a waiter in the queue in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// It stands in the queue now.
    pub(crate) queued: bool,
    /// Where it stands, as its client's next arrival needs to know.
    pub(crate) standing: Standing,
}

impl WaitQueues {
    /// Queues a waiter for `redis_key` under `token`; it leaves the queue when the ticket is
    /// dropped. Nothing is subscribed yet: see [`Ticket::listen`].
    pub(crate) fn join(self: &Arc<Self>, redis_key: &str, token: String) -> Ticket {
        Ticket {
            waiter: self.enqueue(redis_key, token),
            queues: self.clone(),
            redis_key: redis_key.to_owned(),
            pass_turn: true,
            queued_in_redis: None,
        }
    }
}

/// A waiter's place in its key's queue.
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(super) queues: Arc<WaitQueues>,
    pub(super) redis_key: String,
    pub(super) waiter: Arc<Waiter>,
    /// Whether leaving wakes the next waiter (not when leaving with the lock).
    pub(super) pass_turn: bool,
    /// Its entry, when one may be in the lock's queue in Redis (it leaves it on drop).
    pub(super) queued_in_redis: Option<QueueEntry>,
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
        let call = if queued {
            QueueCall::CheckIn
        } else if key.is_some_and(|k| k.crowded && k.announced == Announced::Confirmed) {
            QueueCall::Append {
                refresh: key
                    .and_then(|k| k.refreshed_at)
                    .is_none_or(|at| now.saturating_duration_since(at) >= WAITER_CHECK_INTERVAL),
            }
        } else {
            QueueCall::Arrive
        };
        QueueAsk { fair, call }
    }

    /// A call that asked `ask`, sent at `sent_at`, found the lock busy, and left the waiter
    /// at `place`.
    pub(crate) fn answered(&self, ask: QueueAsk, sent_at: Instant, place: Place) {
        let mut keys = self.queues.keys();
        let Some(key) = keys.get_mut(&self.redis_key) else {
            return;
        };
        if ask.call.renews_queue() && key.refreshed_at.is_none_or(|at| at < sent_at) {
            key.refreshed_at = Some(sent_at);
        }
        // A check in's place says nothing of arrivals, but that a plain join's entry would
        // not carry the count the semaphore has now.
        match (ask.call, place.standing) {
            (_, Standing::Recounted) => key.crowded = false,
            (QueueCall::CheckIn, _) => {}
            (_, standing) => key.crowded = place.queued && standing == Standing::Behind,
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
    /// meanwhile is handed on. Sent at once, and once more behind any check in of this waiter
    /// still on its way on its caller's connection, which could otherwise take a lock handed
    /// to it after the withdrawal.
    fn withdraw(&self, entry: QueueEntry) {
        let backend = self.queues.backend.clone();
        let (key, token) = (self.redis_key.clone(), self.token());
        let withdraw = move || {
            let (backend, key, token) = (backend.clone(), key.clone(), token.clone());
            async move {
                let lease = Lease {
                    kind: entry.kind,
                    key: &key,
                    token: &token,
                    ttl: entry.ttl,
                };
                // Best effort: if it fails, a release that finds the entry at the head hands
                // it the lock, which ends with the handoff lease (or skips it, once this
                // client no longer listens).
                let _ = backend.withdraw(lease, entry.fenced).await;
            }
        };
        CallerConnection::spawn_behind_caller(withdraw());
        crate::util::background::spawn(withdraw());
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
