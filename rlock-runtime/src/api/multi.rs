//! All of several keys or none ([`LockClient::lock_all`]): each key an ordinary lock, taken
//! one after the other in one canonical order, so that two callers naming the same keys in
//! different orders never hold one each while waiting for the other's.

use tokio::time::Instant;

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::options::LockOptions;
use crate::api::request::{Keys, LockRequest, acquire_one};
use crate::backend::Kind;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};
use crate::util::tuning::WAIT_FOREVER;

impl LockClient {
    /// A request for all of `keys` or none: "transfer between two accounts" takes both
    /// accounts' locks (Redisson's `RMultiLock`, DistributedLock's composite locks). Each key
    /// is an ordinary lock key, which `lock`, `inspect` and `force_unlock` see held.
    ///
    /// The keys are taken one by one in one canonical order (their Redis keys' byte order,
    /// whatever order they were named in), each waiting within what is left of the one wait
    /// budget; if one cannot be had, those already taken are given back and its error is
    /// returned. So two callers naming the same keys in different orders never deadlock, and
    /// a caller never keeps some of the keys. The guard's `lost()` fires when any key's lease
    /// is lost, `extend` extends each, and `release` gives each back (in the reverse order);
    /// inside a locked scope, a nested `lock` of one of the keys re-enters it.
    ///
    /// Duplicate keys, no keys, and `fenced` (ask each key for its own fence with `lock`)
    /// are refused with [`LockError::InvalidConfig`]. On Redis Cluster the keys may live in
    /// different slots: each is its own lock.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let both = client
    ///     .lock_all(["account:1", "account:2"])
    ///     .wait(Duration::from_secs(1))
    ///     .acquire()
    ///     .await?;
    /// // Another caller naming them the other way round waits, it does not deadlock.
    /// let other = client.lock_all(["account:2", "account:1"]).acquire().await;
    /// assert!(other.unwrap_err().is_busy());
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<K: IntoLockKey>(&self, keys: impl IntoIterator<Item = K>) -> LockRequest<'_> {
        let keys = keys
            .into_iter()
            .map(IntoLockKey::into_lock_key)
            .collect::<Result<Vec<LockKey>, LockError>>()
            .map(Keys::All);
        LockRequest::of_keys(self, Kind::Lock, keys, LockOptions::default())
    }
}

/// Takes every key of `keys` in their canonical order within the options' one wait budget;
/// gives back those taken when one fails.
pub(crate) async fn acquire_all(
    client: &LockClient,
    keys: Vec<LockKey>,
    options: LockOptions,
) -> Result<LockGuard, LockError> {
    let mut keys: Vec<(String, LockKey)> = keys
        .into_iter()
        .map(|key| (client.redis_key(&key), key))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = keys.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(LockError::InvalidConfig(format!(
            "lock_all names `{}` twice; name each key once",
            pair[0].1
        )));
    }
    if keys.is_empty() {
        return Err(LockError::InvalidConfig(
            "lock_all needs at least one key".to_owned(),
        ));
    }
    if options.fenced {
        return Err(LockError::InvalidConfig(format!(
            "lock_all of `{}` and more: one fence cannot stand for several keys; lock each \
             key on its own for its fence",
            keys[0].1
        )));
    }
    let budget = options
        .wait
        .unwrap_or(client.shared().default_wait)
        .min(WAIT_FOREVER);
    let deadline = Instant::now() + budget;
    let mut taken = Vec::with_capacity(keys.len());
    for (_, key) in keys {
        let mut options = options.clone();
        options.wait = Some(deadline.saturating_duration_since(Instant::now()));
        match acquire_one(client, Kind::Lock, key, options).await {
            Ok(guard) => taken.push(guard),
            Err(e) => {
                for guard in taken.into_iter().rev() {
                    // Given back whatever its release says: the error that stopped the
                    // acquisition is the answer.
                    let _ = guard.release().await;
                }
                return Err(e);
            }
        }
    }
    LockGuard::all_of(taken)
        .ok_or_else(|| LockError::InvalidConfig("lock_all needs at least one key".to_owned()))
}
