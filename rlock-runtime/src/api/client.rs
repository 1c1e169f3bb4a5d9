//! The lock client: a cheap, cloneable handle on a backend, and how it is built.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::api::identity::Identity;
use crate::api::options::OnLost;
use crate::backend::deployment::{CLUSTER_SCHEME, REDLOCK_SCHEME, SENTINEL_SCHEME, joined};
use crate::error::LockError;
use crate::key::LockKey;
use crate::lease::Engine;
use crate::metrics::LockMetrics;

/// The lease length when neither the lock nor the client names one (Redisson's watchdog
/// default).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long one Redis command may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest command timeout a client accepts: one hour. `connect` refuses a longer one
/// with [`LockError::InvalidConfig`] instead of overflowing a deadline.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60 * 60);

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
    pub(crate) engine: Arc<Engine>,
    pub(crate) namespace: Option<String>,
    pub(crate) default_ttl: Duration,
    pub(crate) command_timeout: Duration,
    /// Replicas that must confirm a grant, for locks that do not say.
    pub(crate) min_replicas: u32,
    /// The wait budget of locks that do not say.
    pub(crate) default_wait: Duration,
    /// What a locked body does on a lost lease, for locks that do not say.
    pub(crate) default_on_lost: OnLost,
    /// Its name on the holder cards of its long holds.
    pub(crate) identity: Identity,
}

impl LockClient {
    /// Connects to one Redis server: `redis://[user:password@]host[:port][/db]`, or
    /// `rediss://…` with the `tls` feature. Commands go over multiplexed connections shared
    /// by every clone of the client: one for rlock's own tasks (renewals, background
    /// releases) and callers on current-thread runtimes, and one per multi-thread runtime
    /// that sends commands, opened on it so that its replies need no thread hop. Each is
    /// re-established on its own after a failure; the release feed has one more.
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
            inner: Arc::new(ClientShared {
                engine: inner
                    .engine
                    .sibling(inner.namespace.as_deref(), inner.identity.card_values()),
                namespace: inner.namespace.clone(),
                default_ttl: inner.default_ttl,
                command_timeout: inner.command_timeout,
                min_replicas: inner.min_replicas,
                default_wait: inner.default_wait,
                default_on_lost: inner.default_on_lost,
                identity: inner.identity.clone(),
            }),
        }
    }

    /// What this client has done so far: acquisitions, busy and lost locks, renewals, waits.
    /// See [`LockMetrics`] for an example.
    pub fn metrics(&self) -> LockMetrics {
        LockMetrics {
            master_switches: self.inner.engine.master_switches(),
            ..self.inner.engine.counters.snapshot()
        }
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

    /// The name this client gives operators' tools (see [`Identity`]).
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    pub(crate) fn id(&self) -> Uuid {
        self.inner.engine.id()
    }

    pub(crate) fn shared(&self) -> &Arc<ClientShared> {
        &self.inner
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
    min_replicas: u32,
    default_wait: Duration,
    default_on_lost: OnLost,
    identity: Option<Identity>,
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
            min_replicas: 0,
            default_wait: Duration::ZERO,
            default_on_lost: OnLost::Abort,
            identity: None,
        }
    }
}

impl LockClientBuilder {
    /// The Redis URL, one form per topology, so that one setting selects any of them:
    /// - `redis://[user:password@]host[:port][/db]` (or `rediss://` for TLS): one server;
    /// - `redis+sentinel://[user:password@]s1:p1,s2:p2,s3:p3/service[/db]`: the master the
    ///   sentinels monitor as `service`, followed across failovers (see
    ///   [`sentinel`](Self::sentinel)); the user and password are the master's;
    ///   `rediss+sentinel://` reaches the sentinels and the servers over TLS (the `tls`
    ///   feature);
    /// - `redis+cluster://[user:password@]host1:port1,host2:port2`: Redis Cluster, from these
    ///   seed nodes (see [`cluster`](Self::cluster));
    /// - `redlock://[user:password@]host1:port1,host2:port2,host3:port3[/db]`: Redlock over
    ///   independent masters (see [`redlock`](Self::redlock)).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Trusts the PEM certificates in `pem` (instead of the public web roots) for
    /// `rediss://` servers (and `rediss+sentinel://` sentinels and servers), as for a Redis
    /// whose certificate a private CA signed.
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
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots = Some(pem.into());
        self
    }

    /// A prefix for every key, so that services sharing a Redis do not collide:
    /// with namespace `shop`, lock `order:42` is stored as `shop:order:42`. A `}` in it must
    /// close a Redis Cluster hash tag (`{shop}` puts every lock in one slot), as in a key.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The lease length of locks that do not name one (default 30 s).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long any one Redis command may take (default 2 s, at most
    /// [`MAX_COMMAND_TIMEOUT`]); connecting is bounded by it too.
    /// A connection with a command unanswered that long is replaced, and every command still
    /// waiting on it fails with [`LockError::Timeout`]: replies come in order, so the ones
    /// behind it would not come in time either. (On a plain TCP or Unix socket the
    /// connection keeps this deadline for all its commands at once, and may cut a command
    /// up to a sixteenth of the timeout early, or a millisecond under 16 ms; TLS and cluster
    /// commands each have a timer.)
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long locks that do not say wait for a busy lock (default zero: one attempt), as
    /// lock4j's global `acquire-timeout`; a lock's own `wait` overrides it.
    ///
    /// ```
    /// use rlock_runtime::{LockClient, OnLost};
    /// use std::time::Duration;
    ///
    /// let client = LockClient::builder()
    ///     .default_wait(Duration::from_secs(3))
    ///     .default_on_lost(OnLost::Continue)
    ///     .in_memory();
    /// # drop(client);
    /// ```
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.default_wait = wait;
        self
    }

    /// The name the client gives operators' tools: on the holder card of every lock it
    /// keeps for a second or more, which [`LockClient::inspect`] reads from any process.
    /// By default [`Identity::of_this_process`] (`RLOCK_SERVICE`, `RLOCK_HOST`).
    ///
    /// ```
    /// use rlock_runtime::{Identity, LockClient};
    ///
    /// let client = LockClient::builder().identity(Identity::new("billing")).in_memory();
    /// assert_eq!(client.identity().service, "billing");
    /// ```
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// What a locked body does when its lease is lost, for locks that do not say (default
    /// [`OnLost::Abort`]); a lock's own `on_lost` overrides it.
    pub fn default_on_lost(mut self, on_lost: OnLost) -> Self {
        self.default_on_lost = on_lost;
        self
    }

    /// How many replicas must confirm each grant for locks that do not say (default 0); see
    /// [`LockRequest::min_replicas`](crate::LockRequest::min_replicas).
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.min_replicas = replicas;
        self
    }

    /// Redis Cluster, found from these seed nodes (each a `redis://` URL; any few of the
    /// cluster's nodes). Each lock lives on the shard of its key's slot; the client follows
    /// `MOVED`/`ASK` during resharding and failover, renews leases in one script call per
    /// slot, and announces releases on sharded channels (Redis 7.0 and later, Valkey; on
    /// Redis 6.2 waiters check in every 50 ms instead of being told). Same as
    /// `.url("redis+cluster://h1:p1,h2:p2")`.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::builder()
    ///     .cluster(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn cluster<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.url = Some(joined(CLUSTER_SCHEME, seeds, ""));
        self
    }

    /// A master managed by Redis Sentinel: `service` is the name the sentinels monitor
    /// (`sentinel monitor <service> …`), `sentinels` their addresses (`host:port`). The client
    /// asks the sentinels for the master whenever it (re)connects, and moves its connections
    /// to the new master as soon as a sentinel announces a failover (`+switch-master`), or a
    /// connection fails or answers `READONLY` (a demoted master), whichever comes first;
    /// [`LockMetrics::master_switches`] counts the announced ones. A lock
    /// granted just before a failover may be missing on the promoted replica (replication is
    /// asynchronous): its holder's next renewal then finds it gone and reports it lost. Same
    /// as `.url("redis+sentinel://s1:p1,s2:p2/service")`.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::builder()
    ///     .sentinel("mymaster", ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"])
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn sentinel<I, S>(mut self, service: &str, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.url = Some(joined(SENTINEL_SCHEME, sentinels, &format!("/{service}")));
        self
    }

    /// Redlock over these independent masters (each a `redis://` or `rediss://` URL), per
    /// the redis.io algorithm: every operation goes to all masters at once and counts a
    /// majority; a lease's validity is its ttl less the time acquiring took and a drift of
    /// 1 % + 2 ms. It survives the loss of a minority of masters. Fencing tokens are refused
    /// (each master would issue its own). Same as `.url("redlock://h1:p1,h2:p2,h3:p3")`.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::builder()
    ///     .redlock(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"])
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn redlock<I, S>(mut self, masters: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.url = Some(joined(REDLOCK_SCHEME, masters, ""));
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
        let engine = Engine::connect(
            &url,
            self.command_timeout,
            self.tls_roots(),
            self.namespace.as_deref().filter(|ns| !ns.is_empty()),
            self.identity_values(),
        )
        .await?;
        Ok(self.build(engine))
    }

    /// Builds an in-process client (the URL, if any, is ignored).
    pub fn in_memory(self) -> LockClient {
        let engine = Engine::in_memory(
            self.namespace.as_deref().filter(|ns| !ns.is_empty()),
            self.identity_values(),
        );
        self.build(engine)
    }

    /// The PEM certificates to trust for TLS instead of the public roots, if any.
    fn tls_roots(&self) -> Option<&[u8]> {
        #[cfg(feature = "tls")]
        return self.tls_roots.as_deref();
        #[cfg(not(feature = "tls"))]
        None
    }

    fn check(&self) -> Result<(), LockError> {
        if let Some(namespace) = &self.namespace
            && !crate::key::companions_share_its_slot(namespace)
        {
            return Err(LockError::InvalidConfig(format!(
                "namespace {namespace:?}: a `}}` in it must close a Redis Cluster hash tag \
                 (`{{tag}}`, not empty), or no key's queue and fence record could share its \
                 cluster slot; remove the `}}` or write a tag such as `{{shop}}`"
            )));
        }
        if self.command_timeout.is_zero() {
            return Err(LockError::InvalidConfig(
                "the command timeout may not be zero".into(),
            ));
        }
        if self.command_timeout > MAX_COMMAND_TIMEOUT {
            return Err(LockError::InvalidConfig(format!(
                "a command timeout of {:?} is past the longest one rlock accepts ({:?}); \
                 a command that slow means Redis is gone, and holds would be lost long \
                 before it answered",
                self.command_timeout, MAX_COMMAND_TIMEOUT
            )));
        }
        if self.default_ttl.is_zero() {
            return Err(LockError::InvalidConfig(
                "the default ttl may not be zero".into(),
            ));
        }
        Ok(())
    }

    /// What the client's holder card names it by (service, host, pid).
    fn identity_values(&self) -> [String; 3] {
        let identity = self.identity.clone();
        identity
            .unwrap_or_else(Identity::of_this_process)
            .card_values()
    }

    fn build(self, engine: Arc<Engine>) -> LockClient {
        let namespace = self.namespace.filter(|ns| !ns.is_empty());
        let identity = self.identity.unwrap_or_else(Identity::of_this_process);
        LockClient {
            inner: Arc::new(ClientShared {
                engine,
                namespace,
                default_ttl: if self.default_ttl.is_zero() {
                    DEFAULT_TTL
                } else {
                    self.default_ttl
                },
                command_timeout: if self.command_timeout.is_zero() {
                    DEFAULT_COMMAND_TIMEOUT
                } else {
                    self.command_timeout
                },
                min_replicas: self.min_replicas,
                default_wait: self.default_wait,
                default_on_lost: self.default_on_lost,
                identity,
            }),
        }
    }
}
