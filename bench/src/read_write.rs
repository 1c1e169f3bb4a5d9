//! (g) Read-write locks: an uncontended read and write (take, give back) beside the
//! read-write lock's own two scripts sent by hand (the floor) and beside the peer crates'
//! read-write locks (distributed-lock, distkit, redisson); and readers admitted together: a
//! writer releases while readers of several clients wait, and one release admits them all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distkit::DistkitRedisKey;
use distributed_lock_core::traits::{
    DistributedReaderWriterLock, LockHandle, ReaderWriterLockProvider,
};
use distributed_lock_redis::RedisLockProvider;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redisson::{AsyncRedissonClient, RedissonConfig};
use rlock_runtime::__private_0_1::script_calls::ScriptCalls;
use rlock_runtime::LockClient;

use crate::BenchError;
use crate::lockers::fresh;
use crate::stats::{self, Delta, Probe};

const TTL: Duration = Duration::from_secs(10);
/// A waiting reader's budget: never reached by a working lock.
const WAIT_BUDGET: Duration = Duration::from_secs(30);

/// Which side of the lock a row takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Read,
    Write,
}

/// Who takes it in the uncontended rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Who {
    /// The read-write lock's acquire and release scripts by `EVALSHA`, with rlock's
    /// arguments: what Redis must do.
    Floor,
    /// `client.read_lock(key)` / `client.write_lock(key)`.
    Rlock,
    /// distributed-lock 0.2's `RedisReaderWriterLock` (crate `distributed-lock-redis`).
    DistributedLock,
    /// distkit 0.7's `RwLock`.
    Distkit,
    /// redisson 0.1's `AsyncRReadWriteLock`.
    Redisson,
}

/// One uncontended row: who takes which side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Way {
    pub role: Role,
    pub who: Who,
}

impl Way {
    pub const WHO: [Who; 5] = [
        Who::Floor,
        Who::Rlock,
        Who::DistributedLock,
        Who::Distkit,
        Who::Redisson,
    ];

    /// Every row: the reads, then the writes.
    pub fn all() -> impl Iterator<Item = Way> {
        [Role::Read, Role::Write]
            .into_iter()
            .flat_map(|role| Self::WHO.into_iter().map(move |who| Way { role, who }))
    }

    pub fn label(self) -> &'static str {
        match (self.role, self.who) {
            (Role::Read, Who::Floor) => "read: floor, the scripts by hand",
            (Role::Read, Who::Rlock) => "read: rlock `read_lock`",
            (Role::Read, Who::DistributedLock) => "read: distributed-lock 0.2",
            (Role::Read, Who::Distkit) => "read: distkit 0.7",
            (Role::Read, Who::Redisson) => "read: redisson 0.1",
            (Role::Write, Who::Floor) => "write: floor, the scripts by hand",
            (Role::Write, Who::Rlock) => "write: rlock `write_lock`",
            (Role::Write, Who::DistributedLock) => "write: distributed-lock 0.2",
            (Role::Write, Who::Distkit) => "write: distkit 0.7",
            (Role::Write, Who::Redisson) => "write: redisson 0.1",
        }
    }
}

/// What one way's uncontended cycles cost, measured apart from the other ways.
#[derive(Debug)]
pub struct Cost {
    pub way: &'static str,
    pub cycles: u64,
    /// Cycles per second.
    pub rate: f64,
    /// This process's CPU over the cycles.
    pub client_cpu: Duration,
    /// What Redis ran meanwhile.
    pub server: Delta,
}

/// What the uncontended rows need: the clients and the scripts by hand.
pub struct ReadWrite {
    client: LockClient,
    conn: MultiplexedConnection,
    manager: ConnectionManager,
    distributed_lock: RedisLockProvider,
    redisson: AsyncRedissonClient,
}

impl ReadWrite {
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let redis = redis::Client::open(url)?;
        let mut conn = redis.get_multiplexed_async_connection().await?;
        // The runtime's read-write scripts, for the rows that send them by hand.
        for calls in [
            ScriptCalls::reader("bench:load", TTL),
            ScriptCalls::writer("bench:load", TTL),
        ] {
            for load in calls.loads() {
                load.query_async::<String>(&mut conn).await?;
            }
        }
        Ok(Self {
            client: LockClient::connect(url).await?,
            conn,
            manager: redis.get_connection_manager().await?,
            // The same 10 s lease as rlock's, renewed at a third of it.
            distributed_lock: RedisLockProvider::builder()
                .url(url)
                .expiry(TTL)
                .extension_cadence(TTL / 3)
                .min_validity(TTL.mul_f64(0.9))
                .build()
                .await?,
            redisson: AsyncRedissonClient::new(RedissonConfig::single_server(url)).await?,
        })
    }

    /// One take-and-give-back of a fresh key, `way`.
    async fn cycle(&self, way: Way) -> Result<(), BenchError> {
        let key = format!("bench:rw:{}", fresh());
        let writing = way.role == Role::Write;
        match way.who {
            Who::Rlock => {
                let request = if writing {
                    self.client.write_lock(key)
                } else {
                    self.client.read_lock(key)
                };
                Ok(request.ttl(TTL).acquire().await?.release().await?)
            }
            Who::Floor => {
                // The runtime's own calls (as the store builds them), sent as `EVALSHA`.
                let calls = if writing {
                    ScriptCalls::writer(&key, TTL)
                } else {
                    ScriptCalls::reader(&key, TTL)
                }
                .by_hash();
                let (mut conn, token) = (self.conn.clone(), format!("bench:{}", fresh()));
                let taken: Vec<i64> = calls
                    .acquire_once(&token, false)
                    .query_async(&mut conn)
                    .await?;
                if taken.first() != Some(&1) {
                    return Err(format!("floor: {key} not taken").into());
                }
                let given: i64 = calls.release(&token, false).query_async(&mut conn).await?;
                if given != 1 {
                    return Err(format!("floor: {key} was lost").into());
                }
                Ok(())
            }
            Who::DistributedLock => {
                let lock = self.distributed_lock.create_reader_writer_lock(&key);
                if writing {
                    let Some(handle) = lock.try_acquire_write().await? else {
                        return Err(format!("distributed-lock: {key} not taken").into());
                    };
                    Ok(handle.release().await?)
                } else {
                    let Some(handle) = lock.try_acquire_read().await? else {
                        return Err(format!("distributed-lock: {key} not taken").into());
                    };
                    Ok(handle.release().await?)
                }
            }
            Who::Distkit => {
                // distkit refuses a ':' in a key (it adds its own namespace with one).
                let name = DistkitRedisKey::try_from(key.replace(':', "_"))?;
                let options = distkit::lock::LockOptions::new(name, self.manager.clone());
                let lock = distkit::lock::RwLock::new(distkit::lock::LockOptions {
                    ttl: TTL,
                    ..options
                });
                if writing {
                    lock.try_write().await?.release().await?;
                } else {
                    lock.try_read().await?.release().await?;
                }
                Ok(())
            }
            Who::Redisson => {
                let lock = self.redisson.get_read_write_lock(&key, TTL);
                let taken = if writing {
                    let write = lock.write_lock();
                    write.try_lock().await? && write.unlock().await?
                } else {
                    let read = lock.read_lock();
                    read.try_lock().await? && read.unlock().await?
                };
                if !taken {
                    return Err(format!("redisson: {key} not taken and given back").into());
                }
                Ok(())
            }
        }
    }

    /// `n` cycles one after the other: the rate, in cycles per second.
    pub async fn rate(&self, way: Way, n: u64) -> Result<f64, BenchError> {
        let start = Instant::now();
        for _ in 0..n {
            self.cycle(way).await?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64().max(1e-9))
    }
}

/// Readers admitted by one writer's release, over several rounds.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    pub readers: usize,
    pub clients: usize,
    pub rounds: usize,
    /// Per round: announcements the server sent from the release until the last reader
    /// held (`PUBLISH`, one per reader the release named and granted).
    pub announced: Vec<u64>,
    /// Per round: script calls the server ran from the release until the last reader held.
    pub script_calls: Vec<u64>,
    /// Per round: from the release's call to the last reader's grant.
    pub to_last_grant: Vec<Duration>,
    /// The whole of the rounds' server counts.
    pub server: Delta,
}

/// `readers` readers spread over `clients` clients wait behind a writer, `rounds` times; the
/// writer releases and every reader's grant is timed, and the server's script calls counted.
pub async fn admission(
    url: &str,
    probe: &mut Probe,
    readers: usize,
    clients: usize,
    rounds: usize,
) -> Result<Admission, BenchError> {
    let writer = LockClient::connect(url).await?;
    let mut all = Vec::new();
    for _ in 0..clients {
        all.push(LockClient::connect(url).await?);
    }
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut out = Admission {
        readers,
        clients,
        rounds,
        ..Admission::default()
    };
    let start_counts = probe.snapshot().await?;
    for _ in 0..rounds {
        let key = format!("bench:rw:admit:{}", fresh());
        let held = writer.write_lock(key.as_str()).ttl(TTL).acquire().await?;
        let granted = Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for r in 0..readers {
            let (client, key, granted) = (all[r % clients].clone(), key.clone(), granted.clone());
            handles.push(tokio::spawn(async move {
                let guard = client
                    .read_lock(key.as_str())
                    .ttl(TTL)
                    .wait(WAIT_BUDGET)
                    .acquire()
                    .await?;
                granted.lock().await.push(Instant::now());
                Ok::<_, BenchError>(guard)
            }));
        }
        // Every reader stands in the queue before the release.
        let queue = format!("{{{key}}}:waiters");
        let waited = Instant::now();
        loop {
            let length: usize = redis::cmd("LLEN").arg(&queue).query_async(&mut raw).await?;
            if length == readers {
                break;
            }
            if waited.elapsed() > WAIT_BUDGET {
                return Err(format!("only {length} of {readers} readers queued").into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let before = probe.snapshot().await?;
        let released = Instant::now();
        held.release().await?;
        let mut guards = Vec::new();
        for handle in handles {
            guards.push(tokio::time::timeout(WAIT_BUDGET, handle).await???);
        }
        let after = probe.snapshot().await?;
        let delta = stats::delta(&before, &after);
        let scripts = delta.calls.get("evalsha").copied().unwrap_or(0)
            + delta.calls.get("eval").copied().unwrap_or(0);
        let last = granted
            .lock()
            .await
            .iter()
            .max()
            .copied()
            .unwrap_or(released);
        out.announced
            .push(delta.calls.get("publish").copied().unwrap_or(0));
        out.script_calls.push(scripts);
        out.to_last_grant
            .push(last.saturating_duration_since(released));
        for guard in guards {
            guard.release().await?;
        }
    }
    out.server = stats::delta(&start_counts, &probe.snapshot().await?);
    Ok(out)
}
