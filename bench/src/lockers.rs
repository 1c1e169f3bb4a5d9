//! The ways of taking and releasing a lock that are measured side by side, on one server or
//! on a Redis Cluster.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Script};
use rlock_runtime::__private_0_1::cluster_slot;
use rlock_runtime::__private_0_1::script_calls::ScriptCalls;
use rlock_runtime::{LockClient, LockError, distributed_lock};

use crate::BenchError;

/// The lease of every lock in the uncontended and distinct-key workloads.
pub const TTL: Duration = Duration::from_secs(10);
/// Bound on one lock+unlock cycle, so that a stuck server cannot hang the run.
pub const CYCLE_LIMIT: Duration = Duration::from_secs(5);

/// The compare-and-delete release of the floor (the redis.io recipe, as rslock sends it).
pub const FLOOR_RELEASE: &str = r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Floor,
    /// rlock's own acquire and release scripts sent by hand: separates the server-side cost
    /// of its scripts from the client library's.
    Scripts,
    Manual,
    Macro,
    Rslock,
    Redlock,
    /// The floor's commands on a cluster, each sent by hand to its key's master over a
    /// connection per master: the floor without the cluster connection's dispatch. Measured
    /// in (e) only, so not among [`Kind::ALL`].
    FloorByNode,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Floor,
        Kind::Scripts,
        Kind::Manual,
        Kind::Macro,
        Kind::Rslock,
        Kind::Redlock,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Floor => "floor (SET NX PX + EVALSHA by hand)",
            Kind::Scripts => "rlock's two scripts by hand (diagnostic)",
            Kind::Manual => "rlock, manual API",
            Kind::Macro => "rlock, `#[distributed_lock]`",
            Kind::Rslock => "rslock 0.10",
            Kind::Redlock => "redlock 2.0",
            Kind::FloorByNode => "floor by node (the same, a connection per master, by hand)",
        }
    }

    /// The short name of ratio lines.
    pub fn short(self) -> &'static str {
        match self {
            Kind::Floor => "floor",
            Kind::Scripts => "scripts by hand",
            Kind::Manual => "manual",
            Kind::Macro => "macro",
            Kind::Rslock => "rslock",
            Kind::Redlock => "redlock",
            Kind::FloorByNode => "floor by node",
        }
    }

    /// Its name on the command line: the short name, spaces written as `-`.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Scripts => "scripts-by-hand",
            Kind::FloorByNode => "floor-by-node",
            other => other.short(),
        }
    }

    /// The implementation named `name` on the command line.
    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.flag() == name)
    }

    /// The commands this implementation sends itself (not from inside Lua): each is one
    /// round trip. Connection set-up commands are listed for all.
    pub fn top_level(self) -> &'static [&'static str] {
        const SET_THEN_SCRIPT: &[&str] = &[
            "set",
            "evalsha",
            "eval",
            "script|load",
            "hello",
            "client|setinfo",
            "select",
            "ping",
            "auth",
        ];
        // `rpushx`: a client already waiting for the key joins its queue with it (a
        // `pexpire` may ride in the same round trip).
        const SCRIPTS_AND_FEED: &[&str] = &[
            "evalsha",
            "eval",
            "rpushx",
            "script|load",
            "subscribe",
            "unsubscribe",
            "hello",
            "client|setinfo",
            "select",
            "ping",
            "auth",
        ];
        match self {
            Kind::Floor | Kind::FloorByNode | Kind::Rslock | Kind::Redlock => SET_THEN_SCRIPT,
            Kind::Manual | Kind::Macro | Kind::Scripts => SCRIPTS_AND_FEED,
        }
    }
}

/// What renewal sends: scripts only (the `SET`/`GET`/`PEXPIRE` in them run inside Redis).
pub const RENEWAL_TOP_LEVEL: &[&str] = &["evalsha", "eval", "script|load"];

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// A key number never used before in this run.
pub fn fresh() -> u64 {
    NEXT_KEY.fetch_add(1, Ordering::Relaxed)
}

/// The minimum by hand: `SET key token NX PX ttl`, then the compare-and-delete by `EVALSHA`,
/// on one multiplexed connection (or on a cluster connection, which routes each command by
/// its key's slot).
#[derive(Clone)]
pub struct Floor<C = MultiplexedConnection> {
    conn: C,
    release: Arc<Script>,
    id: u128,
    next: Arc<AtomicU64>,
}

impl Floor {
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let client = redis::Client::open(url)?;
        let conn = tokio::time::timeout(
            Duration::from_secs(5),
            client.get_multiplexed_async_connection(),
        )
        .await??;
        Self::on(conn).await
    }
}

impl Floor<ClusterConnection> {
    /// The floor on a Redis Cluster found from `seeds` (`redis://` URLs), through the `redis`
    /// crate's own cluster connection.
    pub async fn cluster(seeds: &[String]) -> Result<Self, BenchError> {
        let client = redis::cluster::ClusterClient::new(seeds.iter().map(String::as_str))?;
        let conn =
            tokio::time::timeout(Duration::from_secs(5), client.get_async_connection()).await??;
        Self::on(conn).await
    }
}

impl<C: ConnectionLike + Clone + Send + Sync> Floor<C> {
    /// Loads the scripts (on every master of a cluster) before anything is timed.
    async fn on(mut conn: C) -> Result<Self, BenchError> {
        let release = Script::new(FLOOR_RELEASE);
        release.load_async(&mut conn).await?;
        // rlock's lock scripts, for [`Kind::Scripts`].
        for load in ScriptCalls::lock("bench:load", TTL).loads() {
            load.query_async::<String>(&mut conn).await?;
        }
        Ok(Self {
            conn,
            release: Arc::new(release),
            id: fastrand::u128(..),
            next: Arc::new(AtomicU64::new(1)),
        })
    }

    fn token(&self) -> String {
        format!(
            "{:032x}:{}",
            self.id,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// rlock's acquire script (lock + fence key) and release script (compare, look at the
    /// queue, delete), each by `EVALSHA`, with the arguments rlock gives them: the release of
    /// a lease taken without waiting is bare, its token alone.
    pub async fn scripts_cycle(&self, n: u64) -> Result<(), BenchError> {
        let key = format!("bench:{n}");
        let token = self.token();
        let mut conn = self.conn.clone();
        // The runtime's own calls (as the store builds them), sent as `EVALSHA`.
        let calls = ScriptCalls::lock(&key, TTL).by_hash();
        let (acquired, _fence): (i64, i64) = calls
            .acquire_once(&token, false)
            .query_async(&mut conn)
            .await?;
        if acquired != 1 {
            return Err(format!("scripts: {key} was taken").into());
        }
        let deleted: i64 = calls.release_bare(&token).query_async(&mut conn).await?;
        if deleted != 1 {
            return Err(format!("scripts: {key} was lost").into());
        }
        Ok(())
    }

    pub async fn cycle(&self, n: u64) -> Result<(), BenchError> {
        let key = format!("bench:{n}");
        let token = self.token();
        let mut conn = self.conn.clone();
        let set: redis::Value = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        if set != redis::Value::Okay {
            return Err(format!("floor: {key} was taken").into());
        }
        let deleted: i64 = self
            .release
            .key(&key)
            .arg(&token)
            .invoke_async(&mut conn)
            .await?;
        if deleted != 1 {
            return Err(format!("floor: {key} was lost").into());
        }
        Ok(())
    }
}

/// The manual API, as its docs show it.
pub async fn manual_cycle(client: &LockClient, n: u64) -> Result<(), BenchError> {
    let guard = client.lock(format!("bench:{n}")).ttl(TTL).acquire().await?;
    guard.release().await?;
    Ok(())
}

/// The attribute, on an empty body.
#[distributed_lock(key = "bench:<i>", ttl = "10s", client = client)]
pub async fn macro_cycle(client: &LockClient, i: u64) -> Result<(), LockError> {
    Ok(())
}

/// rslock through its documented `lock` / `unlock`.
pub async fn rslock_cycle(manager: &rslock::LockManager, n: u64) -> Result<(), BenchError> {
    let key = format!("bench:{n}");
    let lock = manager.lock(key.as_str(), TTL).await?;
    manager.unlock(&lock).await;
    Ok(())
}

/// redlock through its documented (blocking) `lock` / `unlock`. Call from a blocking thread.
pub fn redlock_cycle(rl: &redlock::RedLock, n: u64) -> Result<(), BenchError> {
    let key = format!("bench:{n}");
    match rl.lock(key.as_bytes(), TTL.as_millis() as usize)? {
        Some(lock) => {
            rl.unlock(&lock);
            Ok(())
        }
        None => Err(format!("redlock: {key} was taken").into()),
    }
}

/// Something that runs one lock+unlock cycle of an implementation on key number `n`.
pub trait Cycle: Clone + Send + Sync + 'static {
    fn cycle(&self, kind: Kind, n: u64) -> impl Future<Output = Result<(), BenchError>> + Send;
}

/// Bounds one cycle by [`CYCLE_LIMIT`].
pub async fn bounded<T>(run: impl Future<Output = Result<T, BenchError>>) -> Result<T, BenchError> {
    tokio::time::timeout(CYCLE_LIMIT, run).await?
}

/// One handle of every implementation, on one server.
#[derive(Clone)]
pub struct Lockers {
    pub floor: Floor,
    pub client: LockClient,
    pub rslock: rslock::LockManager,
    pub redlock: Arc<redlock::RedLock>,
}

impl Lockers {
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        Ok(Self {
            floor: Floor::connect(url).await?,
            client: LockClient::connect(url).await?,
            rslock: rslock::LockManager::new(vec![url.to_owned()]),
            redlock: Arc::new(redlock::RedLock::new(vec![url.to_owned()])),
        })
    }
}

impl Cycle for Lockers {
    /// One lock+unlock of a fresh key, for the async implementations (not redlock).
    async fn cycle(&self, kind: Kind, n: u64) -> Result<(), BenchError> {
        bounded(async {
            match kind {
                Kind::Floor => self.floor.cycle(n).await,
                Kind::Scripts => self.floor.scripts_cycle(n).await,
                Kind::Manual => manual_cycle(&self.client, n).await,
                Kind::Macro => Ok(macro_cycle(&self.client, n).await?),
                Kind::Rslock => rslock_cycle(&self.rslock, n).await,
                Kind::Redlock => Err("redlock is blocking; use redlock_cycle".into()),
                Kind::FloorByNode => Err("the floor by node is measured on the cluster".into()),
            }
        })
        .await
    }
}

/// The floor and rlock on one Redis Cluster (the peers take single-server URLs only).
#[derive(Clone)]
pub struct ClusterLockers {
    pub floor: Floor<ClusterConnection>,
    pub by_node: Floor<ByNode>,
    pub client: LockClient,
}

impl ClusterLockers {
    /// `url` is the cluster's `redis+cluster://` URL for rlock, `seeds` the same nodes as
    /// `redis://` URLs for the floor.
    pub async fn connect(url: &str, seeds: &[String]) -> Result<Self, BenchError> {
        Ok(Self {
            floor: Floor::cluster(seeds).await?,
            by_node: Floor::on(ByNode::connect(seeds).await?).await?,
            client: LockClient::connect(url).await?,
        })
    }
}

impl Cycle for ClusterLockers {
    async fn cycle(&self, kind: Kind, n: u64) -> Result<(), BenchError> {
        bounded(async {
            match kind {
                Kind::Floor => self.floor.cycle(n).await,
                Kind::FloorByNode => self.by_node.cycle(n).await,
                Kind::Manual => manual_cycle(&self.client, n).await,
                other => Err(format!("{} is not measured on the cluster", other.label()).into()),
            }
        })
        .await
    }
}

/// A cluster's masters, each command sent by hand to its key's: see [`Kind::FloorByNode`].
/// The slot table is read once, since the bench's cluster does not change while it runs, and
/// `SCRIPT` goes to every master.
#[derive(Clone)]
pub struct ByNode {
    masters: Arc<Vec<MultiplexedConnection>>,
    /// Each slot's master, as an index into `masters`.
    owners: Arc<Vec<usize>>,
}

impl ByNode {
    /// Reads the slot table from the first of `seeds` (`redis://` URLs) and connects to
    /// every master.
    pub async fn connect(seeds: &[String]) -> Result<Self, BenchError> {
        let seed = seeds.first().ok_or("no cluster seed")?;
        let open = |url: String| async move {
            let client = redis::Client::open(url)?;
            let conn = tokio::time::timeout(
                Duration::from_secs(5),
                client.get_multiplexed_async_connection(),
            )
            .await??;
            Ok::<_, BenchError>(conn)
        };
        let mut conn = open(seed.clone()).await?;
        let slots: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        let redis::Value::Array(ranges) = slots else {
            return Err("CLUSTER SLOTS: not an array".into());
        };
        let (mut addresses, mut owners) = (Vec::<(String, i64)>::new(), vec![0; 16384]);
        for range in ranges {
            let redis::Value::Array(fields) = range else {
                return Err("CLUSTER SLOTS: a range not an array".into());
            };
            let [
                redis::Value::Int(first),
                redis::Value::Int(last),
                redis::Value::Array(master),
                ..,
            ] = fields.as_slice()
            else {
                return Err("CLUSTER SLOTS: a range of another shape".into());
            };
            let [host, redis::Value::Int(port), ..] = master.as_slice() else {
                return Err("CLUSTER SLOTS: a master of another shape".into());
            };
            let address = (redis::from_redis_value_ref::<String>(host)?, *port);
            let index = match addresses.iter().position(|a| *a == address) {
                Some(index) => index,
                None => {
                    addresses.push(address);
                    addresses.len() - 1
                }
            };
            for slot in *first..=*last {
                if let Some(owner) = usize::try_from(slot).ok().and_then(|s| owners.get_mut(s)) {
                    *owner = index;
                }
            }
        }
        let mut masters = Vec::new();
        for (host, port) in addresses {
            masters.push(open(format!("redis://{host}:{port}/")).await?);
        }
        Ok(Self {
            masters: Arc::new(masters),
            owners: Arc::new(owners),
        })
    }

    /// The master `cmd` goes to: its key's (a script's first key, `SET`'s key), or the
    /// first.
    fn master_of(&self, cmd: &Cmd) -> MultiplexedConnection {
        let args: Vec<&[u8]> = cmd
            .args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes),
                _ => None,
            })
            .collect();
        let key = match args.first() {
            Some(name)
                if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") =>
            {
                args.get(3)
            }
            _ => args.get(1),
        };
        let owner = key.map_or(0, |key| self.owners[usize::from(cluster_slot(key))]);
        self.masters[owner].clone()
    }
}

impl ConnectionLike for ByNode {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let is_script = cmd
                .args_iter()
                .next()
                .is_some_and(|arg| matches!(arg, redis::Arg::Simple(name) if name.eq_ignore_ascii_case(b"SCRIPT")));
            if is_script {
                let mut reply = redis::Value::Nil;
                for master in self.masters.iter() {
                    reply = master.clone().req_packed_command(cmd).await?;
                }
                return Ok(reply);
            }
            self.master_of(cmd).req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let mut conn = match pipeline.cmd_iter().next() {
                Some(cmd) => self.master_of(cmd),
                None => self.masters[0].clone(),
            };
            conn.req_packed_commands(pipeline, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
