//! The queue's wire vocabulary on the client's side: how a waiting request calls its lock's
//! queue in Redis ([`QueueAsk`], [`QueueCall`]), what withdrawing its entry needs
//! ([`QueueEntry`]; the entry itself is written by `protocol::entry`), and a release's
//! announcement naming the waiter it handed the lock to ([`Handoff`]).

use std::time::Duration;

use super::kind::Kind;

/// How a waiting request stands in its lock's queue in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueAsk {
    /// Never take the lock past a live waiter that queued earlier.
    pub(crate) fair: bool,
    /// Which of the waiter's calls this is.
    pub(crate) call: QueueCall,
}

/// A waiting request's call to its lock's queue in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueCall {
    /// Its first call: the acquire script looks at the lock, and queues the waiter if busy.
    Arrive,
    /// Its first call as one plain `RPUSHX` into the queue, if the queue exists, without
    /// looking at the lock: the client's waiters of the key are subscribed, and a queue means
    /// the lock is held or being handed on. (Without a queue, the acquire script runs as for
    /// [`Arrive`](Self::Arrive).) With `refresh`, it also renews the queue's expiry: each
    /// client does once per check interval while it waits, so that waiters served before
    /// their first check in keep the queue alive. (A script call always renews it.)
    Append { refresh: bool },
    /// It was queued before. A release may have handed it the lock already; it keeps its
    /// place, or stands in the queue again if its entry is gone (see WAITING.md).
    CheckIn,
}

impl QueueCall {
    /// Whether the call renews the queue's expiry.
    pub(crate) fn renews_queue(self) -> bool {
        match self {
            Self::Arrive | Self::CheckIn => true,
            Self::Append { refresh } => refresh,
        }
    }
}

/// A waiter's entry in its lock's queue in Redis, as far as withdrawing it needs: the kind it
/// waits for, the lease a release would hand it (from its ttl) and whether it is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueEntry {
    pub(crate) kind: Kind,
    pub(crate) ttl: Duration,
    pub(crate) fenced: bool,
}

/// A release's announcement naming the waiter it handed the lock to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handoff {
    /// The owner token of the waiter, now the lock's holder.
    pub(crate) token: String,
    /// The fencing token issued with it (when the waiter asked for one).
    pub(crate) fence: Option<u64>,
}

impl Handoff {
    /// Reads an announcement's payload: `"<token> <fence or 0>"` when a release handed the
    /// lock on; `None` for an announcement that only says "released" (Redlock, other
    /// versions).
    pub(crate) fn parse(payload: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?;
        let (token, fence) = text.split_once(' ')?;
        let fence: u64 = fence.parse().ok()?;
        Some(Self {
            token: token.to_owned(),
            fence: (fence > 0).then_some(fence),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Handoff;

    #[test]
    fn announcements_name_the_new_holder_or_nobody() {
        let handed = Handoff::parse(b"c0ffee:7 1700000000000001").unwrap();
        assert_eq!(handed.token, "c0ffee:7");
        assert_eq!(handed.fence, Some(1_700_000_000_000_001));
        assert_eq!(Handoff::parse(b"c0ffee:7 0").unwrap().fence, None);
        assert_eq!(Handoff::parse(b"1"), None);
        assert_eq!(Handoff::parse(b"t x"), None);
        assert_eq!(Handoff::parse(&[0xff, b' ', b'1']), None);
    }
}
