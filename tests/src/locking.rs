//! Small steps that many tests take with a lock client.

use std::time::{Duration, Instant};

use rlock_runtime::{KeyKind, LockClient, LockError, LockGuard, LockRequest};

use crate::RedisServer;
use crate::deploy::ClusterDeployment;

/// A client of `server` whose commands time out after `timeout`.
///
/// # Panics
///
/// When the server cannot be reached.
pub async fn client_for(server: &RedisServer, timeout: Duration) -> LockClient {
    client_at(&server.url(), timeout).await
}

/// How long a test lets a waiter wait: long enough for any grant on a loaded machine; never
/// a measured time.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A client of `server` with the default configuration.
///
/// # Panics
///
/// When it cannot connect.
pub async fn client(server: &RedisServer) -> LockClient {
    let url = server.url();
    LockClient::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// A client of `url` (any topology's URL, or a proxy in front of a server) whose commands
/// time out after `timeout`.
///
/// # Panics
///
/// When it cannot connect.
pub async fn client_at(url: &str, timeout: Duration) -> LockClient {
    LockClient::builder()
        .url(url)
        .command_timeout(timeout)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// A client of `url` as a service with a user of its own would configure one: the namespace
/// `app`, commands timing out after 2 s (the tests of users with limited rights).
///
/// # Panics
///
/// When it cannot connect.
pub async fn app_client(url: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .namespace("app")
        .command_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// The value stored under `key` on `server` (for a lock: its owner token).
///
/// # Panics
///
/// When the server does not answer.
pub async fn stored(server: &RedisServer, key: &str) -> Option<String> {
    let mut raw = server.raw().await;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap_or_else(|e| panic!("GET {key} on port {}: {e}", server.port()))
}

/// A kind of lease a test takes: each names its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Of {
    /// The lock (`client.lock`).
    Lock,
    /// A permit of a semaphore of this many (`client.semaphore`).
    Permit(u32),
    /// A read lease of a read-write lock (`client.read_lock`).
    Read,
    /// The upgradeable read lease of a read-write lock (`client.upgradeable_read_lock`).
    UpgradeableRead,
    /// The write lease of a read-write lock (`client.write_lock`).
    Write,
}

impl Of {
    /// `client`'s request of `key` as this kind.
    pub fn request<'a>(self, client: &'a LockClient, key: &str) -> LockRequest<'a> {
        match self {
            Self::Lock => client.lock(key),
            Self::Permit(permits) => client.semaphore(key, permits),
            Self::Read => client.read_lock(key),
            Self::UpgradeableRead => client.upgradeable_read_lock(key),
            Self::Write => client.write_lock(key),
        }
    }

    /// What a key holds while this kind is held on it.
    pub fn key_kind(self) -> KeyKind {
        match self {
            Self::Lock => KeyKind::Lock,
            Self::Permit(_) => KeyKind::Semaphore,
            Self::Read | Self::UpgradeableRead | Self::Write => KeyKind::ReadWriteLock,
        }
    }

    /// Whether `key` is held as this kind, by this kind's own inspection.
    ///
    /// # Errors
    ///
    /// The inspection's error (another kind's name is [`LockError::WrongKind`]).
    pub async fn held(self, client: &LockClient, key: &str) -> Result<bool, LockError> {
        Ok(match self {
            Self::Lock => client.inspect(key).await?.held,
            Self::Permit(_) => client.inspect_semaphore(key).await?.in_use > 0,
            Self::Read | Self::UpgradeableRead | Self::Write => {
                let info = client.inspect_read_write(key).await?;
                info.writer || info.readers > 0
            }
        })
    }

    /// This kind's force-unlock of `key`: how many leases it ended.
    ///
    /// # Errors
    ///
    /// The force-unlock's error (another kind's name is [`LockError::WrongKind`]).
    pub async fn force_unlock(self, client: &LockClient, key: &str) -> Result<u32, LockError> {
        match self {
            Self::Lock => client.force_unlock(key).await.map(u32::from),
            Self::Permit(_) => client.force_unlock_semaphore(key).await,
            Self::Read | Self::UpgradeableRead | Self::Write => {
                client.force_unlock_read_write(key).await
            }
        }
    }
}

/// Takes `key` as `of` (waiting up to `wait`) and gives it back: proof that it is free for
/// that kind, or frees within `wait`.
///
/// # Panics
///
/// When the lease cannot be taken within `wait` or its release fails.
pub async fn take_and_give_back(client: &LockClient, of: Of, key: &str, wait: Duration) {
    let guard = of
        .request(client, key)
        .wait(wait)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("`{key}` not free as {of:?} within {wait:?}: {e}"));
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("giving back `{key}` ({of:?}): {e}"));
}

/// Takes the lock `key` (waiting up to `wait`) and releases it again:
/// [`take_and_give_back`] as [`Of::Lock`].
///
/// # Panics
///
/// When the lock cannot be taken within `wait` or its release fails.
pub async fn lock_and_release(client: &LockClient, key: &str, wait: Duration) {
    take_and_give_back(client, Of::Lock, key, wait).await;
}

/// Spawns a task that takes `key` (waiting up to `wait`, with a 10 s lease), holds it for
/// `hold`, and releases it: one contender of a queue.
pub fn spawn_contender(
    client: LockClient,
    key: &'static str,
    wait: Duration,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<(), rlock_runtime::LockError>> {
    tokio::spawn(async move {
        let guard = client
            .lock(key)
            .ttl(Duration::from_secs(10))
            .wait(wait)
            .acquire()
            .await?;
        tokio::time::sleep(hold).await;
        guard.release().await
    })
}

/// A task that waits up to `budget` for `key` with `client`, then releases it.
pub fn wait_then_release(
    client: &LockClient,
    key: &'static str,
    budget: Duration,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let client = client.clone();
    tokio::spawn(async move {
        let guard = client.lock(key).wait(budget).acquire().await?;
        guard.release().await
    })
}

/// A handoff: a waiter of `waiter_client` (budget `wait`) queues for `guard`'s key, the holder
/// releases, and the waiter must get the lock (woken by the release announcement) and release
/// it in turn.
///
/// # Panics
///
/// When the release or the waiter's acquisition fails.
pub async fn handoff(guard: LockGuard, waiter_client: &LockClient, wait: Duration) {
    let key = guard.key().clone();
    let waiter = {
        let client = waiter_client.clone();
        let key = key.clone();
        tokio::spawn(async move { client.lock(key).wait(wait).acquire().await })
    };
    // Long enough for the waiter to try once, queue and subscribe.
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("releasing `{key}`: {e}"));
    let next = waiter
        .await
        .unwrap_or_else(|e| panic!("the waiter of `{key}` panicked: {e}"))
        .unwrap_or_else(|e| panic!("the waiter of `{key}` did not get it: {e}"));
    next.release()
        .await
        .unwrap_or_else(|e| panic!("releasing `{key}` again: {e}"));
}

/// Takes `key` as soon as the client serves again after a failover (its connection to the
/// dead master fails first, then it finds the new one), retrying backend errors every 100 ms
/// until `deadline`.
///
/// # Panics
///
/// On any other error, or when it does not serve by `deadline`.
pub async fn serving_again(client: &LockClient, key: &str, deadline: Instant) -> LockGuard {
    loop {
        match client.lock(key).acquire().await {
            Ok(guard) => return guard,
            Err(e) => {
                assert!(e.is_backend(), "{e}");
                assert!(Instant::now() < deadline, "`{key}`: not serving again: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Takes each of `keys` through `client` with lease `ttl` (renewed by the watchdog).
///
/// # Panics
///
/// When an acquisition fails.
pub async fn hold_all(
    client: &LockClient,
    keys: impl IntoIterator<Item = String>,
    ttl: Duration,
) -> Vec<LockGuard> {
    let mut held = Vec::new();
    for key in keys {
        match client.lock(key.as_str()).ttl(ttl).acquire().await {
            Ok(guard) => held.push(guard),
            Err(e) => panic!("holding {key}: {e}"),
        }
    }
    held
}

/// After a failover: checks that every hold not reported lost is stored, with its token, on
/// the server `owner` names for its key now; returns those holds (never kept without the key).
///
/// # Panics
///
/// When a hold is kept but its key is missing or another owner's.
pub async fn kept_or_lost<'h, 's>(
    held: &'h [LockGuard],
    owner: impl Fn(&str) -> &'s RedisServer,
) -> Vec<&'h LockGuard> {
    let mut kept = Vec::new();
    for guard in held.iter().filter(|g| !g.is_lost()) {
        let key = guard.key().as_str();
        assert_eq!(
            stored(owner(key), key).await.as_deref(),
            Some(guard.token()),
            "{key} is not lost, yet the server that owns it now does not hold it"
        );
        kept.push(guard);
    }
    eprintln!(
        "holds kept across the failover: {} of {}",
        kept.len(),
        held.len()
    );
    kept
}

/// What `inspect` and `force_unlock` must do on any backend, with two clients `a` and `b`
/// (two instances) on it: report free, held elsewhere and held here (with its hold count and
/// lease), and break a lock so that a waiter queued for it is handed it and the breaking
/// client's own hold is marked lost.
pub async fn inspect_and_force_unlock(a: &LockClient, b: &LockClient, key: &str) {
    let free = a.inspect(key).await.expect("inspect");
    assert!(
        !free.held && free.remaining.is_none() && free.hold_count == 0,
        "{free:?}"
    );

    let ttl = Duration::from_secs(10);
    let guard = b.lock(key).ttl(ttl).acquire().await.expect("free lock");
    let elsewhere = a.inspect(key).await.expect("inspect");
    assert!(elsewhere.held && !elsewhere.held_here, "{elsewhere:?}");
    assert!(
        elsewhere
            .remaining
            .is_some_and(|left| left <= ttl && !left.is_zero())
    );
    let here = b.inspect(key).await.expect("inspect");
    assert!(here.held_here && here.hold_count == 1, "{here:?}");

    // Broken from another instance: a waiter of that instance is handed the lock, and the
    // holder finds out at its release at the latest.
    let waiter = {
        let a = a.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            let guard = a.lock(key.as_str()).wait(ttl).acquire().await?;
            let info = a.inspect(key.as_str()).await?;
            guard.release().await?;
            Ok::<_, rlock_runtime::LockError>(info)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a.force_unlock(key).await.expect("force_unlock"));
    let info = waiter.await.expect("waiter task").expect("waiter");
    assert!(info.held_here, "the waiter was handed the lock: {info:?}");
    assert!(guard.release().await.is_err_and(|e| e.is_lost()));
    assert!(
        !a.force_unlock(key).await.expect("force_unlock"),
        "nothing left to break"
    );

    // Broken by the holder's own client: its hold is lost at once.
    let guard = b.lock(key).ttl(ttl).acquire().await.expect("free lock");
    assert!(b.force_unlock(key).await.expect("force_unlock"));
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires when the client breaks its own lock");
    assert_eq!(a.metrics().forced_unlocks + b.metrics().forced_unlocks, 2);
}

/// Entries in the lock queue `queue`, as Redis names it (`{order:42}:waiters` for the lock
/// `order:42`).
///
/// # Panics
///
/// When Redis does not answer.
pub async fn queue_len(server: &RedisServer, queue: &str) -> usize {
    let mut raw = server.raw().await;
    redis::cmd("LLEN")
        .arg(queue)
        .query_async(&mut raw)
        .await
        .expect("LLEN of a lock queue")
}

/// How many times the waits below look, 10 ms apart: room for a loaded machine.
const LOOKS: u32 = 3000;

/// Waits (at most about 30 s) until the lock queue `queue` holds `n` entries.
///
/// # Panics
///
/// When it never does.
pub async fn wait_queue_len(server: &RedisServer, queue: &str, n: usize) {
    for _ in 0..LOOKS {
        if queue_len(server, queue).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("`{queue}` never had {n} entries");
}

/// Waits (at most about 30 s) until `n` clients listen for `key`'s hand-offs, each on its own
/// channel (one server), so that a release finds them live.
///
/// # Panics
///
/// When they never do.
pub async fn wait_listening(server: &RedisServer, key: &str, n: usize) {
    let pattern = format!("rlock:released:{key}:*");
    for _ in 0..LOOKS {
        if server.channels(&pattern, false).await.len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("`{key}` never had {n} clients listening");
}

/// How many of `keys` still exist on `conn`'s server: 0 as soon as none does, else the count
/// after about ten seconds of looking (a release or a withdrawal sent in the background may
/// still be on its way; a lease left behind expires only later).
///
/// # Panics
///
/// When the server does not answer.
pub async fn keys_left(conn: &mut redis::aio::MultiplexedConnection, keys: &[&str]) -> u32 {
    let mut left = u32::MAX;
    for _ in 0..100 {
        left = redis::cmd("EXISTS")
            .arg(keys)
            .query_async(conn)
            .await
            .unwrap_or_else(|e| panic!("EXISTS {keys:?}: {e}"));
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    left
}

/// Cancels `waiter` (a spawned acquisition) at a moment around the release of `held` that
/// `round` picks: before the release in even rounds, after it in odd ones, 0-3 ms apart; then
/// waits for the waiter's task to end. A cancelled waiter must never be left holding.
///
/// # Panics
///
/// When the release fails.
pub async fn cancel_around_release<T>(
    round: u64,
    held: LockGuard,
    waiter: tokio::task::JoinHandle<T>,
) {
    tokio::time::sleep(Duration::from_millis(round % 4)).await;
    if round.is_multiple_of(2) {
        waiter.abort();
        held.release()
            .await
            .unwrap_or_else(|e| panic!("release: {e}"));
    } else {
        held.release()
            .await
            .unwrap_or_else(|e| panic!("release: {e}"));
        tokio::time::sleep(Duration::from_millis(round % 3)).await;
        waiter.abort();
    }
    let _ = waiter.await;
}

/// Where a test's keys live, for the checks that look at Redis itself: one server, or a
/// cluster, where each key lives on the master serving its slot and its hand-offs are
/// announced on sharded channels named with the key's hash tag.
#[derive(Debug, Clone, Copy)]
pub enum KeysOn<'a> {
    /// Every key on this server.
    Server(&'a RedisServer),
    /// Each key on the master of its slot.
    Cluster(&'a ClusterDeployment),
}

impl KeysOn<'_> {
    /// The server holding `key` now.
    ///
    /// # Panics
    ///
    /// When no master of the cluster serves `key`'s slot.
    pub fn node(&self, key: &str) -> &RedisServer {
        match self {
            Self::Server(server) => server,
            Self::Cluster(cluster) => cluster
                .master_of_key(key)
                .unwrap_or_else(|| panic!("no master serves `{key}`")),
        }
    }

    /// [`queued_and_listening`] on the server holding `key`: waits until its queue holds
    /// `entries` entries and `clients` clients listen for its hand-offs.
    ///
    /// # Panics
    ///
    /// When either never happens.
    pub async fn queued_and_listening(&self, key: &str, entries: usize, clients: usize) {
        match self {
            Self::Server(server) => queued_and_listening(server, key, entries, clients).await,
            Self::Cluster(cluster) => {
                let node = self.node(key);
                wait_queue_len(node, &format!("{{{key}}}:waiters"), entries).await;
                // Without sharded pub/sub nobody listens, and a release hands the lock to
                // the queue's head, which finds it at its next check in.
                if !cluster.has_sharded_pubsub() {
                    return;
                }
                let pattern = format!("rlock:released:{{{key}}}:{key}:*");
                for _ in 0..LOOKS {
                    if node.channels(&pattern, true).await.len() == clients {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("`{key}` never had {clients} clients listening on its shard");
            }
        }
    }
}

/// Waits until `key`'s queue in Redis holds `entries` entries and `clients` clients listen
/// for its hand-offs (one channel per waiting client, `rlock:released:<key>:<client>`; on
/// one server). A release skips the entry of a client whose subscription is not confirmed
/// yet (its waiter comes back at its next check in), so a test that checks who a release
/// admits waits for both.
///
/// # Panics
///
/// When either never happens (see [`wait_queue_len`] and [`wait_listening`]).
pub async fn queued_and_listening(server: &RedisServer, key: &str, entries: usize, clients: usize) {
    wait_queue_len(server, &format!("{{{key}}}:waiters"), entries).await;
    wait_listening(server, key, clients).await;
}
