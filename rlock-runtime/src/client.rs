//! The lock client: a cheap, cloneable handle on a backend, and the acquisition path.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::backend::{Attempt, AttemptAsks, Backend};
use crate::error::LockError;
use crate::fence::Fence;
use crate::guard::{HeldLock, LockGuard};
use crate::key::{IntoLockKey, LockKey};
use crate::metrics::{Count, Counters, LockMetrics};
use crate::options::{LockOptions, MAX_HOLD, MAX_TTL};
use crate::queue::{Subscriptions, WaitQueues};
use crate::renew::{LeasePlan, Leases, Renewal};
use crate::token::TokenSource;
use crate::{scope, trace, wait};

/// The lease length when neither the lock nor the client names one (Redisson's watchdog
/// default).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long one Redis command may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// A handle on one lock backend; clone it freely (it is an `Arc` inside).
///
/// ```
/// use rlock_runtime::LockClient;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// // LockClient::connect("redis://127.0.0.1:6379/").await? in a real service.
/// let client = LockClient::in_memory();
/// let guard = client.lock("order:42").ttl(Duration::from_secs(10)).acquire().await?;
/// // ... one order for user 42 at a time, across every instance sharing the Redis ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LockClient {
    inner: Arc<ClientShared>,
}

/// What every clone of a client shares.
#[derive(Debug)]
pub(crate) struct ClientShared {
    backend: Backend,
    tokens: TokenSource,
    namespace: Option<String>,
    default_ttl: Duration,
    command_timeout: Duration,
    pub(crate) leases: Leases,
    pub(crate) counters: Counters,
    queues: Arc<WaitQueues>,
    /// Told when a key gains its first or loses its last waiter (Redis: pub/sub).
    subscriptions: Option<Arc<dyn Subscriptions>>,
}

impl ClientShared {
    fn new(
        backend: Backend,
        namespace: Option<String>,
        default_ttl: Duration,
        command_timeout: Duration,
    ) -> Self {
        let queues = Arc::new(WaitQueues::default());
        let subscriptions = backend.release_feed(&queues);
        Self {
            backend,
            tokens: TokenSource::new(),
            namespace,
            default_ttl,
            command_timeout,
            leases: Leases::default(),
            counters: Counters::default(),
            queues,
            subscriptions,
        }
    }
}

impl LockClient {
    /// Connects to one Redis server: `redis://[user:password@]host[:port][/db]`, or
    /// `rediss://…` with the `tls` feature. The connection is multiplexed, shared by every
    /// clone of the client, and re-established on its own after a failure.
    ///
    /// Fails with [`LockError::InvalidConfig`] for a bad URL and with a backend error when
    /// the server cannot be reached within the command timeout.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::connect("redis://:secret@127.0.0.1:6379/0").await?;
    /// rlock_runtime::install(client);
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().url(url).connect().await
    }

    /// A client with options (namespace, default ttl, command timeout).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// let client = LockClient::builder()
    ///     .namespace("shop")
    ///     .default_ttl(Duration::from_secs(10))
    ///     .in_memory();
    /// # let _ = client;
    /// ```
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// An in-process backend with Redis's semantics (expiry, ownership, fencing,
    /// reentrancy, renewal, notified waiting), for unit tests and single-process programs.
    /// Play other instances of the service with [`sibling`](Self::sibling).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let client = LockClient::in_memory();
    /// let guard = client.lock("job:1").acquire().await.unwrap();
    /// assert!(guard.fence().is_none()); // ask with `.fenced()` for one
    /// # }
    /// ```
    pub fn in_memory() -> Self {
        Self::builder().in_memory()
    }

    /// A client on the same backend and options with an identity of its own, as another
    /// instance of the service would have: it does not re-enter this client's holds.
    /// Mostly for tests that play several instances with [`in_memory`](Self::in_memory).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let instance_a = LockClient::in_memory();
    /// let instance_b = instance_a.sibling();
    /// let _held = instance_a.lock("order:1").acquire().await.unwrap();
    /// assert!(instance_b.lock("order:1").acquire().await.unwrap_err().is_busy());
    /// # }
    /// ```
    pub fn sibling(&self) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(ClientShared::new(
                inner.backend.clone(),
                inner.namespace.clone(),
                inner.default_ttl,
                inner.command_timeout,
            )),
        }
    }

    /// What this client has done so far: acquisitions, busy and lost locks, renewals, waits.
    /// See [`LockMetrics`] for an example.
    pub fn metrics(&self) -> LockMetrics {
        self.inner.counters.snapshot()
    }

    /// Starts a lock request for `key`; finish it with [`LockRequest::acquire`].
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let user_id = 42;
    /// let guard = client.lock(format!("order:{user_id}")).acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, key: impl IntoLockKey) -> LockRequest<'_> {
        self.lock_checked(key.into_lock_key())
    }

    pub(crate) fn lock_checked(&self, key: Result<LockKey, LockError>) -> LockRequest<'_> {
        LockRequest {
            client: self,
            key,
            options: LockOptions::default(),
        }
    }

    /// Runs `body` while holding `key`, then releases it.
    ///
    /// Inside `body`, locking the same key with this client re-enters without a Redis
    /// command. Returns the body's output, or the error that prevented acquiring. When the
    /// lease turned out lost by the time of release, returns [`LockError::Lost`] (unless
    /// `options.on_lost` is [`OnLost::Continue`](crate::OnLost::Continue)).
    ///
    /// ```
    /// use rlock_runtime::{LockClient, LockOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let total = client
    ///     .with_lock("stock:7", LockOptions::new(), async { 40 + 2 })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<T>(
        &self,
        key: impl IntoLockKey,
        options: LockOptions,
        body: impl Future<Output = T>,
    ) -> Result<T, LockError> {
        let outcome = crate::run::Outcome::<Result<T, LockError>>::RESULT;
        crate::run::run_locked(
            Ok(self.clone()),
            key.into_lock_key(),
            options,
            outcome,
            |_| async { Ok(body.await) },
        )
        .await
    }

    /// The key as stored in Redis: the namespace, if any, then `:`, then the key.
    ///
    /// ```
    /// use rlock_runtime::{LockClient, LockKey};
    ///
    /// let client = LockClient::builder().namespace("shop").in_memory();
    /// let key = LockKey::new("order:42").unwrap();
    /// assert_eq!(client.redis_key(&key), "shop:order:42");
    /// ```
    pub fn redis_key(&self, key: &LockKey) -> String {
        key.in_namespace(self.inner.namespace.as_deref())
    }

    pub(crate) fn id(&self) -> Uuid {
        self.inner.tokens.client_id()
    }

    pub(crate) fn shared(&self) -> &Arc<ClientShared> {
        &self.inner
    }

    /// Runs one backend call under the per-command timeout.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        let timeout = self.inner.command_timeout;
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or(Err(LockError::Timeout { operation, timeout }))
    }

    pub(crate) async fn release_raw(
        &self,
        redis_key: &str,
        token: &str,
    ) -> Result<bool, LockError> {
        let released = self
            .bounded("release", self.inner.backend.release(redis_key, token))
            .await;
        if let Ok(true) = released {
            self.inner.queues.released_here(redis_key);
            self.inner.counters.add(Count::Released, 1);
            trace::debug_event!(key = redis_key, "rlock: released");
        }
        released
    }

    /// Renews a batch. Its reply is awaited at most half the shortest lease in it (or the
    /// command timeout, if shorter): an answer later than that could not save the lease.
    pub(crate) async fn renew_raw(&self, batch: &[Renewal]) -> Result<Vec<bool>, LockError> {
        let renewals: Vec<_> = batch
            .iter()
            .map(|r| (r.lock.redis_key(), r.lock.token(), r.ttl))
            .collect();
        let shortest = batch.iter().map(|r| r.ttl).min().unwrap_or(Duration::MAX);
        let timeout = self.inner.command_timeout.min(shortest / 2);
        tokio::time::timeout(timeout, self.inner.backend.renew(&renewals))
            .await
            .unwrap_or(Err(LockError::Timeout {
                operation: "renew",
                timeout,
            }))
    }

    pub(crate) async fn extend_raw(
        &self,
        redis_key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        self.bounded("extend", self.inner.backend.extend(redis_key, token, ttl))
            .await
    }

    /// Best-effort release from a synchronous context (`Drop`): never blocks. Without a
    /// Tokio runtime to run it on, the lease is left to expire.
    pub(crate) fn release_in_background(&self, redis_key: String, token: String) {
        match &self.inner.backend {
            Backend::Memory(memory) => {
                memory.release(&redis_key, &token);
            }
            Backend::Redis(_) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let client = self.clone();
                    runtime.spawn(async move {
                        let _ = client.release_raw(&redis_key, &token).await;
                    });
                }
            }
        }
    }

    /// One attempt under the timeout. If the attempt does not come back (timeout, error,
    /// cancelled caller), the server may still have granted it; the token is then released
    /// in the background ([`ReleaseOnDrop`]) so that no orphan lock blocks others for a lease.
    async fn attempt(
        &self,
        redis_key: &str,
        token: &str,
        ttl: Duration,
        ask: AttemptAsks,
    ) -> Result<Attempt, LockError> {
        let mut orphan = ReleaseOnDrop {
            client: self,
            redis_key,
            token,
            armed: true,
        };
        let attempt = self
            .bounded(
                "acquire",
                self.inner.backend.try_acquire(redis_key, token, ttl, ask),
            )
            .await;
        orphan.armed = attempt.is_err();
        attempt
    }
}

/// Releases a token in the background when dropped armed: an acquisition or release whose
/// reply never came (timeout, error, cancelled caller) may still have been carried out, or
/// not, so the compare-and-delete is sent again, where it can remove nothing but ours.
pub(crate) struct ReleaseOnDrop<'a> {
    pub(crate) client: &'a LockClient,
    pub(crate) redis_key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) armed: bool,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.client
                .release_in_background(self.redis_key.to_owned(), self.token.to_owned());
        }
    }
}

/// A lease is at least 1 ms and at most [`MAX_TTL`].
pub(crate) fn check_ttl(key: &LockKey, ttl: Duration) -> Result<(), LockError> {
    if ttl < Duration::from_millis(1) {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has a ttl under 1ms; give it a lease of at least 1ms"
        )));
    }
    if ttl > MAX_TTL {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has a ttl of {ttl:?}, over the limit of {MAX_TTL:?}; keep the lease \
             short and let the watchdog renew it"
        )));
    }
    Ok(())
}

/// A lock request being configured; created by [`LockClient::lock`].
///
/// ```
/// use rlock_runtime::LockClient;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let guard = client
///     .lock("voucher:3")
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_millis(200))
///     .acquire()
///     .await?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a lock request does nothing until `.acquire().await`"]
pub struct LockRequest<'a> {
    client: &'a LockClient,
    key: Result<LockKey, LockError>,
    options: LockOptions,
}

impl LockRequest<'_> {
    /// The lease length (default: the client's default ttl).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = Some(ttl);
        self
    }

    /// How long to wait while another owner holds the lock (default: zero, one attempt).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Whether the watchdog renews the lease while the guard lives (default: on).
    pub fn renew(mut self, renew: bool) -> Self {
        self.options.renew = renew;
        self
    }

    /// A hard cap on the total time held, renewals included.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.options.max_hold = Some(max_hold);
        self
    }

    /// Issue a fencing token with the lock ([`LockGuard::fence`]); off by default, since it
    /// costs a second key write in Redis on every acquisition.
    pub fn fenced(mut self) -> Self {
        self.options.fenced = true;
        self
    }

    /// Replaces all options at once.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Takes the lock: one round trip when it is free, none when the current task's call
    /// chain already holds it (reentry; the reentrant guard shares the outer hold and its
    /// options). While another owner holds it, waits up to the wait budget, then fails with
    /// [`LockError::Busy`].
    ///
    /// Waiting is woken by release announcements (Redis pub/sub on one connection per
    /// client), not by polling: within a client only the first waiter of a key retries on
    /// each release, in arrival order. When no announcement can come (the holder crashed, or
    /// another library holds the key), a timer set to the holder's remaining lease, plus
    /// jitter, retries.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let client = self.client;
        let options = self.options;
        let key = self.key?;
        let redis_key = client.redis_key(&key);
        if let Some(held) = scope::find(client.id(), &redis_key) {
            if options.fenced && held.fence().is_none() {
                return Err(LockError::InvalidConfig(format!(
                    "lock `{key}` is already held by this task without a fencing token, so \
                     re-entering it cannot give one; ask for the fence on the outermost lock"
                )));
            }
            held.add_hold();
            return Ok(LockGuard::new(held, true));
        }
        let plan = client.plan(&key, &options)?;
        let started = Instant::now();
        let busy = |waited: Duration| {
            client.inner.counters.add(Count::Busy, 1);
            trace::debug_event!(key = key.as_str(), ?waited, "rlock: busy");
            LockError::Busy {
                key: key.as_str().to_owned(),
                waited,
            }
        };

        let shared = &client.inner;
        // A request that may wait does not barge past this client's queued waiters of the key
        // (the task that just released it, looping back, would otherwise win every time):
        // it queues behind them. One that may not wait tries once regardless.
        let waiting = !options.wait.is_zero();
        let mut holder_left = None;
        if !waiting || !shared.queues.has_waiters(&redis_key) {
            match client.try_hold(&key, &redis_key, plan, waiting).await? {
                Ok(guard) => return Ok(guard),
                Err(_) if !waiting => return Err(busy(started.elapsed())),
                Err(left) => holder_left = left,
            }
        }

        let mut ticket = shared.queues.join(&redis_key, shared.subscriptions.clone());
        // Bounded by the caller's budget too: a stalled subscription must not outlast `wait`.
        let budget_left = options.wait.saturating_sub(started.elapsed());
        let announced = ticket
            .subscribed(shared.command_timeout.min(budget_left))
            .await;
        let mut try_now = ticket.is_head();
        loop {
            if try_now {
                match client.try_hold(&key, &redis_key, plan, true).await? {
                    Ok(guard) => {
                        ticket.leave_with_lock();
                        shared.counters.waited(started.elapsed());
                        return Ok(guard);
                    }
                    Err(left) => holder_left = left,
                }
            }
            let waited = started.elapsed();
            let Some(budget) = options.wait.checked_sub(waited).filter(|b| !b.is_zero()) else {
                shared.counters.waited(waited);
                return Err(busy(waited));
            };
            let pause = wait::fallback_pause(holder_left, announced, budget);
            tokio::select! {
                () = ticket.woken() => {}
                () = tokio::time::sleep(pause) => {}
            }
            try_now = ticket.is_head();
            if try_now {
                ticket.courtesy().await;
            }
        }
    }
}

impl LockClient {
    /// Checks the lease options of a request and fills in the client's defaults.
    fn plan(&self, key: &LockKey, options: &LockOptions) -> Result<LeasePlan, LockError> {
        let ttl = options.ttl.unwrap_or(self.inner.default_ttl);
        check_ttl(key, ttl)?;
        if let Some(cap) = options.max_hold
            && cap > MAX_HOLD
        {
            return Err(LockError::InvalidConfig(format!(
                "lock `{key}` has max_hold {cap:?}, over the limit of {MAX_HOLD:?}; \
                 leave max_hold unset for no cap"
            )));
        }
        if let Some(cap) = options.max_hold
            && cap < ttl
        {
            return Err(LockError::InvalidConfig(format!(
                "lock `{key}` has max_hold {cap:?} shorter than its ttl {ttl:?}; \
                 raise max_hold or lower the ttl"
            )));
        }
        Ok(LeasePlan {
            ttl,
            renew: options.renew,
            max_hold: options.max_hold,
            fenced: options.fenced,
        })
    }

    /// One attempt; on success the hold is watched by the watchdog. `Err(remaining)` tells
    /// how long the current holder's lease has left, when known.
    async fn try_hold(
        &self,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        waiting: bool,
    ) -> Result<Result<LockGuard, Option<Duration>>, LockError> {
        let token = self.inner.tokens.next();
        let sent_at = Instant::now();
        let ask = AttemptAsks {
            fence: plan.fenced,
            remaining: waiting,
        };
        match self.attempt(redis_key, &token, plan.ttl, ask).await? {
            Attempt::Acquired { fence } => {
                let held = HeldLock::new(
                    self.clone(),
                    key.clone(),
                    redis_key.to_owned(),
                    token,
                    fence.map(Fence),
                );
                self.inner.leases.watch(self, &held, plan, sent_at);
                self.inner.counters.add(Count::Acquired, 1);
                trace::debug_event!(key = key.as_str(), ?fence, "rlock: acquired");
                Ok(Ok(LockGuard::new(held, false)))
            }
            Attempt::Busy { remaining } => Ok(Err(remaining)),
        }
    }
}

/// Options of a [`LockClient`]; finish with [`connect`](Self::connect) or
/// [`in_memory`](Self::in_memory).
#[derive(Debug, Clone)]
#[must_use]
pub struct LockClientBuilder {
    url: Option<String>,
    /// PEM root certificates for `rediss://` servers signed by a private CA.
    #[cfg(feature = "tls")]
    tls_roots: Option<Vec<u8>>,
    namespace: Option<String>,
    default_ttl: Duration,
    command_timeout: Duration,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        Self {
            url: None,
            #[cfg(feature = "tls")]
            tls_roots: None,
            namespace: None,
            default_ttl: DEFAULT_TTL,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
        }
    }
}

impl LockClientBuilder {
    /// The Redis URL (`redis://…` or `rediss://…`).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Trusts the PEM certificates in `pem` (instead of the public web roots) for
    /// `rediss://` servers, as for a Redis whose certificate a private CA signed.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/redis/ca.pem")?;
    /// let client = LockClient::builder()
    ///     .url("rediss://redis.internal:6380/")
    ///     .tls_root_certificate(ca)
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots = Some(pem.into());
        self
    }

    /// A prefix for every key, so that services sharing a Redis do not collide:
    /// with namespace `shop`, lock `order:42` is stored as `shop:order:42`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The lease length of locks that do not name one (default 30 s).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long any one Redis command may take (default 2 s); connecting is bounded by it too.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Connects to the Redis server named by [`url`](Self::url).
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379/")
    ///     .namespace("shop")
    ///     .default_ttl(Duration::from_secs(10))
    ///     .command_timeout(Duration::from_millis(500))
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let url = self.url.clone().ok_or_else(|| {
            LockError::InvalidConfig("no Redis URL given; call `.url(\"redis://…\")`".into())
        })?;
        self.check()?;
        #[cfg(feature = "tls")]
        let client = RedisBackend::client_with_roots(&url, self.tls_roots.clone())?;
        #[cfg(not(feature = "tls"))]
        let client = RedisBackend::client(&url)?;
        let backend = RedisBackend::connect(client, self.command_timeout).await?;
        Ok(self.build(Backend::Redis(Arc::new(backend))))
    }

    /// Builds an in-process client (the URL, if any, is ignored).
    pub fn in_memory(self) -> LockClient {
        self.build(Backend::Memory(MemoryBackend::default()))
    }

    fn check(&self) -> Result<(), LockError> {
        if self.command_timeout.is_zero() {
            return Err(LockError::InvalidConfig(
                "the command timeout may not be zero".into(),
            ));
        }
        if self.default_ttl.is_zero() {
            return Err(LockError::InvalidConfig(
                "the default ttl may not be zero".into(),
            ));
        }
        Ok(())
    }

    fn build(self, backend: Backend) -> LockClient {
        LockClient {
            inner: Arc::new(ClientShared::new(
                backend,
                self.namespace.filter(|ns| !ns.is_empty()),
                if self.default_ttl.is_zero() {
                    DEFAULT_TTL
                } else {
                    self.default_ttl
                },
                if self.command_timeout.is_zero() {
                    DEFAULT_COMMAND_TIMEOUT
                } else {
                    self.command_timeout
                },
            )),
        }
    }
}
