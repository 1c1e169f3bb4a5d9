//! Waiters of one client, queued per key and woken by release notifications.
//!
//! Within one client, only the waiter at the head of a key's queue retries when a release is
//! announced; the others wait their turn. So one release costs at most one attempt per client
//! that waits for the key, not one per waiting task, and a client's own waiters are served in
//! arrival order. When the head leaves without the lock (its budget ran out, or it was
//! cancelled), the next waiter is woken to try at once, so no announcement is lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Duration;

use tokio::sync::{Notify, oneshot};

/// Called when a key gains its first waiter or loses its last one, so that the backend can
/// subscribe to or unsubscribe from its release channel.
pub(crate) trait Subscriptions: Send + Sync + std::fmt::Debug {
    /// Returns a receiver that resolves once announcements for the key will arrive.
    fn first_waiter(&self, redis_key: &str) -> Option<oneshot::Receiver<()>>;
    fn last_waiter_left(&self, redis_key: &str);
}

#[derive(Debug, Default)]
pub(crate) struct WaitQueues {
    queues: Mutex<HashMap<String, VecDeque<Arc<Waiter>>>>,
    /// Keys this client itself just released while it had waiters for them: its head waiter
    /// lets the other clients' waiters try first (see [`Ticket::courtesy`]).
    released_here: Mutex<HashSet<String>>,
}

/// How long a head waiter defers to other clients after its own client released the key:
/// about a pub/sub delivery plus a round trip on a local network.
const COURTESY: Duration = Duration::from_millis(1);

#[derive(Debug, Default)]
struct Waiter {
    wake: Notify,
}

impl WaitQueues {
    fn queues(&self) -> MutexGuard<'_, HashMap<String, VecDeque<Arc<Waiter>>>> {
        // Every update is a push or a removal, complete or not done: a poisoned map is intact.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a waiter for `redis_key`; it leaves the queue when the ticket is dropped.
    pub(crate) fn join(
        self: &Arc<Self>,
        redis_key: &str,
        subscriptions: Option<Arc<dyn Subscriptions>>,
    ) -> Ticket {
        let waiter = Arc::new(Waiter::default());
        // Subscribing happens under the queues' lock, like unsubscribing in `Ticket::drop`,
        // so the two reach the feed in the order the queue emptied and filled again.
        // (Both only enqueue a request; they never wait.)
        let subscribed = {
            let mut queues = self.queues();
            let queue = queues.entry(redis_key.to_owned()).or_default();
            queue.push_back(waiter.clone());
            match &subscriptions {
                Some(subs) if queue.len() == 1 => subs.first_waiter(redis_key),
                _ => None,
            }
        };
        Ticket {
            queues: self.clone(),
            redis_key: redis_key.to_owned(),
            waiter,
            subscriptions,
            subscribed,
            pass_turn: true,
        }
    }

    /// A release of `redis_key` was announced: the head waiter may try again.
    pub(crate) fn released(&self, redis_key: &str) {
        if let Some(head) = self.queues().get(redis_key).and_then(|q| q.front()) {
            head.wake.notify_one();
        }
    }

    /// Announcements may have been missed (the subscriber reconnected): wake every head.
    pub(crate) fn wake_all_heads(&self) {
        for queue in self.queues().values() {
            if let Some(head) = queue.front() {
                head.wake.notify_one();
            }
        }
    }

    /// This client released `redis_key`: if it has waiters for it, the next one defers.
    pub(crate) fn released_here(&self, redis_key: &str) {
        // Under the queues' lock, so the last waiter's departure cannot slip in between and
        // leave the mark behind.
        let queues = self.queues();
        if queues.contains_key(redis_key) {
            self.released_set().insert(redis_key.to_owned());
        }
    }

    fn released_set(&self) -> MutexGuard<'_, HashSet<String>> {
        // Inserts and removals only: a poisoned set is intact.
        self.released_here.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `redis_key` has waiters in this client.
    pub(crate) fn has_waiters(&self, redis_key: &str) -> bool {
        self.queues().contains_key(redis_key)
    }

    /// Keys that have waiters now.
    pub(crate) fn waited_keys(&self) -> Vec<String> {
        self.queues().keys().cloned().collect()
    }
}

/// A waiter's place in its key's queue.
#[derive(Debug)]
pub(crate) struct Ticket {
    queues: Arc<WaitQueues>,
    redis_key: String,
    waiter: Arc<Waiter>,
    subscriptions: Option<Arc<dyn Subscriptions>>,
    /// Pending confirmation of the key's subscription, for the waiter that asked for it.
    subscribed: Option<oneshot::Receiver<()>>,
    /// Whether leaving wakes the next waiter (not when leaving with the lock).
    pass_turn: bool,
}

impl Ticket {
    /// Waits (at most `limit`) until this waiter's subscription is confirmed, so that a
    /// release after the next attempt cannot go unannounced. Returns whether announcements
    /// can be relied on; when not, the waiter retries on a short timer instead.
    pub(crate) async fn subscribed(&mut self, limit: Duration) -> bool {
        if limit.is_zero() {
            return false;
        }
        match self.subscribed.take() {
            Some(confirmation) => {
                matches!(tokio::time::timeout(limit, confirmation).await, Ok(Ok(())))
            }
            // Another waiter of this client subscribed the key, or the feed is in-process.
            None => true,
        }
    }

    /// Leaves the queue after acquiring: the next waiter is not woken, since the lock is
    /// held now; the next release will wake it.
    pub(crate) fn leave_with_lock(mut self) {
        self.pass_turn = false;
    }

    /// Whether this waiter is the one that retries on the next announcement.
    pub(crate) fn is_head(&self) -> bool {
        self.queues
            .queues()
            .get(&self.redis_key)
            .and_then(|q| q.front())
            .is_some_and(|head| Arc::ptr_eq(head, &self.waiter))
    }

    /// Called by the head before it retries: when its own client was the one that released
    /// the key, it pauses briefly so that waiters of other clients, woken by the same
    /// announcement, get the first try. Without it the releasing client's next waiter, woken
    /// a little earlier in the same process, wins almost every handoff and starves the rest.
    pub(crate) async fn courtesy(&self) {
        if self.queues.released_set().remove(&self.redis_key) {
            tokio::time::sleep(COURTESY).await;
        }
    }

    /// Resolves when this waiter should try again: an announcement reached it as head, or it
    /// became head because the previous one left. A wake-up sent while this waiter was busy
    /// trying is kept, not lost.
    pub(crate) async fn woken(&self) {
        self.waiter.wake.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut queues = self.queues.queues();
        let Some(queue) = queues.get_mut(&self.redis_key) else {
            return;
        };
        {
            let was_head = queue
                .front()
                .is_some_and(|head| Arc::ptr_eq(head, &self.waiter));
            queue.retain(|w| !Arc::ptr_eq(w, &self.waiter));
            if queue.is_empty() {
                queues.remove(&self.redis_key);
                self.queues.released_set().remove(&self.redis_key);
                if let Some(subs) = &self.subscriptions {
                    subs.last_waiter_left(&self.redis_key);
                }
            } else {
                if was_head
                    && self.pass_turn
                    && let Some(next) = queue.front()
                {
                    // The departing head may have consumed an announcement it did not act
                    // on; the next one tries at once rather than wait for another.
                    next.wake.notify_one();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_head_is_woken_and_leaving_passes_the_turn() {
        let queues = Arc::new(WaitQueues::default());
        let first = queues.join("k", None);
        let second = queues.join("k", None);
        assert!(first.is_head() && !second.is_head());
        queues.released("k");
        first.woken().await; // the permit is kept even though nobody was waiting yet
        drop(first);
        assert!(second.is_head());
        second.woken().await; // passed on by the departing head
        drop(second);
        assert!(queues.waited_keys().is_empty());
    }
}
