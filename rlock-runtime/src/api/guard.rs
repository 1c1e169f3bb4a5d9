//! What a successful acquisition hands back: a handle on the hold, its fencing token and its
//! lease. The hold itself (its state, renewal, loss) lives in the lease engine.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Kind;
use crate::error::LockError;
use crate::key::LockKey;
use crate::lease::Hold;
use crate::lease::acquisition::take_beside;
use crate::lease::plan::{check_min_hold, check_ttl};
use crate::util::fence::Fence;
use crate::util::tuning::WAIT_FOREVER;

/// Proof that this task holds a lock. Release it with [`release`](Self::release) to learn
/// whether the lease was still ours; dropping it releases in the background.
///
/// A guard taken inside a body that already holds the same key (same client, same task call
/// chain) is *reentrant*: it shares the outer hold, costs no Redis command, and releasing it
/// only decrements the hold count. The lock is deleted when the last guard of the hold goes.
///
/// Dropping an unreleased guard (an early `return`, a panic, a cancelled future) releases
/// it in the background, on rlock's own background thread, so it works inside or outside any
/// runtime. `Drop` never blocks.
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
    lock: Arc<Hold>,
    /// The other keys' holds of a [`lock_all`](crate::LockClient::lock_all), in the order
    /// they were taken after the first.
    also: Vec<Arc<Hold>>,
    reentrant: bool,
    finished: bool,
}

impl LockGuard {
    pub(crate) fn new(lock: Arc<Hold>, reentrant: bool) -> Self {
        Self {
            lock,
            also: Vec::new(),
            reentrant,
            finished: false,
        }
    }

    /// One guard over every hold of `guards` (at least one), taken in that order.
    pub(crate) fn all_of(guards: Vec<LockGuard>) -> Option<Self> {
        let reentrant = guards.iter().all(|g| g.reentrant);
        let mut holds = guards.into_iter().map(LockGuard::into_hold);
        let lock = holds.next()?;
        Some(Self {
            lock,
            also: holds.collect(),
            reentrant,
            finished: false,
        })
    }

    /// Its one hold, handed over without releasing it (of a `lock_all`, the first key's).
    pub(crate) fn into_hold(mut self) -> Arc<Hold> {
        self.finished = true;
        self.lock.clone()
    }

    /// Every hold of the guard: one, or one per key of a `lock_all`.
    pub(crate) fn holds(&self) -> impl DoubleEndedIterator<Item = &Arc<Hold>> {
        std::iter::once(&self.lock).chain(&self.also)
    }

    /// The lock key (without the client's namespace); of a
    /// [`lock_all`](crate::LockClient::lock_all), the first in the order they were taken.
    pub fn key(&self) -> &LockKey {
        self.lock.key()
    }

    /// Every key held (one, or each key of a [`lock_all`](crate::LockClient::lock_all), in
    /// the order they were taken).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let both = client.lock_all(["account:2", "account:1"]).acquire().await?;
    /// let keys: Vec<&str> = both.keys().map(|k| k.as_str()).collect();
    /// assert_eq!(keys, ["account:1", "account:2"]);
    /// # Ok(()) }
    /// ```
    pub fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.holds().map(|hold| hold.key())
    }

    /// The fencing token of this hold, if it was asked for (`fenced`, or `fence = …` on the
    /// attribute). A reentrant guard shares the outer hold's.
    pub fn fence(&self) -> Option<Fence> {
        self.lock.fence()
    }

    /// The owner token stored in Redis under the key.
    pub fn token(&self) -> &str {
        self.lock.token()
    }

    /// Whether this guard re-entered a hold of the same task's call chain.
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// Whether the lease is known to be lost (of a `lock_all`, any key's).
    pub fn is_lost(&self) -> bool {
        self.holds().any(|hold| hold.is_lost())
    }

    /// Resolves once the lease can no longer be counted on: a renewal, extend or release
    /// found another owner (or none); the client's lower bound of the lease's end passed
    /// without a renewal proving it longer (Redis unreachable or slow, this process paused,
    /// renewal off), even if a renewal is still on its way; or `max_hold` passed (the hold is
    /// then released). It fires before another client can have been granted the key, as far
    /// as this process's clock can tell; it may fire while Redis still holds the key (the
    /// client cannot prove it does); it does not fire while renewals succeed.
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
        self.lost_owned().await;
    }

    /// What [`lost`](Self::lost) waits for, without borrowing the guard (a locked body's
    /// run keeps it beside the guard).
    pub(crate) fn lost_owned(&self) -> impl Future<Output = ()> + Send + 'static {
        let (lock, also) = (self.lock.clone(), self.also.clone());
        async move {
            if also.is_empty() {
                return lock.lost().await;
            }
            // Of a `lock_all`, the first key's loss.
            let each = std::iter::once(&lock)
                .chain(&also)
                .map(|hold| Box::pin(hold.lost()));
            futures_util::future::select_all(each).await;
        }
    }

    /// Sets the lease to `ttl` from now, if the lock is still ours; later renewals ask for
    /// `ttl` too. If a renewal is on its way, it waits for its reply first (at most one
    /// request changes a lease at a time). From the moment it is sent, the client counts the
    /// lease as ending no later than `ttl` from then (it may shorten the lease); if its reply
    /// never comes, `ttl` caps the client's estimate for the rest of the hold, since the
    /// extend may still land.
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
        check_ttl(self.lock.key(), ttl)?;
        for hold in self.holds() {
            hold.extend(ttl).await?;
        }
        Ok(())
    }

    /// Keeps the key taken at least `at_least` from now, even when released sooner
    /// (ShedLock's `extend(lockAtMostFor, lockAtLeastFor)`, whose first half is
    /// [`extend`](Self::extend)): a job that found more to do, or that wants the next run
    /// skipped for longer, moves its [`min_hold`](crate::LockRequest::min_hold) on. It never
    /// shortens an earlier one, costs no round trip (the release sets what is left of it as
    /// the key's lease, as for `min_hold`), and keeps every key of a `lock_all`.
    ///
    /// [`LockError::Lost`] when the lease is lost; `InvalidConfig` for more than
    /// [`MAX_TTL`](crate::MAX_TTL), or past the guard's `max_hold`.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let run = client.lock("job:nightly").acquire().await?;
    /// // The job ran; the next scheduled start (in 10 minutes) must skip this time.
    /// run.extend_min_hold(Duration::from_secs(15 * 60))?;
    /// run.release().await?;
    /// assert!(client.lock("job:nightly").acquire().await.unwrap_err().is_busy());
    /// # Ok(()) }
    /// ```
    pub fn extend_min_hold(&self, at_least: Duration) -> Result<(), LockError> {
        check_min_hold(self.lock.key(), at_least, None)?;
        for hold in self.holds() {
            hold.extend_min_hold(at_least)?;
        }
        Ok(())
    }

    /// Takes the read lock of this write guard's key beside it (a downgrade, as Redisson's
    /// `RReadWriteLock` allows its writer): granted at once, with this hold's ttl and
    /// renewal, and kept on its own once the write is released. The right goes with the
    /// guard: whichever task has the guard may downgrade, and nobody else's writer can be
    /// beside it. (Inside a locked write scope, asking for the key's read lock is the same
    /// downgrade.) [`LockError::Lost`] when the write lease is lost; `InvalidConfig` for a
    /// guard that is not one write lock.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let writer = client.write_lock("config:42").acquire().await?;
    /// // ... write the new config ...
    /// let reader = writer.downgrade().await?;
    /// writer.release().await?;
    /// // ... read it back, while other readers may come in, and no writer ...
    /// assert!(client.sibling().write_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(&self) -> Result<LockGuard, LockError> {
        if self.lock.kind() != Kind::Write || !self.also.is_empty() {
            return Err(LockError::InvalidConfig(format!(
                "`{}` is held as a {}, not as a write lock: only a write guard downgrades",
                self.key(),
                self.lock.kind().name()
            )));
        }
        let read = take_beside(&self.lock, Kind::Read, Duration::ZERO).await?;
        Ok(LockGuard::new(read, false))
    }

    /// Takes the write lock beside this upgradeable read (an upgrade), waiting until the
    /// other readers are gone: no other writer comes between (none can be granted while this
    /// read holds, and the upgrade stands first in the queue), and no new reader comes in
    /// while it waits. The write lease is one of its own, always fenced, with this hold's
    /// ttl, renewal and cap; when it is released, this read still holds, as it did before
    /// (upgrade again at will). The upgradeable read is not given up meanwhile: release both
    /// guards, in either order, to free the lock.
    ///
    /// Waits as long as the readers hold: until granted, or [`LockError::Lost`] once this
    /// read is lost; [`upgrade_within`](Self::upgrade_within) bounds the wait. Refused with
    /// [`LockError::InvalidConfig`] on a guard that is not one upgradeable read lock.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let config = client.upgradeable_read_lock("config:42").acquire().await?;
    /// // ... read, and decide that the config must change ...
    /// let write = config.upgrade().await?;
    /// assert!(write.fence().is_some());
    /// // ... write it, fenced ...
    /// write.release().await?;
    /// // Still reading: other readers may come in, no writer, no other upgradeable reader.
    /// assert!(client.upgradeable_read_lock("config:42").acquire().await.unwrap_err().is_busy());
    /// config.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn upgrade(&self) -> Result<LockGuard, LockError> {
        self.upgrade_within(WAIT_FOREVER).await
    }

    /// [`upgrade`](Self::upgrade), waiting at most `wait` for the other readers to go
    /// ([`LockError::Busy`] after that, the upgradeable read still held; `0s` tries once).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let config = client.upgradeable_read_lock("config:42").acquire().await?;
    /// let other = client.read_lock("config:42").acquire().await?;
    /// let busy = config.upgrade_within(Duration::from_millis(50)).await.unwrap_err();
    /// assert!(busy.is_busy());
    /// drop(other);
    /// let write = config.upgrade_within(Duration::from_secs(5)).await?;
    /// # drop(write);
    /// # Ok(()) }
    /// ```
    pub async fn upgrade_within(&self, wait: Duration) -> Result<LockGuard, LockError> {
        if self.lock.kind() != Kind::UpgradeableRead || !self.also.is_empty() {
            return Err(LockError::InvalidConfig(format!(
                "`{}` is held as a {}, not as an upgradeable read lock: only an upgradeable \
                 read guard upgrades (take it with `upgradeable_read_lock`)",
                self.key(),
                self.lock.kind().name()
            )));
        }
        // The upgrade ends as soon as the read it builds on is lost (its script would refuse
        // it at the next check in anyway); a waiter dropped here is withdrawn as any is.
        let write = tokio::select! {
            biased;
            write = take_beside(&self.lock, Kind::Write, wait.min(WAIT_FOREVER)) => match write {
                // The script found this read no longer held: it is lost, whatever the
                // watchdog has seen yet.
                Err(e) if e.is_lost() => {
                    self.lock.lose();
                    return Err(e);
                }
                write => write?,
            },
            () = self.lock.lost() => {
                return Err(LockError::Lost {
                    key: self.key().as_str().to_owned(),
                });
            }
        };
        Ok(LockGuard::new(write, false))
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
        if self.also.is_empty() {
            // One hold, the common guard: nothing to gather.
            return match self.lock.drop_guard() {
                true => self.lock.release().await,
                false => Ok(()),
            };
        }
        // Every hold gives up this guard at once, before anything is awaited, and a
        // `lock_all`'s keys go back together, each whatever became of the others: a release
        // cut short (a cancelled caller) then leaves no key behind, as each hold's release
        // goes on in the background once it began. (One key after the other, a cut between
        // two left the later keys held by nobody.) The first error, in the reverse of the
        // order the keys were taken, is the answer.
        let releasing: Vec<&Arc<Hold>> = self.holds().rev().filter(|h| h.drop_guard()).collect();
        let outcomes = futures_util::future::join_all(releasing.into_iter().map(|h| h.release()));
        outcomes
            .await
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        for hold in self.holds() {
            if hold.drop_guard() {
                hold.release_in_background();
            }
        }
    }
}
