//! Looking at a lock from outside, and breaking it: Redisson's `isLocked`,
//! `remainTimeToLive` and `forceUnlock`, redis-py's `locked()` and `owned()`.

use std::time::Duration;

use crate::api::client::LockClient;
use crate::backend::{Kind, Lease, LeaseStore};
use crate::error::LockError;
use crate::key::IntoLockKey;
use crate::metrics::Count;

/// What [`LockClient::inspect`] found about one lock.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// assert!(!client.inspect("order:7").await?.held);
/// let guard = client.lock("order:7").acquire().await?;
/// let info = client.inspect("order:7").await?;
/// assert!(info.held && info.held_here);
/// assert_eq!(info.hold_count, 1);
/// assert!(info.remaining.is_some_and(|left| !left.is_zero()));
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockInfo {
    /// Someone holds the lock: this client, another instance, or a client that is not rlock.
    pub held: bool,
    /// What is left of the holder's lease, when it has one (as Redis counts it now).
    pub remaining: Option<Duration>,
    /// This client holds it (the token in Redis is one of this client's live holds).
    pub held_here: bool,
    /// How many guards of this client share the hold: 1, plus one per reentry; 0 when the
    /// lock is not held here.
    pub hold_count: usize,
}

impl LockClient {
    /// Reads whether `key` is locked, by whom (this client or not) and for how long, in one
    /// atomic read: one round trip (Redlock: one to each master, and a majority must agree
    /// on the holder). A snapshot: by the time it returns, the lock may have changed hands.
    /// For deciding, take the lock (`acquire` with no wait), do not inspect first.
    ///
    /// See [`LockInfo`] for an example.
    pub async fn inspect(&self, key: impl IntoLockKey) -> Result<LockInfo, LockError> {
        let key = key.into_lock_key()?;
        let redis_key = self.redis_key(&key);
        let engine = &self.shared().engine;
        let holder = engine.backend.inspect(Kind::Lock, &redis_key).await?;
        let ours = holder.token.as_deref().and_then(|token| {
            engine
                .watchdog
                .holds_of(&redis_key)
                .into_iter()
                .find(|hold| hold.token() == token && !hold.is_lost())
        });
        Ok(LockInfo {
            held: holder.token.is_some(),
            remaining: holder.remaining,
            held_here: ours.is_some(),
            hold_count: ours.map_or(0, |hold| hold.guard_count()),
        })
    }

    /// **Dangerous**: deletes `key`'s lock whoever holds it, as Redisson's `forceUnlock`
    /// does; `Ok(true)` when a lock was deleted. The next waiter queued for it is handed the
    /// lock, as on a release. The holder is not told: if it is in this client, its hold is
    /// marked lost at once (its `lost()` fires); anywhere else it finds out at its next
    /// renewal (its lease lost), and until then two holders may run. For an operator
    /// clearing a lock whose holder is known to be gone, not for normal flow.
    ///
    /// Counted in [`LockMetrics::forced_unlocks`](crate::LockMetrics::forced_unlocks) and
    /// logged as a warning with the key.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let ops = LockClient::in_memory();
    /// let stuck = ops.sibling();
    /// let guard = stuck.lock("report:daily").acquire().await?;
    /// assert!(ops.force_unlock("report:daily").await?);
    /// assert!(!ops.inspect("report:daily").await?.held);
    /// assert_eq!(ops.metrics().forced_unlocks, 1);
    /// assert!(guard.release().await.unwrap_err().is_lost());
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self, key: impl IntoLockKey) -> Result<bool, LockError> {
        let key = key.into_lock_key()?;
        let redis_key = self.redis_key(&key);
        let engine = &self.shared().engine;
        let Some(token) = engine.backend.inspect(Kind::Lock, &redis_key).await?.token else {
            return Ok(false);
        };
        let lease = Lease {
            kind: Kind::Lock,
            key: &redis_key,
            token: &token,
            ttl: Duration::ZERO,
        };
        // A release under the holder's own token: it deletes nothing if the lock changed
        // hands since the read, and hands the lock to the next queued waiter if it did not.
        let deleted = engine.backend.release(lease, false).await?;
        if deleted {
            engine.counters.add(Count::ForcedUnlock, 1);
            crate::util::trace::warn_event!(key = key.as_str(), "rlock: lock forcibly unlocked");
            for hold in engine.watchdog.holds_of(&redis_key) {
                if hold.token() == token {
                    hold.lose();
                }
            }
        }
        Ok(deleted)
    }
}
