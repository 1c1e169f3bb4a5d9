//! What a successful acquisition hands back: the hold, its fencing token and its lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use uuid::Uuid;

use crate::client::{LockClient, ReleaseOnDrop, check_ttl};
use crate::error::LockError;
use crate::fence::Fence;
use crate::key::LockKey;
use crate::metrics::Count;

/// One hold of one key, shared by the outer guard and every reentrant guard of it.
#[derive(Debug)]
pub(crate) struct HeldLock {
    /// Identifies the hold in the client's watchdog.
    lease_id: u64,
    client: LockClient,
    key: LockKey,
    redis_key: String,
    token: String,
    fence: Option<Fence>,
    /// Guards alive for this hold; the one that takes it to zero deletes the lock.
    holds: AtomicUsize,
    /// Becomes `true`, once, when the lease is known lost.
    lost: watch::Sender<bool>,
}

impl HeldLock {
    pub(crate) fn new(
        client: LockClient,
        key: LockKey,
        redis_key: String,
        token: String,
        fence: Option<Fence>,
    ) -> Arc<Self> {
        Arc::new(Self {
            lease_id: crate::renew::next_lease_id(),
            client,
            key,
            redis_key,
            token,
            fence,
            holds: AtomicUsize::new(1),
            lost: watch::Sender::new(false),
        })
    }

    pub(crate) fn client_id(&self) -> Uuid {
        self.client.id()
    }

    pub(crate) fn redis_key(&self) -> &str {
        &self.redis_key
    }

    pub(crate) fn fence(&self) -> Option<Fence> {
        self.fence
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn lease_id(&self) -> u64 {
        self.lease_id
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Records that the lease is gone; the first call counts it and wakes `lost()` waiters.
    pub(crate) fn mark_lost(&self) {
        // Counted inside the update, before the waiters of `lost()` are woken.
        let first = self.lost.send_if_modified(|lost| {
            if *lost {
                return false;
            }
            *lost = true;
            self.client.shared().counters.add(Count::Lost, 1);
            true
        });
        if first {
            crate::trace::warn_event!(
                key = self.key.as_str(),
                fence = ?self.fence,
                "rlock: lease lost"
            );
        }
    }

    /// One more guard for this hold (reentry).
    pub(crate) fn add_hold(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// One guard fewer; `true` when it was the last, so the lock must now be deleted (and
    /// the watchdog stops renewing it).
    fn drop_hold(&self) -> bool {
        let last = self.holds.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.client.shared().leases.forget(self.lease_id);
        }
        last
    }

    fn lost_error(&self) -> LockError {
        LockError::Lost {
            key: self.key.as_str().to_owned(),
        }
    }
}

/// Proof that this task holds a lock. Release it with [`release`](Self::release) to learn
/// whether the lease was still ours; dropping it releases in the background.
///
/// A guard taken inside a body that already holds the same key (same client, same task call
/// chain) is *reentrant*: it shares the outer hold, costs no Redis command, and releasing it
/// only decrements the hold count. The lock is deleted when the last guard of the hold goes.
///
/// Dropping an unreleased guard (an early `return`, a panic, a cancelled future) spawns the
/// release on the current Tokio runtime; outside a runtime the lease simply expires. `Drop`
/// never blocks.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let guard = client.lock("invoice:9").acquire().await?;
/// assert_eq!(guard.key().as_str(), "invoice:9");
/// guard.release().await?; // Err(LockError::Lost { .. }) if the lease had ended
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    lock: Arc<HeldLock>,
    reentrant: bool,
    finished: bool,
}

impl LockGuard {
    pub(crate) fn new(lock: Arc<HeldLock>, reentrant: bool) -> Self {
        Self {
            lock,
            reentrant,
            finished: false,
        }
    }

    pub(crate) fn shared(&self) -> Arc<HeldLock> {
        self.lock.clone()
    }

    /// The lock key (without the client's namespace).
    pub fn key(&self) -> &LockKey {
        &self.lock.key
    }

    /// The fencing token of this hold, if it was asked for (`fenced`, or `fence = …` on the
    /// attribute). A reentrant guard shares the outer hold's.
    pub fn fence(&self) -> Option<Fence> {
        self.lock.fence
    }

    /// The owner token stored in Redis under the key.
    pub fn token(&self) -> &str {
        &self.lock.token
    }

    /// Whether this guard re-entered a hold of the same task's call chain.
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// Whether the lease is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// Resolves once the lease can no longer be counted on: a renewal or release found
    /// another owner (or none); the last confirmed renewal is a full ttl old with no renewal
    /// on its way (Redis unreachable, this process paused), or one on its way went unanswered
    /// for half the shortest lease of its batch; a lease without renewal reached its end; or
    /// `max_hold` passed (the hold is then released). It may fire while Redis still holds the
    /// key (the client cannot prove it does); it does not fire while renewals succeed.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let guard = client.lock("report").ttl(Duration::from_millis(50)).renew(false).acquire().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(5)) => println!("work done"),
    ///     () = guard.lost() => println!("stopped: the lease ended"),
    /// }
    /// assert!(guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let mut rx = self.lock.lost.subscribe();
        // The sender lives in `self.lock`, which outlives this borrow, so this cannot close.
        let _ = rx.wait_for(|lost| *lost).await;
    }

    /// Sets the lease to `ttl` from now, if the lock is still ours.
    ///
    /// Returns [`LockError::Lost`] when another owner holds the key or it expired.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let guard = client.lock("batch").ttl(Duration::from_secs(5)).renew(false).acquire().await?;
    /// guard.extend(Duration::from_secs(60)).await?; // the job needs longer than planned
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let lock = &self.lock;
        if lock.is_lost() {
            return Err(lock.lost_error());
        }
        check_ttl(&lock.key, ttl)?;
        let sent_at = tokio::time::Instant::now();
        if lock
            .client
            .extend_raw(&lock.redis_key, &lock.token, ttl)
            .await?
        {
            lock.client
                .shared()
                .leases
                .extended(lock.lease_id, ttl, sent_at);
            Ok(())
        } else {
            lock.mark_lost();
            Err(lock.lost_error())
        }
    }

    /// Releases this hold. The last guard of a hold deletes the key, and only if it still
    /// holds our token (compare-and-delete in one Lua script).
    ///
    /// Returns [`LockError::Lost`] when the lease had already ended: the key expired, or
    /// another owner holds it now and was left untouched.
    ///
    /// ```
    /// use rlock_runtime::{LockClient, LockError};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let client = LockClient::in_memory();
    /// let guard = client.lock("k").ttl(Duration::from_millis(20)).renew(false).acquire().await.unwrap();
    /// tokio::time::sleep(Duration::from_millis(50)).await; // longer than the lease
    /// assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        self.finished = true;
        let lock = &self.lock;
        if !lock.drop_hold() {
            return Ok(());
        }
        // If this future is dropped while the release is on its way, or the release fails,
        // it is sent again in the background: a dropped future leaves no lock behind.
        let mut pending = ReleaseOnDrop {
            client: &lock.client,
            redis_key: &lock.redis_key,
            token: &lock.token,
            armed: true,
        };
        let released = lock.client.release_raw(&lock.redis_key, &lock.token).await;
        pending.armed = released.is_err();
        drop(pending);
        if released? {
            Ok(())
        } else {
            lock.mark_lost();
            Err(lock.lost_error())
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.finished && self.lock.drop_hold() {
            let lock = &self.lock;
            lock.client
                .release_in_background(lock.redis_key.clone(), lock.token.clone());
        }
    }
}
