//! The one error type of rlock.

use std::time::Duration;

/// The boxed cause of a backend failure (a `redis::RedisError` for the Redis backends).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while locking.
///
/// Every message says what happened and what to do about it. Functions annotated with
/// `#[distributed_lock]` return it through their own error type (`E: From<LockError>`).
///
/// ```
/// use rlock_runtime::{LockClient, LockError};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let _held = client.lock("stock:7").acquire().await.unwrap();
/// match client.lock("stock:7").acquire().await {
///     Err(LockError::Busy { key, .. }) => assert_eq!(key, "stock:7"),
///     other => panic!("expected busy, got {other:?}"),
/// }
/// # }
/// ```
///
/// A failure with a cause (a [`LockError::Unavailable`]) keeps the cause as its
/// [`source`](std::error::Error::source) and out of its message, so that a report printing
/// the whole chain (anyhow's `{:#}`, an error recorded as a `tracing` field) names it once:
///
/// ```
/// use rlock_runtime::{LockError, Operation};
/// use std::error::Error as _;
///
/// let err = LockError::Unavailable {
///     operation: Operation::Acquire,
///     source: "connection refused".into(),
/// };
/// assert!(!err.to_string().contains("connection refused"));
/// assert_eq!(err.source().map(|cause| cause.to_string()).as_deref(), Some("connection refused"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the lock and the wait budget ran out.
    #[error(
        "lock `{key}` is held by another owner (gave up after waiting {waited:?}); \
         retry later, or allow waiting with `wait = \"…\"`"
    )]
    Busy {
        /// The lock key, without the client's namespace.
        key: String,
        /// How long this call waited before giving up.
        waited: Duration,
    },

    /// The lease ended while we believed we held it: it expired, or another owner took it.
    #[error(
        "the lease on lock `{key}` was lost (it expired or another owner took it); \
         work done under it may overlap another holder's, so use the fencing token or retry"
    )]
    Lost {
        /// The lock key, without the client's namespace.
        key: String,
    },

    /// Redis did not answer within the per-command timeout.
    #[error(
        "Redis did not answer `{operation}` within {timeout:?}; check that the server is up \
         and reachable, or raise the client's command timeout"
    )]
    Timeout {
        /// What rlock was doing.
        operation: Operation,
        /// The timeout that elapsed.
        timeout: Duration,
    },

    /// Redis answered with an error or the connection failed.
    ///
    /// The driver's error is the [`source`](std::error::Error::source), not part of the
    /// message, so a report that prints the chain shows it once.
    #[error(
        "Redis is unavailable during `{operation}`; check that the server is up and that the \
         client's URL points at it"
    )]
    Unavailable {
        /// What rlock was doing.
        operation: Operation,
        /// The driver's error.
        #[source]
        source: BoxError,
    },

    /// Redlock: too many masters failed to answer for a majority to grant the lock in time.
    /// (Only the Redlock backend returns it; a majority that answered "held by another
    /// owner" is [`LockError::Busy`].)
    #[error(
        "lock `{key}` reached {granted} of the {needed} masters it needs; \
         another owner holds it or the masters are unreachable"
    )]
    QuorumNotReached {
        /// The lock key, without the client's namespace.
        key: String,
        /// How many masters granted the lock.
        granted: usize,
        /// The majority required.
        needed: usize,
    },

    /// Fewer replicas than `min_replicas` confirmed the grant within the command timeout;
    /// the lock was released again.
    #[error(
        "lock `{key}` was granted but only {acked} of the {needed} replicas it needs confirmed \
         it in time, so it was released; check the replicas' health and lag, or lower \
         `min_replicas`"
    )]
    NotReplicated {
        /// The lock key, without the client's namespace.
        key: String,
        /// How many replicas confirmed the grant.
        acked: u32,
        /// How many were required.
        needed: u32,
    },

    /// No client was given and none was installed.
    #[error(
        "no lock client is configured; call `rlock_runtime::install(LockClient::connect(url).await?)` \
         at start-up, or pass one with `client = …`"
    )]
    NotConfigured,

    /// The key is empty, too long, or otherwise unusable.
    #[error("invalid lock key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key (shortened when very long).
        key: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// A locked read scope of `key` (an annotated function, `run`, `with_lock`) asked for its
    /// write lock: that would wait for its own read lock forever, so it is refused at once.
    /// A read lock is never upgraded; take the write lock outside the read scope (a write
    /// holder may take the read lock: a downgrade).
    #[error(
        "a scope that holds the read lock of `{key}` asked for its write lock, which would \
         wait for that read lock forever; take the write lock outside the read scope (a read \
         lock is never upgraded)"
    )]
    WouldDeadlock {
        /// The lock key, without the client's namespace.
        key: String,
    },

    /// The key holds another kind of thing than the request asks for: a name is one kind
    /// (a lock, a semaphore or a read-write lock), never two at once. Redis was not changed;
    /// nothing was granted. Name the two things apart, or wait until every holder of the
    /// other kind is gone (the name is free again then).
    ///
    /// ```
    /// use rlock_runtime::{KeyKind, LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let client = LockClient::in_memory();
    /// let _permit = client.semaphore("export:acme", 2).acquire().await.unwrap();
    /// match client.lock("export:acme").acquire().await {
    ///     Err(LockError::WrongKind { asked, found, .. }) => {
    ///         assert_eq!((asked, found), (KeyKind::Lock, KeyKind::Semaphore));
    ///     }
    ///     other => panic!("expected the other kind refused, got {other:?}"),
    /// }
    /// # }
    /// ```
    #[error(
        "`{key}` holds a {found}, and this request asks for a {asked}: a name is one kind \
         of thing, so nothing was taken; give the {asked} a name of its own"
    )]
    WrongKind {
        /// The key, without the client's namespace.
        key: String,
        /// What the request asked for.
        asked: KeyKind,
        /// What the key holds.
        found: KeyKind,
    },

    /// A client option or URL is unusable.
    #[error("invalid lock client configuration: {0}")]
    InvalidConfig(String),

    /// Once-only work (`LockClient::once`) computed its result, which could not be shared
    /// with the other callers: larger than the request's `max_size`, or not serializable.
    /// Nothing was stored; the next caller computes again.
    #[error("the result of once-only work `{key}` was not shared: {reason}")]
    ResultNotShared {
        /// The work's key, without the client's namespace.
        key: String,
        /// Why: its size against the limit, or the serializer's error.
        reason: String,
    },
}

/// What a key holds, as [`LockError::WrongKind`] names it.
///
/// ```
/// use rlock_runtime::KeyKind;
///
/// assert_eq!(KeyKind::ReadWriteLock.to_string(), "read-write lock");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// A lock (`lock`, `lock_all`, `#[distributed_lock]`), or another client's `SET NX PX`
    /// lock: a string under the key.
    Lock,
    /// A semaphore's permits.
    Semaphore,
    /// A read-write lock's readers and writer.
    ReadWriteLock,
    /// Data rlock did not write (a hash, a list, a sorted set without rlock's mark, …).
    Other,
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::ReadWriteLock => "read-write lock",
            Self::Other => "value rlock did not write",
        })
    }
}

/// What rlock was doing when Redis failed to answer it or refused it, as
/// [`LockError::Timeout`] and [`LockError::Unavailable`] report it.
///
/// ```
/// use rlock_runtime::{LockError, Operation};
/// use std::time::Duration;
///
/// let err = LockError::Timeout { operation: Operation::Acquire, timeout: Duration::from_secs(2) };
/// assert!(err.to_string().contains("`acquire`"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Opening a connection (and loading the scripts).
    Connect,
    /// Taking a lock, or waiting for it.
    Acquire,
    /// Releasing a lock (handing it to the next waiter, if one is queued).
    Release,
    /// A waiter leaving the queue.
    Withdraw,
    /// The watchdog renewing leases.
    Renew,
    /// Setting a lease's length (`LockGuard::extend`).
    Extend,
    /// Reading a lock's holder (`inspect`, `force_unlock`).
    Inspect,
    /// Waiting for replicas to confirm a grant (`min_replicas`).
    ConfirmReplicas,
    /// Posting the client's holder card, which names it to operators' tools (in the
    /// background; never a lock's error).
    PostCard,
    /// Reading the shared result of once-only work.
    ReadResult,
    /// Storing the shared result of once-only work.
    StoreResult,
    /// Changing a semaphore's count at run time (`set_permits`, `add_permits`,
    /// `clear_permits`).
    SetPermits,
    /// Trying what the server allows (`LockClient::diagnose`).
    Diagnose,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::Acquire => "acquire",
            Self::Release => "release",
            Self::Withdraw => "withdraw",
            Self::Renew => "renew",
            Self::Extend => "extend",
            Self::Inspect => "inspect",
            Self::ConfirmReplicas => "wait for replicas",
            Self::PostCard => "post the holder card",
            Self::ReadResult => "read a shared result",
            Self::StoreResult => "store a shared result",
            Self::SetPermits => "set a semaphore's permits",
            Self::Diagnose => "diagnose",
        })
    }
}

impl LockError {
    /// Whether the lock was held by someone else ([`LockError::Busy`]).
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Busy { .. })
    }

    /// Whether the lease was lost ([`LockError::Lost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }

    /// Whether the backend failed (timeout, unavailable, too few masters or replicas);
    /// retrying later may help.
    pub fn is_backend(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. }
                | Self::Unavailable { .. }
                | Self::QuorumNotReached { .. }
                | Self::NotReplicated { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Every message of the chain, outermost first, as error reports print them.
    fn chain(err: &LockError) -> Vec<String> {
        let mut messages = vec![err.to_string()];
        let mut next = err.source();
        while let Some(cause) = next {
            messages.push(cause.to_string());
            next = cause.source();
        }
        messages
    }

    #[test]
    fn a_cause_is_the_source_and_not_repeated_in_the_message() {
        let err = LockError::Unavailable {
            operation: Operation::Acquire,
            source: "connection refused (os error 111)".into(),
        };
        let message = err.to_string();
        assert!(!message.contains("connection refused"), "{message}");
        assert!(message.contains("`acquire`"), "{message}");
        assert!(message.contains("check that the server is up"), "{message}");
        assert_eq!(
            err.source().map(ToString::to_string).as_deref(),
            Some("connection refused (os error 111)")
        );
        let report = chain(&err).join(": ");
        assert_eq!(report.matches("connection refused").count(), 1, "{report}");
    }
}
