//! Once-only work across instances (single-flight): the first caller of a key computes;
//! callers that come while it does wait, herd-free, and receive its result, which is kept in
//! Redis for the request's ttl; a caller that finds the computer failed or gone computes
//! itself.
//!
//! Built on a read-write lock (`once:<key>`) and a shared value (`rlock:result:<key>`): the
//! computing caller holds the write lock and stores the result before it releases, so the
//! release admits every waiting reader at once, and each reads the result. The result is
//! JSON, at most [`OnceRequest::max_size`] bytes.

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::api::client::LockClient;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey, own_key};
use crate::lease::plan::check_ttl;

/// The largest result shared unless the request says: 1 MiB.
pub const ONCE_MAX_SIZE: usize = 1 << 20;

impl LockClient {
    /// Once-only work on `key`: [`run`](OnceRequest::run) computes a result that every
    /// caller of the key, in every instance, receives for the request's ttl, computed once.
    ///
    /// Redlock refuses it (independent masters keep no shared result, nor read-write locks).
    ///
    /// ```
    /// use rlock_runtime::{LockClient, LockError};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let build = || async { Ok::<_, LockError>(vec![4, 2]) };
    /// let first: Vec<u32> = client.once("report:42").ttl(Duration::from_secs(30)).run(build).await?;
    /// // Within the ttl, the stored result: this computation does not run.
    /// let again: Vec<u32> = client
    ///     .once("report:42")
    ///     .run(|| async { unreachable!("computed once") })
    ///     .await?;
    /// assert_eq!(first, again);
    /// # Ok(()) }
    /// ```
    pub fn once(&self, key: impl IntoLockKey) -> OnceRequest<'_> {
        OnceRequest {
            client: self,
            key: key.into_lock_key(),
            ttl: None,
            wait: None,
            max_size: ONCE_MAX_SIZE,
        }
    }
}

/// Once-only work on one key: set how long its result is kept, how long a caller waits for
/// another's, and the result's largest size, then [`run`](Self::run).
#[derive(Debug)]
#[must_use = "once-only work does nothing until it runs"]
pub struct OnceRequest<'a> {
    client: &'a LockClient,
    key: Result<LockKey, LockError>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    max_size: usize,
}

impl<'a> OnceRequest<'a> {
    /// How long the result is kept in Redis and given to every caller (default: the
    /// client's default ttl). At most [`MAX_TTL`](crate::MAX_TTL).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a caller waits while another computes (default: the ttl). When it runs
    /// out, [`LockError::Busy`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The largest result shared, in bytes of JSON (default [`ONCE_MAX_SIZE`]). A larger one
    /// is not stored, and its computing caller gets [`LockError::ResultNotShared`].
    pub fn max_size(mut self, bytes: usize) -> Self {
        self.max_size = bytes;
        self
    }

    /// The result: the one stored if a caller computed it within the ttl; else, if another
    /// caller is computing it, that caller's, once it is done (waiting in the key's queue,
    /// within the wait budget); else `compute`'s, run here under the key's write lock and
    /// stored for the others.
    ///
    /// `compute` runs at most once per call. If it fails, its error is returned here and
    /// nothing is stored: the callers waiting on it are admitted, and one of them computes.
    /// The computing caller's write lease is its client's default ttl, renewed while it
    /// computes: a caller that dies is replaced once it ends. If the lease is lost while it
    /// computes, the computation is dropped and [`LockError::Lost`] returned, since another
    /// caller may compute meanwhile. A stored
    /// result that no longer decodes as `T` (a deploy changed the type) is computed again.
    pub async fn run<T, E, F, Fut>(self, compute: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<LockError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let work = self.work()?;
        let deadline = Instant::now() + work.wait;
        // The stored result, or the write lock to compute it under.
        let writer = loop {
            if let Some(value) = work.stored().await? {
                return Ok(value);
            }
            let taken = work.client.write_lock(work.lock.clone());
            match taken.wait(Duration::ZERO).acquire().await {
                Ok(writer) => {
                    // A result stored between the read above and the grant.
                    if let Some(value) = work.stored().await? {
                        let _ = writer.release().await;
                        return Ok(value);
                    }
                    break writer;
                }
                Err(e) if e.is_busy() => {
                    // Another caller computes: wait as a reader until its write lock goes.
                    let left = deadline.saturating_duration_since(Instant::now());
                    let reader = work.client.read_lock(work.lock.clone()).wait(left);
                    let reader = reader.acquire().await?;
                    let stored = work.stored().await;
                    let _ = reader.release().await;
                    if let Some(value) = stored? {
                        return Ok(value);
                    }
                    // It failed or was lost: this caller may compute, within its budget.
                    if Instant::now() >= deadline {
                        let key = work.key.to_string();
                        return Err(LockError::Busy {
                            key,
                            waited: work.wait,
                        }
                        .into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        let computed = {
            let computing = compute();
            tokio::pin!(computing);
            tokio::select! {
                biased;
                () = writer.lost() => None,
                out = &mut computing => Some(out),
            }
        };
        let Some(computed) = computed else {
            let key = work.key.to_string();
            return Err(LockError::Lost { key }.into());
        };
        let shared = match &computed {
            Ok(value) => work.share(value).await,
            Err(_) => Ok(()),
        };
        // The release admits the waiting readers, who read what was stored. One that fails
        // leaves the lease to end by itself, which admits them too.
        let _ = writer.release().await;
        shared?;
        computed
    }

    /// The request checked and filled in.
    fn work(self) -> Result<Work<'a>, LockError> {
        let key = self.key?;
        let client = self.client;
        let ttl = self.ttl.unwrap_or(client.shared().default_ttl);
        check_ttl(&key, ttl)?;
        let lock = format!("once:{}", key.as_str()).into_lock_key()?;
        let namespace = client.shared().namespace.as_deref();
        let result = own_key(namespace, &format!("result:{}", key.as_str()));
        Ok(Work {
            client,
            key,
            lock,
            result,
            ttl,
            wait: self.wait.unwrap_or(ttl),
            max_size: self.max_size,
        })
    }
}

/// Once-only work with its keys: the lock that orders its callers and where its result is.
struct Work<'a> {
    client: &'a LockClient,
    key: LockKey,
    lock: LockKey,
    result: String,
    ttl: Duration,
    wait: Duration,
    max_size: usize,
}

impl Work<'_> {
    /// The stored result, if there is one that decodes.
    async fn stored<T: DeserializeOwned>(&self) -> Result<Option<T>, LockError> {
        let engine = &self.client.shared().engine;
        let Some(bytes) = engine.read_value(&self.result).await? else {
            return Ok(None);
        };
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(Some(value)),
            Err(error) => {
                let error = &error as &(dyn std::error::Error + 'static);
                crate::util::trace::debug_event!(
                    key = self.key.as_str(),
                    error,
                    "rlock: a stored result does not decode; computing it again"
                );
                let _ = error; // read by the event only when `tracing` is on
                Ok(None)
            }
        }
    }

    /// Stores `value` for the ttl, if it is small enough.
    async fn share<T: Serialize>(&self, value: &T) -> Result<(), LockError> {
        let not_shared = |reason: String| LockError::ResultNotShared {
            key: self.key.to_string(),
            reason,
        };
        let bytes = serde_json::to_vec(value).map_err(|e| not_shared(e.to_string()))?;
        if bytes.len() > self.max_size {
            return Err(not_shared(format!(
                "it is {} bytes of JSON, over the limit of {}; raise `max_size` or share \
                 less (a key to where the result is kept)",
                bytes.len(),
                self.max_size
            )));
        }
        let engine = &self.client.shared().engine;
        engine.write_value(&self.result, &bytes, self.ttl).await
    }
}
