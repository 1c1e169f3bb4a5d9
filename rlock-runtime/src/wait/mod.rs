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

mod queues;
mod ticket;
pub(crate) mod timers;

pub(crate) use queues::WaitQueues;
pub(crate) use ticket::{Place, Ticket};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::{Backend, Handoff, QueueCall, ReleaseFeed, ReleaseListener, Standing};
    use crate::util::tuning::{SUBSCRIPTION_LINGER, WAITER_CHECK_INTERVAL};
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

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

    fn queued_first() -> Place {
        Place {
            queued: true,
            standing: Standing::Head,
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
        assert_eq!(ask.call, QueueCall::Arrive);
        first.answered(ask, now, queued_first());
        first.listen();
        queues.confirmed("k");
        let second = queues.join("k", "c:2".into());
        let ask = second.queue_ask(false, false, now);
        assert_eq!(
            ask.call,
            QueueCall::Arrive,
            "the last arrival made the queue: the script"
        );
        let crowded = Place {
            standing: Standing::Behind,
            ..queued_first()
        };
        second.answered(ask, now, crowded);
        let third = queues.join("k", "c:3".into());
        let ask = third.queue_ask(false, false, now);
        assert_eq!(
            ask.call,
            QueueCall::Append { refresh: false },
            "renewed a moment ago"
        );
        let later = now + WAITER_CHECK_INTERVAL;
        assert_eq!(
            third.queue_ask(false, false, later).call,
            QueueCall::Append { refresh: true },
            "a plain join renews the queue once per check interval"
        );
        assert_eq!(first.queue_ask(false, true, now).call, QueueCall::CheckIn);
        queues.feed_lost();
        assert_eq!(third.queue_ask(false, false, now).call, QueueCall::Arrive);
        drop((first, second, third));
    }

    /// A semaphore's waiter queued under a count set at run time (`Standing::Recounted`)
    /// makes its client's next waiter arrive through the script, which writes the entry
    /// under that count, whether an arrival or a check in was told so.
    #[tokio::test]
    async fn a_count_set_at_run_time_stops_plain_joins() {
        let queues = with_feed(Arc::new(Recorder::default()));
        let now = Instant::now();
        let behind = Place {
            standing: Standing::Behind,
            ..queued_first()
        };
        let recounted = Place {
            standing: Standing::Recounted,
            ..queued_first()
        };
        let first = queues.join("k", "c:1".into());
        first.listen();
        queues.confirmed("k");
        let ask = first.queue_ask(false, false, now);
        first.answered(ask, now, recounted);
        let second = queues.join("k", "c:2".into());
        assert_eq!(second.queue_ask(false, false, now).call, QueueCall::Arrive);
        let ask = second.queue_ask(false, false, now);
        second.answered(ask, now, behind);
        let third = queues.join("k", "c:3".into());
        assert!(matches!(
            third.queue_ask(false, false, now).call,
            QueueCall::Append { .. }
        ));
        let check_in = first.queue_ask(false, true, now);
        first.answered(check_in, now, behind);
        assert!(
            matches!(
                third.queue_ask(false, false, now).call,
                QueueCall::Append { .. }
            ),
            "a check in behind others changes nothing"
        );
        first.answered(check_in, now, recounted);
        assert_eq!(third.queue_ask(false, false, now).call, QueueCall::Arrive);
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
