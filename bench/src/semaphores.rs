//! (f) Semaphores: an uncontended permit (take one, give it back) beside rlock's lock, beside
//! the semaphore's own two scripts sent by hand (the floor: what Redis must do for a permit)
//! and beside the peer crates' semaphores (distributed-lock, redisson); and a contended semaphore, 64 tasks over 4 clients sharing 8 permits, its waits
//! against the FIFO limit and its commands per grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distributed_lock_core::traits::{DistributedSemaphore, LockHandle, SemaphoreProvider};
use distributed_lock_redis::RedisLockProvider;
use redis::aio::MultiplexedConnection;
use redisson::{AsyncRedissonClient, RedissonConfig};
use rlock_runtime::__private_0_1::script_calls::ScriptCalls;
use rlock_runtime::LockClient;

use crate::BenchError;
use crate::lockers::{fresh, manual_cycle};
use crate::stats::{self, Delta, Probe};

const TTL: Duration = Duration::from_secs(10);
/// A waiter's budget in the contended run: never reached by a working semaphore.
const WAIT_BUDGET: Duration = Duration::from_secs(30);

/// How a permit is taken and given back in the uncontended rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// rlock's lock, for comparison: a permit is a lock with a count.
    Lock,
    /// rlock's semaphore (`client.semaphore(key, 8)`).
    Permit,
    /// The semaphore's acquire and release scripts by `EVALSHA`, with rlock's arguments.
    Floor,
    /// distributed-lock 0.2's `RedisDistributedSemaphore` (crate `distributed-lock-redis`).
    DistributedLock,
    /// redisson 0.1's `AsyncRSemaphore`.
    Redisson,
}

impl Way {
    pub const ALL: [Way; 5] = [
        Way::Floor,
        Way::Permit,
        Way::Lock,
        Way::DistributedLock,
        Way::Redisson,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Way::Lock => "rlock lock (for comparison)",
            Way::Permit => "rlock semaphore, 8 permits",
            Way::Floor => "floor: the semaphore's two scripts by hand",
            Way::DistributedLock => "distributed-lock 0.2, 8 permits",
            Way::Redisson => "redisson 0.1, 8 permits",
        }
    }

    /// A peer crate's semaphore, which rlock's permit is divided by.
    pub fn is_peer(self) -> bool {
        matches!(self, Way::DistributedLock | Way::Redisson)
    }
}

/// What the uncontended rows need: a client and the scripts by hand.
pub struct Permits {
    client: LockClient,
    conn: MultiplexedConnection,
    distributed_lock: RedisLockProvider,
    redisson: AsyncRedissonClient,
}

impl Permits {
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        // The runtime's semaphore scripts, for the row that sends them by hand.
        for load in ScriptCalls::permit("bench:load", 8, TTL).loads() {
            load.query_async::<String>(&mut conn).await?;
        }
        Ok(Self {
            client: LockClient::connect(url).await?,
            conn,
            // The same 10 s lease as rlock's permits, renewed at a third of it.
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
        let key = format!("bench:sem:{}", fresh());
        match way {
            Way::Lock => manual_cycle(&self.client, fresh()).await,
            Way::Permit => {
                let permit = self.client.semaphore(key, 8).ttl(TTL).acquire().await?;
                Ok(permit.release().await?)
            }
            Way::Floor => {
                // The runtime's own calls (as the store builds them), sent as `EVALSHA`.
                let calls = ScriptCalls::permit(&key, 8, TTL).by_hash();
                let (mut conn, token) = (self.conn.clone(), format!("bench:{}", fresh()));
                let taken: Vec<i64> = calls
                    .acquire_once(&token, false)
                    .query_async(&mut conn)
                    .await?;
                if taken.first() != Some(&1) {
                    return Err(format!("floor: no permit of {key}").into());
                }
                let given: i64 = calls.release(&token, false).query_async(&mut conn).await?;
                if given != 1 {
                    return Err(format!("floor: the permit of {key} was lost").into());
                }
                Ok(())
            }
            Way::DistributedLock => {
                let semaphore = self.distributed_lock.create_semaphore(&key, 8);
                let Some(handle) = semaphore.try_acquire().await? else {
                    return Err(format!("distributed-lock: no permit of {key}").into());
                };
                Ok(handle.release().await?)
            }
            Way::Redisson => {
                // `get_semaphore` writes the count (`<key>:max`) when the key is new; the
                // `timeout` of `try_acquire` is the permit's lease (its score in the set).
                let semaphore = self.redisson.get_semaphore(&key, 8).await;
                if !semaphore.try_acquire(1, TTL).await? {
                    return Err(format!("redisson: no permit of {key}").into());
                }
                Ok(semaphore.release(1).await?)
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

/// The contended run's result.
#[derive(Debug, Clone, Default)]
pub struct Contended {
    pub tasks: usize,
    pub clients: usize,
    pub permits: usize,
    /// What every fourth task takes at once (the others take one permit): 1 for the plain
    /// runs.
    pub heavy: u32,
    /// The permits all tasks take at once together.
    pub taken_by_all: usize,
    pub grants: u64,
    pub elapsed: Duration,
    /// Sorted.
    pub waits: Vec<Duration>,
    pub server: Delta,
    /// The most permits seen held at once (at most `permits`).
    pub most_inside: usize,
    /// Mean time spent holding a permit (the sleep overshoots).
    pub mean_hold: Duration,
}

impl Contended {
    pub fn p(&self, q: f64) -> Duration {
        stats::percentile(&self.waits, q)
    }

    /// The longest wait strict FIFO grants allow: the other tasks' holds once each, spread
    /// over the permits, `(permits all tasks take - permits) / permits × hold` (with one
    /// permit per task, `(tasks - permits) / permits × hold`).
    pub fn fifo_limit(&self) -> Duration {
        let others = self.taken_by_all.saturating_sub(self.permits) as f64;
        self.mean_hold.mul_f64(others / self.permits.max(1) as f64)
    }

    /// Commands the server ran per grant, Lua-internal ones included.
    pub fn commands_per_grant(&self) -> f64 {
        self.server.total_commands as f64 / self.grants.max(1) as f64
    }
}

/// The shape of a contended run: `tasks` tasks over `clients` clients each take permits of a
/// semaphore of `permits` `per_task` times, holding them `hold`; every fourth task takes
/// `heavy` at once, the others one.
#[derive(Debug, Clone, Copy)]
pub struct Contention {
    pub tasks: usize,
    pub clients: usize,
    pub permits: u32,
    pub heavy: u32,
    pub per_task: u64,
    pub hold: Duration,
}

impl Contention {
    /// What task `t` takes at once.
    fn take(&self, t: usize) -> u32 {
        if t % 4 == 3 { self.heavy } else { 1 }
    }
}

/// Runs `shape` against the server at `url`.
pub async fn contended(
    url: &str,
    probe: &mut Probe,
    shape: Contention,
) -> Result<Contended, BenchError> {
    let Contention {
        tasks,
        clients,
        permits,
        per_task,
        hold,
        ..
    } = shape;
    let key = format!("bench:semaphore:{}", fresh());
    let mut all = Vec::new();
    for _ in 0..clients {
        all.push(LockClient::connect(url).await?);
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let held_nanos = Arc::new(AtomicU64::new(0));
    let before = probe.snapshot().await?;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let client = all[t % clients].clone();
        let take = shape.take(t);
        let (key, inside, most, held_nanos) = (
            key.clone(),
            inside.clone(),
            most.clone(),
            held_nanos.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            for _ in 0..per_task {
                let asked = Instant::now();
                let permit = client
                    .semaphore(key.as_str(), permits)
                    .permits(take)
                    .ttl(TTL)
                    .wait(WAIT_BUDGET)
                    .acquire()
                    .await?;
                waits.push(asked.elapsed());
                let take = take as usize;
                let now = inside.fetch_add(take, Ordering::AcqRel) + take;
                most.fetch_max(now, Ordering::AcqRel);
                let entered = Instant::now();
                tokio::time::sleep(hold).await;
                held_nanos.fetch_add(entered.elapsed().as_nanos() as u64, Ordering::Relaxed);
                inside.fetch_sub(take, Ordering::AcqRel);
                permit.release().await?;
            }
            Ok::<_, BenchError>(waits)
        }));
    }
    let mut waits = Vec::new();
    for handle in handles {
        waits.extend(tokio::time::timeout(WAIT_BUDGET * 2, handle).await???);
    }
    let elapsed = start.elapsed();
    let after = probe.snapshot().await?;
    waits.sort();
    let grants = waits.len() as u64;
    Ok(Contended {
        tasks,
        clients,
        permits: permits as usize,
        heavy: shape.heavy,
        taken_by_all: (0..tasks).map(|t| shape.take(t) as usize).sum(),
        grants,
        elapsed,
        waits,
        server: stats::delta(&before, &after),
        most_inside: most.load(Ordering::Acquire),
        mean_hold: Duration::from_nanos(held_nanos.load(Ordering::Relaxed) / grants.max(1)),
    })
}
