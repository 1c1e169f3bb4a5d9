//! Every timing rule of the runtime, named in one place: how often leases are renewed, how
//! much safety margin the client keeps, how waiters and reconnections back off.
//!
//! Each value says why it is what it is; the logic elsewhere names these, never bare numbers.

use std::time::Duration;

/// A lease is renewed when a third of it has passed since the last renewal was sent (Redisson's
/// watchdog rule): two more tries fit in before it ends if one fails.
pub(crate) const RENEW_DIVISOR: u32 = 3;

/// A renewal round also takes every lease due within this fraction of its ttl (1/6), so that
/// thousands of leases share a few script calls instead of one timer each.
pub(crate) const RENEW_BATCH_WINDOW_DIVISOR: u32 = 6;

/// Most keys renewed by one script call (Redisson renews 100 per call). A round's last call
/// takes what is left, so a round of n leases is about n/256 + 1 calls: at most one call per
/// 200 held keys per renewal period once a client holds a few thousand. Redis runs a call
/// of 256 keys in about a third of a millisecond (two commands per key).
pub(crate) const RENEW_BATCH: usize = 256;

/// After a failed renewal, the next try comes after this fraction of the ttl (1/10)...
pub(crate) const RENEW_RETRY_DIVISOR: u32 = 10;
/// ...but no later than this, so that a long lease is retried often enough to heal.
pub(crate) const RENEW_RETRY_MAX: Duration = Duration::from_millis(500);

/// When the next renewal of a lease of `ttl` is due, counted from when the last one was sent.
pub(crate) fn renew_after(ttl: Duration) -> Duration {
    ttl / RENEW_DIVISOR
}

/// How early a renewal may go out to share a batch.
pub(crate) fn renew_window(ttl: Duration) -> Duration {
    ttl / RENEW_BATCH_WINDOW_DIVISOR
}

/// The pause before retrying a failed renewal.
pub(crate) fn renew_retry(ttl: Duration) -> Duration {
    (ttl / RENEW_RETRY_DIVISOR).min(RENEW_RETRY_MAX)
}

/// The client counts a lease as ending this much before `sent + ttl`: Redlock's drift
/// allowance (1 % of the lease plus 2 ms) for clock-rate differences between client and
/// server and for the watchdog's own scheduling delay, so that `lost()` fires before another
/// client can be granted the key, not after.
pub(crate) fn lease_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A renewal's reply is awaited at most this fraction of the shortest lease in its batch (1/2),
/// or the command timeout if shorter: a later answer could not save the lease, and a new
/// connection gets a chance before the lease ends.
pub(crate) const RENEW_REPLY_DIVISOR: u32 = 2;

/// Redlock: each master gets at most this fraction of the lease (1/10) to answer (and at most
/// the command timeout), so that one slow master cannot eat the lease's validity.
pub(crate) const REDLOCK_NODE_TIMEOUT_DIVISOR: u32 = 10;

/// `min_replicas`: Redis's `WAIT` is given this fraction of the command timeout (1/2), so that
/// its count of confirming replicas comes back before the client's own timeout.
pub(crate) const REPLICA_WAIT_DIVISOR: u32 = 2;

/// A waiter never retries sooner than this, so a lock changing hands quickly is not hammered.
pub(crate) const WAIT_MIN_PAUSE: Duration = Duration::from_millis(2);
/// Re-check interval of a waiter whose key's release announcements are not confirmed
/// (subscription pending or refused, pub/sub connection down): short, bounded polling.
pub(crate) const WAIT_POLL_PAUSE: Duration = Duration::from_millis(50);
/// Re-check interval when the holder's lease length is unknown (a key without expiry).
pub(crate) const WAIT_UNKNOWN_LEASE_PAUSE: Duration = Duration::from_millis(500);
/// A waiter woken by the holder's expiry (no announcement) tries at the expiry plus a jitter
/// of at most this fraction of the remaining lease (1/20)...
pub(crate) const WAIT_EXPIRY_JITTER_DIVISOR: u32 = 20;
/// ...and at most this, so that waiters of one expired key do not retry in lockstep, yet a
/// crashed holder delays them only milliseconds past its lease.
pub(crate) const WAIT_EXPIRY_JITTER_MAX: Duration = Duration::from_millis(5);
/// After a failed attempt (Redis restarting, a timeout) a waiter retries after this...
pub(crate) const WAIT_RETRY_MIN: Duration = Duration::from_millis(20);
/// ...doubling up to this, within its wait budget.
pub(crate) const WAIT_RETRY_MAX: Duration = Duration::from_millis(500);
/// Redlock: a waiting client marks the key as awaited until this long after the holder's
/// lease ends; releases announce themselves only while the mark lives. The waiter tries again
/// at the lease's end plus a few milliseconds (or sooner: it never sleeps longer than
/// [`WAIT_UNKNOWN_LEASE_PAUSE`]), and renews the mark then, well inside this slack.
pub(crate) const WAITERS_MARK_SLACK: Duration = Duration::from_secs(1);

/// The longest wait budget counted: a longer one (`Duration::MAX` for "until granted")
/// is this one, thirty years, which any `Instant` can still be moved by.
pub(crate) const WAIT_FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// A lock's queue in Redis lasts this long unless its waiters' calls refresh it, so that the
/// queue of waiters that all went away (and whose lock nobody released) does not stay behind.
pub(crate) const WAITERS_QUEUE_LEASE: Duration = Duration::from_secs(2);
/// A queued waiter checks in every third of the queue's lease, and one call of each client in
/// that time refreshes the queue (which so lives through a missed check); a check also tries
/// if the lock is free with nobody told.
pub(crate) const WAITER_CHECK_INTERVAL: Duration = Duration::from_millis(666);
/// The lease a release gives the waiter it hands the lock to (or the waiter's ttl, if
/// shorter). Short, so that a waiter whose process hangs (still subscribed: a dead one is
/// skipped) blocks the lock only briefly; the waiter counts it from its last check in, and
/// renews it to its ttl soon after.
pub(crate) const HANDOFF_LEASE: Duration = Duration::from_secs(2);
/// Most entries in one lock's queue; a waiter beyond them waits unqueued, on timers.
pub(crate) const WAITERS_QUEUE_MAX: u32 = 10_000;

/// How long a head waiter defers to other clients after its own client released the key:
/// about a pub/sub delivery plus a round trip on a local network.
pub(crate) const WAIT_COURTESY: Duration = Duration::from_millis(1);

/// A key's release channel stays subscribed this long after its last waiter left, so that a
/// client waiting for the same key again and again does not subscribe and unsubscribe (two
/// commands, and a confirmation to wait for) on every wait.
pub(crate) const SUBSCRIPTION_LINGER: Duration = Duration::from_millis(500);

/// The release feed's first pause after a failure, doubling...
pub(crate) const FEED_RETRY_MIN: Duration = Duration::from_millis(50);
/// ...up to this.
pub(crate) const FEED_RETRY_MAX: Duration = Duration::from_secs(1);
/// While the feed is subscribed to anything, it sends a `PING` this often: a pub/sub
/// connection only listens, so without it a silently dead TCP flow would never be noticed.
pub(crate) const FEED_HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// An acquisition or release whose reply never came is re-sent in the background: first at
/// once, then after this pause, doubling...
pub(crate) const ORPHAN_RETRY_MIN: Duration = Duration::from_millis(50);
/// ...up to this...
pub(crate) const ORPHAN_RETRY_MAX: Duration = Duration::from_millis(500);
/// ...until it is answered: a release's at once, an acquisition's once Redis has answered
/// for this long (its `SET`, sent on another connection or waiting in a stopped Redis's input,
/// may run after the first answer), unless "ours" proved that it ran...
pub(crate) const ORPHAN_SETTLE: Duration = Duration::from_secs(1);
/// ...or after this long without an answer: a Redis down that long was restarted or is gone,
/// and its input with it.
pub(crate) const ORPHAN_HORIZON: Duration = Duration::from_secs(5 * 60);

/// Redis Cluster: the cluster client re-sends a command that met `TRYAGAIN`, `CLUSTERDOWN` or
/// a lost node at most this many times itself (redirects count too)...
pub(crate) const CLUSTER_RETRIES: u32 = 4;
/// ...pausing between this many milliseconds...
pub(crate) const CLUSTER_RETRY_MIN_MS: u64 = 5;
/// ...and this many, so that its retries end well inside one command timeout and the error
/// reaches rlock, which knows the lease's and the waiter's deadlines (the driver's own
/// default starts at 1.28 s, longer than many leases' renewal period).
pub(crate) const CLUSTER_RETRY_MAX_MS: u64 = 50;

/// The doubling backoff `min · 2^(attempt-1)`, at most `max`.
pub(crate) fn backoff(min: Duration, max: Duration, attempt: u32) -> Duration {
    min.saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(max)
}

/// How often a client's holder card is brought up to date, and how long a hold must have
/// lasted to be listed on it (shorter ones end before an operator could ask).
pub(crate) const CARD_PASS: Duration = Duration::from_secs(1);
/// A holder card's lease: how long it outlives a client that died (three passes).
pub(crate) const CARD_LEASE: Duration = Duration::from_secs(3);
/// Most holds one card lists (the longest-held first), so that a client holding a great
/// many locks posts a bounded card.
pub(crate) const CARD_MAX_HOLDS: usize = 1_000;
/// Most holds added to a card in one post (the rest at the next pass): one script call's
/// arguments stay well inside what Lua's `unpack` takes.
pub(crate) const CARD_BATCH: usize = 500;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_stops_at_the_cap() {
        let ms = Duration::from_millis;
        let steps: Vec<_> = (1..=6).map(|a| backoff(ms(20), ms(500), a)).collect();
        assert_eq!(steps, [ms(20), ms(40), ms(80), ms(160), ms(320), ms(500)]);
        assert_eq!(backoff(ms(20), ms(500), 1000), ms(500));
    }

    #[test]
    fn the_margin_keeps_the_client_lease_inside_the_server_lease() {
        let ttl = Duration::from_secs(30);
        assert_eq!(lease_margin(ttl), Duration::from_millis(302));
        assert!(renew_after(ttl) + renew_window(ttl) < ttl - lease_margin(ttl));
    }
}
