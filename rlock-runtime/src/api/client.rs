//! The lock client: a cheap, cloneable handle on a backend, and how it is built.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::api::options::OnLost;
use crate::backend::Backend;
use crate::backend::cluster::{ClusterOpener, ClusterStore};
use crate::backend::endpoint::Endpoint;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisNode;
use crate::backend::redlock::Redlock;
use crate::backend::sentinel::SentinelMaster;
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
                engine: Engine::new(inner.engine.backend.clone()),
                namespace: inner.namespace.clone(),
                default_ttl: inner.default_ttl,
                command_timeout: inner.command_timeout,
                min_replicas: inner.min_replicas,
                default_wait: inner.default_wait,
                default_on_lost: inner.default_on_lost,
            }),
        }
    }

    /// What this client has done so far: acquisitions, busy and lost locks, renewals, waits.
    /// See [`LockMetrics`] for an example.
    pub fn metrics(&self) -> LockMetrics {
        LockMetrics {
            master_switches: self.inner.engine.backend.master_switches(),
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
    /// slot, and announces releases on sharded channels (Redis 7). Same as
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
        if let Some(sentinel) = sentinel_parts(&url)? {
            let endpoint = sentinel.endpoint(self.tls_roots())?;
            let node = RedisNode::connect(endpoint, self.command_timeout).await?;
            return Ok(self.build(Backend::Redis(Arc::new(node))));
        }
        if let Some(seeds) = cluster_seeds(&url)? {
            let opener = ClusterOpener::new(seeds, self.command_timeout)?;
            let store = ClusterStore::connect(opener, self.command_timeout).await?;
            return Ok(self.build(Backend::Cluster(Arc::new(store))));
        }
        if let Some(masters) = redlock_masters(&url)? {
            let clients = masters
                .iter()
                .map(|m| RedisNode::client(m))
                .collect::<Result<Vec<_>, _>>()?;
            let redlock = Redlock::connect(clients, self.command_timeout).await?;
            return Ok(self.build(Backend::Redlock(Arc::new(redlock))));
        }
        let client = RedisNode::client_with_roots(&url, self.tls_roots())?;
        let backend =
            RedisNode::connect(Endpoint::Fixed(Arc::new(client)), self.command_timeout).await?;
        Ok(self.build(Backend::Redis(Arc::new(backend))))
    }

    /// Builds an in-process client (the URL, if any, is ignored).
    pub fn in_memory(self) -> LockClient {
        self.build(Backend::Memory(MemoryBackend::default()))
    }

    /// The PEM certificates to trust for TLS instead of the public roots, if any.
    fn tls_roots(&self) -> Option<&[u8]> {
        #[cfg(feature = "tls")]
        return self.tls_roots.as_deref();
        #[cfg(not(feature = "tls"))]
        None
    }

    fn check(&self) -> Result<(), LockError> {
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

    fn build(self, backend: Backend) -> LockClient {
        LockClient {
            inner: Arc::new(ClientShared {
                engine: Engine::new(backend),
                namespace: self.namespace.filter(|ns| !ns.is_empty()),
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
            }),
        }
    }
}

/// `scheme`, the nodes joined by commas, then `tail`: a multi-node URL.
fn joined<S: Into<String>>(scheme: &str, nodes: impl IntoIterator<Item = S>, tail: &str) -> String {
    let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
    format!("{scheme}{}{tail}", nodes.join(","))
}

/// The scheme of a Sentinel URL.
const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// The scheme of a Sentinel URL whose sentinels and servers are reached over TLS.
const SENTINEL_TLS_SCHEME: &str = "rediss+sentinel://";

/// What a `redis+sentinel://` URL names.
#[derive(Debug, PartialEq, Eq)]
struct SentinelParts {
    sentinels: Vec<String>,
    service: String,
    /// `redis://[auth@]x/[db]`: the master's credentials and database, on a placeholder host.
    master: String,
    /// `rediss+sentinel://`: sentinels and servers over TLS.
    tls: bool,
}

impl SentinelParts {
    /// The sentinels and the master, trusting the PEM `roots` for TLS when given.
    fn endpoint(&self, roots: Option<&[u8]>) -> Result<Endpoint, LockError> {
        use redis::IntoConnectionInfo;
        use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
        let invalid = |e: redis::RedisError| {
            LockError::InvalidConfig(format!("unusable Sentinel URL: {e}; {SENTINEL_FORM}"))
        };
        let scheme = if self.tls { "rediss" } else { "redis" };
        let mut sentinels = Vec::new();
        let mut watched = Vec::new();
        for sentinel in &self.sentinels {
            let url = format!("{scheme}://{sentinel}/");
            let client = RedisNode::client_with_roots(&url, roots)?;
            sentinels.push(client.get_connection_info().addr().clone());
            watched.push(client);
        }
        let master = self
            .master
            .as_str()
            .into_connection_info()
            .map_err(invalid)?;
        let master = master.redis_settings();
        let mut builder =
            SentinelClientBuilder::new(sentinels, &self.service, SentinelServerType::Master)
                .map_err(invalid)?
                .set_client_to_redis_db(master.db());
        if let Some(username) = master.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = master.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        #[cfg(feature = "tls")]
        if self.tls {
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(roots) = roots {
                let certificates = || redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(roots.to_vec()),
                };
                builder = builder
                    .set_client_to_redis_certificates(certificates())
                    .set_client_to_sentinel_certificates(certificates());
            }
        }
        let client = builder.build().map_err(invalid)?;
        Ok(Endpoint::Sentinel(SentinelMaster::watched(
            client,
            self.service.clone(),
            watched,
        )))
    }
}

/// The expected form, for error messages.
const SENTINEL_FORM: &str = "expected redis+sentinel://[user:password@]host1:port1,host2:port2/service[/db] \
     (rediss+sentinel://… for TLS)";

/// The parts of a `redis+sentinel://` or `rediss+sentinel://` URL (`None` for any other URL).
fn sentinel_parts(url: &str) -> Result<Option<SentinelParts>, LockError> {
    let (rest, tls) = match (
        url.strip_prefix(SENTINEL_SCHEME),
        url.strip_prefix(SENTINEL_TLS_SCHEME),
    ) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        (None, None) => return Ok(None),
    };
    let bad = |what: &str| {
        LockError::InvalidConfig(format!("unusable Sentinel URL: {what}; {SENTINEL_FORM}"))
    };
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (format!("{auth}@"), rest),
        None => (String::new(), rest),
    };
    let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no service name"))?;
    let (service, db) = path.split_once('/').unwrap_or((path, ""));
    if service.is_empty() {
        return Err(bad("no service name"));
    }
    let sentinels: Vec<String> = hosts.split(',').map(str::to_owned).collect();
    if sentinels.iter().any(String::is_empty) {
        return Err(bad("an empty sentinel address"));
    }
    Ok(Some(SentinelParts {
        sentinels,
        service: service.to_owned(),
        master: format!("redis://{auth}master/{db}"),
        tls,
    }))
}

/// The scheme of a Redlock URL.
const REDLOCK_SCHEME: &str = "redlock://";
/// The scheme of a Redis Cluster URL.
const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The masters of a `redlock://` URL as `redis://` URLs (`None` for any other URL).
/// `redlock://[user:password@]h1:p1,h2:p2[/db]`, or a list of full URLs (what
/// [`LockClientBuilder::redlock`] makes).
fn redlock_masters(url: &str) -> Result<Option<Vec<String>>, LockError> {
    let Some(rest) = url.strip_prefix(REDLOCK_SCHEME) else {
        return Ok(None);
    };
    node_urls(
        rest,
        "Redlock",
        "redlock://[user:password@]host1:port1,host2:port2,host3:port3[/db]",
    )
    .map(Some)
}

/// The seed nodes of a `redis+cluster://` URL as `redis://` URLs (`None` for any other URL).
fn cluster_seeds(url: &str) -> Result<Option<Vec<String>>, LockError> {
    let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) else {
        return Ok(None);
    };
    node_urls(
        rest,
        "cluster",
        "redis+cluster://[user:password@]host1:port1,host2:port2",
    )
    .map(Some)
}

/// `[auth@]h1:p1,h2:p2[/db]` (or a comma-separated list of full URLs) as one `redis://` URL
/// per node, each with the same credentials and database.
fn node_urls(rest: &str, what: &str, form: &str) -> Result<Vec<String>, LockError> {
    if rest.contains("://") {
        // Full URLs, as the builder's methods join them.
        return Ok(rest.split(',').map(str::to_owned).collect());
    }
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let (hosts, db) = hosts.split_once('/').unwrap_or((hosts, ""));
    if hosts.split(',').any(str::is_empty) {
        return Err(LockError::InvalidConfig(format!(
            "unusable {what} URL: an empty node address; expected {form}"
        )));
    }
    Ok(hosts
        .split(',')
        .map(|h| format!("redis://{auth}{h}/{db}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{cluster_seeds, redlock_masters, sentinel_parts};

    #[test]
    fn sentinel_urls_name_the_sentinels_the_service_and_the_masters_auth() {
        assert_eq!(sentinel_parts("redis://h:1/").unwrap(), None);
        let p = sentinel_parts("redis+sentinel://u:p@s1:1,s2:2/mymaster/2")
            .unwrap()
            .unwrap();
        assert_eq!(p.sentinels, ["s1:1", "s2:2"]);
        assert_eq!(p.service, "mymaster");
        assert_eq!(p.master, "redis://u:p@master/2");
        assert!(!p.tls);
        let p = sentinel_parts("rediss+sentinel://s1:1/m").unwrap().unwrap();
        assert!(p.tls);
        for bad in [
            "redis+sentinel://s1:1",
            "redis+sentinel://s1:1/",
            "redis+sentinel://s1:1,,s2:2/m",
        ] {
            let e = sentinel_parts(bad).unwrap_err().to_string();
            assert!(e.contains("expected redis+sentinel://"), "{bad}: {e}");
        }
    }

    #[test]
    fn cluster_urls_name_the_seeds() {
        assert_eq!(cluster_seeds("redlock://a:1").unwrap(), None);
        assert_eq!(
            cluster_seeds("redis+cluster://u:p@a:1,b:2")
                .unwrap()
                .unwrap(),
            ["redis://u:p@a:1/", "redis://u:p@b:2/"]
        );
        let bad = cluster_seeds("redis+cluster://a:1,")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("expected redis+cluster://"), "{bad}");
    }

    #[test]
    fn redlock_urls_name_each_master() {
        assert_eq!(redlock_masters("redis://h:1/").unwrap(), None);
        assert_eq!(
            redlock_masters("redlock://a:1,b:2,c:3").unwrap().unwrap(),
            ["redis://a:1/", "redis://b:2/", "redis://c:3/"]
        );
        assert_eq!(
            redlock_masters("redlock://u:p@a:1,b:2/3").unwrap().unwrap(),
            ["redis://u:p@a:1/3", "redis://u:p@b:2/3"]
        );
        assert_eq!(
            redlock_masters("redlock://redis://a:1/,rediss://b:2/")
                .unwrap()
                .unwrap(),
            ["redis://a:1/", "rediss://b:2/"]
        );
        let bad = redlock_masters("redlock://a:1,,b:2")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("expected redlock://"), "{bad}");
    }
}
