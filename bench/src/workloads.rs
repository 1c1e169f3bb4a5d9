//! The workloads: uncontended, distinct keys, one contended key, a watchdog at scale, and
//! beyond one Redis (a Redis Cluster, Redlock over several masters).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rlock_runtime::LockClient;
use tokio::task::JoinHandle;

use crate::BenchError;
use crate::lockers::{Cycle, Kind, Lockers, RENEWAL_TOP_LEVEL, TTL, bounded, fresh, redlock_cycle};
use crate::stats::{self, Delta, Probe};

/// Bound on a whole phase of one implementation.
const PHASE_LIMIT: Duration = Duration::from_secs(120);

/// One timed batch: how long it took and, for the sequential workload, each cycle's latency.
#[derive(Debug, Default)]
pub struct Batch {
    pub ops: u64,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
    /// CPU time of this process during the batch.
    pub client_cpu: Duration,
    /// CPU time of the Redis server during the batch.
    pub server_cpu: Duration,
}

impl Batch {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Adds `other` (a burst of the same round) to this batch.
    pub fn absorb(&mut self, other: Batch) {
        self.ops += other.ops;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.client_cpu += other.client_cpu;
        self.server_cpu += other.server_cpu;
    }
}

/// Runs `batch`, adding the CPU time the client and the server spent meanwhile.
pub async fn measured(
    probe: &mut Probe,
    batch: impl std::future::Future<Output = Result<Batch, BenchError>>,
) -> Result<Batch, BenchError> {
    let before = probe.snapshot().await?;
    let cpu0 = stats::process_cpu();
    let mut b = batch.await?;
    b.client_cpu = stats::process_cpu().saturating_sub(cpu0);
    let after = probe.snapshot().await?;
    b.server_cpu = Duration::from_secs_f64(stats::delta(&before, &after).cpu_seconds);
    Ok(b)
}

/// `n` steps one after the other, each returning the latency it measured.
async fn timed<F, Fut>(n: u64, mut step: F) -> Result<Batch, BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Duration, BenchError>>,
{
    let run = async {
        let mut latencies = Vec::with_capacity(n as usize);
        let start = Instant::now();
        for _ in 0..n {
            latencies.push(step().await?);
        }
        Ok(Batch {
            ops: n,
            elapsed: start.elapsed(),
            latencies,
            ..Batch::default()
        })
    };
    tokio::time::timeout(PHASE_LIMIT, run).await?
}

/// (a) `n` lock+unlock cycles one after the other, each on a fresh key.
pub async fn sequential(l: &Lockers, kind: Kind, n: u64) -> Result<Batch, BenchError> {
    if kind == Kind::Redlock {
        let rl = l.redlock.clone();
        let run = tokio::task::spawn_blocking(move || {
            let mut latencies = Vec::with_capacity(n as usize);
            let start = Instant::now();
            for _ in 0..n {
                let t = Instant::now();
                redlock_cycle(&rl, fresh())?;
                latencies.push(t.elapsed());
            }
            Ok::<_, BenchError>(Batch {
                ops: n,
                elapsed: start.elapsed(),
                latencies,
                ..Batch::default()
            })
        });
        return tokio::time::timeout(PHASE_LIMIT, run).await??;
    }
    timed(n, || async move {
        let t = Instant::now();
        l.cycle(kind, fresh()).await?;
        Ok(t.elapsed())
    })
    .await
}

/// `tasks` tasks, each started by `spawn`, timed from the first start to the last end.
async fn together(
    tasks: usize,
    per_task: u64,
    spawn: impl Fn() -> JoinHandle<Result<(), BenchError>>,
) -> Result<Batch, BenchError> {
    let run = async {
        let start = Instant::now();
        let cpu0 = stats::process_cpu();
        let handles: Vec<_> = (0..tasks).map(|_| spawn()).collect();
        for h in handles {
            h.await??;
        }
        Ok(Batch {
            ops: tasks as u64 * per_task,
            elapsed: start.elapsed(),
            client_cpu: stats::process_cpu().saturating_sub(cpu0),
            ..Batch::default()
        })
    };
    tokio::time::timeout(PHASE_LIMIT, run).await?
}

/// (b), (e) `tasks` concurrent tasks, each doing `per_task` cycles on fresh keys (async
/// implementations).
pub async fn concurrent<L: Cycle>(
    l: &L,
    kind: Kind,
    tasks: usize,
    per_task: u64,
) -> Result<Batch, BenchError> {
    together(tasks, per_task, || {
        let l = l.clone();
        tokio::spawn(async move {
            for _ in 0..per_task {
                l.cycle(kind, fresh()).await?;
            }
            Ok(())
        })
    })
    .await
}

/// (b) `tasks` concurrent tasks, each doing `per_task` cycles on fresh keys.
pub async fn distinct(
    l: &Lockers,
    kind: Kind,
    tasks: usize,
    per_task: u64,
) -> Result<Batch, BenchError> {
    if kind != Kind::Redlock {
        return concurrent(l, kind, tasks, per_task).await;
    }
    together(tasks, per_task, || {
        let rl = l.redlock.clone();
        tokio::task::spawn_blocking(move || {
            for _ in 0..per_task {
                redlock_cycle(&rl, fresh())?;
            }
            Ok(())
        })
    })
    .await
}

/// Who contends for the key in workload (c).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Contender {
    /// rlock's manual API with a wait budget (queued in Redis, handed over by releases),
    /// fair or not, over `clients` clients.
    Rlock { fair: bool, clients: usize },
    /// rslock `lock()` with `set_retry(count, delay)`: a budget of about `count * delay / 2`.
    Rslock { delay: Duration },
    /// redlock `lock()` with `set_retry(count, delay)`, on blocking threads.
    Redlock { delay: Duration },
}

impl Contender {
    pub fn label(self) -> String {
        match self {
            Contender::Rlock { fair: false, .. } => "rlock, wait 30s".to_owned(),
            Contender::Rlock { fair: true, .. } => "rlock, wait 30s, fair".to_owned(),
            Contender::Rslock { delay } => {
                format!("rslock 0.10, retry delay {} ms", delay.as_millis())
            }
            Contender::Redlock { delay } => {
                format!("redlock 2.0, retry delay {} ms", delay.as_millis())
            }
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Contender::Rlock { .. } => Kind::Manual,
            Contender::Rslock { .. } => Kind::Rslock,
            Contender::Redlock { .. } => Kind::Redlock,
        }
    }

    /// Over how many clients its tasks are spread (`default` for the peers).
    pub fn clients(self, default: usize) -> usize {
        match self {
            Contender::Rlock { clients, .. } => clients,
            Contender::Rslock { .. } | Contender::Redlock { .. } => default,
        }
    }
}

/// The wait budget every contender gets in (c).
pub const WAIT_BUDGET: Duration = Duration::from_secs(30);
const CONTENDED_TTL: Duration = Duration::from_secs(10);

/// What one contended run measured.
#[derive(Debug, Default)]
pub struct Contended {
    /// Tasks contending, and the clients they were spread over.
    pub tasks: usize,
    pub clients: usize,
    pub handoffs: u64,
    pub elapsed: Duration,
    /// Sorted.
    pub waits: Vec<Duration>,
    pub server: Delta,
    pub round_trips: u64,
    /// Times two tasks were seen inside the critical section at once (must be 0).
    pub overlaps: u64,
    /// Mean time actually spent in the critical section (the sleep overshoots).
    pub mean_hold: Duration,
    /// Acquisitions that ran out of budget (must be 0).
    pub gave_up: u64,
    /// Handoffs where the task that just released took the key again.
    pub same_task: u64,
    /// Handoffs that stayed within the client that just released (same task or not).
    pub same_client: u64,
}

impl Contended {
    pub fn rate(&self) -> f64 {
        self.handoffs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    pub fn p(&self, q: f64) -> Duration {
        stats::percentile(&self.waits, q)
    }
    /// The longest wait a strict FIFO handoff allows: every other task's hold once,
    /// `(tasks - 1) × measured hold`.
    pub fn fifo_limit(&self) -> Duration {
        self.mean_hold * u32::try_from(self.tasks.saturating_sub(1)).unwrap_or(u32::MAX)
    }
    /// Commands the server ran per handoff, Lua-internal ones included.
    pub fn commands_per_handoff(&self) -> f64 {
        self.server.total_commands as f64 / self.handoffs.max(1) as f64
    }
}

/// The critical section's bookkeeping, shared by the tasks of one run.
#[derive(Default)]
struct Section {
    inside: AtomicBool,
    overlaps: AtomicU64,
    held_nanos: AtomicU64,
    /// The last task inside, plus one (0: none yet).
    last: AtomicUsize,
    same_task: AtomicU64,
    same_client: AtomicU64,
    clients: usize,
}

impl Section {
    fn enter(&self, task: usize) -> Instant {
        if self.inside.swap(true, Ordering::AcqRel) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        let last = self.last.swap(task + 1, Ordering::AcqRel);
        if last == task + 1 {
            self.same_task.fetch_add(1, Ordering::Relaxed);
        }
        if last > 0 && (last - 1) % self.clients == task % self.clients {
            self.same_client.fetch_add(1, Ordering::Relaxed);
        }
        Instant::now()
    }
    fn leave(&self, entered: Instant) {
        self.held_nanos
            .fetch_add(entered.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.inside.store(false, Ordering::Release);
    }
}

/// (c) `tasks` tasks spread over `clients` clients each take one key `per_task` times,
/// holding it for `hold`; every wait (call to grant) is recorded.
pub async fn contended(
    url: &str,
    probe: &mut Probe,
    who: Contender,
    hold: Duration,
    tasks: usize,
    clients: usize,
    per_task: u64,
) -> Result<Contended, BenchError> {
    let key = format!("bench:contended:{}", fresh());
    let section = Arc::new(Section {
        clients: clients.max(1),
        ..Section::default()
    });
    let gave_up = Arc::new(AtomicU64::new(0));
    // Clients are made (and connected) before the window opens.
    let mut rlocks = Vec::new();
    let mut rslocks = Vec::new();
    let mut redlocks = Vec::new();
    for _ in 0..clients {
        match who {
            Contender::Rlock { .. } => rlocks.push(LockClient::connect(url).await?),
            Contender::Rslock { delay } => {
                let mut m = rslock::LockManager::new(vec![url.to_owned()]);
                m.set_retry(retry_count(delay), delay);
                // Open its connection now, as the others are open.
                let warm = format!("bench:warm:{}", fresh());
                let lock = m.lock(warm.as_str(), CONTENDED_TTL).await?;
                m.unlock(&lock).await;
                rslocks.push(m);
            }
            Contender::Redlock { delay } => {
                let mut rl = redlock::RedLock::new(vec![url.to_owned()]);
                rl.set_retry(retry_count(delay), delay.as_millis() as u32);
                redlocks.push(Arc::new(rl));
            }
        }
    }

    let before = probe.snapshot().await?;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let key = key.clone();
        let section = section.clone();
        let gave_up = gave_up.clone();
        let c = t % clients;
        handles.push(match who {
            Contender::Rlock { fair, .. } => {
                let client = rlocks[c].clone();
                tokio::spawn(async move {
                    let mut waits = Vec::new();
                    for _ in 0..per_task {
                        let asked = Instant::now();
                        let request = client
                            .lock(key.as_str())
                            .ttl(CONTENDED_TTL)
                            .wait(WAIT_BUDGET);
                        let request = if fair { request.fair() } else { request };
                        let guard = match request.acquire().await {
                            Ok(g) => g,
                            Err(e) if e.is_busy() => {
                                gave_up.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Err(e) => return Err(BenchError::from(e)),
                        };
                        waits.push(asked.elapsed());
                        let entered = section.enter(t);
                        tokio::time::sleep(hold).await;
                        section.leave(entered);
                        guard.release().await?;
                    }
                    Ok(waits)
                })
            }
            Contender::Rslock { .. } => {
                let m = rslocks[c].clone();
                tokio::spawn(async move {
                    let mut waits = Vec::new();
                    for _ in 0..per_task {
                        let asked = Instant::now();
                        let lock = match m.lock(key.as_str(), CONTENDED_TTL).await {
                            Ok(l) => l,
                            Err(rslock::LockError::Unavailable) => {
                                gave_up.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Err(e) => return Err(BenchError::from(e)),
                        };
                        waits.push(asked.elapsed());
                        let entered = section.enter(t);
                        tokio::time::sleep(hold).await;
                        section.leave(entered);
                        m.unlock(&lock).await;
                    }
                    Ok(waits)
                })
            }
            Contender::Redlock { .. } => {
                let rl = redlocks[c].clone();
                tokio::task::spawn_blocking(move || {
                    let mut waits = Vec::new();
                    for _ in 0..per_task {
                        let asked = Instant::now();
                        let Some(lock) =
                            rl.lock(key.as_bytes(), CONTENDED_TTL.as_millis() as usize)?
                        else {
                            gave_up.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        waits.push(asked.elapsed());
                        let entered = section.enter(t);
                        std::thread::sleep(hold);
                        section.leave(entered);
                        rl.unlock(&lock);
                    }
                    Ok(waits)
                })
            }
        });
    }
    let mut waits = Vec::new();
    let limit = WAIT_BUDGET * 2 + PHASE_LIMIT;
    for h in handles {
        waits.extend(tokio::time::timeout(limit, h).await???);
    }
    let elapsed = start.elapsed();
    let after = probe.snapshot().await?;
    let server = stats::delta(&before, &after);
    waits.sort();
    let handoffs = waits.len() as u64;
    Ok(Contended {
        tasks,
        clients,
        handoffs,
        elapsed,
        round_trips: server.round_trips(who.kind().top_level()),
        server,
        overlaps: section.overlaps.load(Ordering::Relaxed),
        mean_hold: Duration::from_nanos(
            section.held_nanos.load(Ordering::Relaxed) / handoffs.max(1),
        ),
        gave_up: gave_up.load(Ordering::Relaxed),
        same_task: section.same_task.load(Ordering::Relaxed),
        same_client: section.same_client.load(Ordering::Relaxed),
        waits,
    })
}

/// Retries giving a budget of about [`WAIT_BUDGET`] (each waits `delay / 2` on average).
fn retry_count(delay: Duration) -> u32 {
    let avg = (delay / 2).max(Duration::from_millis(1));
    (WAIT_BUDGET.as_millis() / avg.as_millis()).clamp(3, 100_000) as u32
}

/// What holding many locks under renewal costs.
#[derive(Debug, Default)]
pub struct Watchdog {
    pub locks: usize,
    pub ttl: Duration,
    pub window: Duration,
    pub server: Delta,
    pub round_trips: u64,
    /// Process CPU time spent during the window.
    pub client_cpu: Duration,
    /// Locks still held at the end of the window (must equal `locks`).
    pub kept: usize,
}

impl Watchdog {
    pub fn per_second(&self, n: u64) -> f64 {
        n as f64 / self.window.as_secs_f64().max(1e-9)
    }
    pub fn client_cpu_pct(&self) -> f64 {
        100.0 * self.client_cpu.as_secs_f64() / self.window.as_secs_f64().max(1e-9)
    }
    pub fn server_cpu_pct(&self) -> f64 {
        100.0 * self.server.cpu_seconds / self.window.as_secs_f64().max(1e-9)
    }
}

/// Waits `settle`, then measures a window of `window` during which nothing but renewal runs.
pub async fn renewal_window(
    probe: &mut Probe,
    settle: Duration,
    window: Duration,
) -> Result<(Delta, Duration, Duration), BenchError> {
    tokio::time::sleep(settle).await;
    let before = probe.snapshot().await?;
    let cpu0 = stats::process_cpu();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let after = probe.snapshot().await?;
    let cpu = stats::process_cpu().saturating_sub(cpu0);
    Ok((stats::delta(&before, &after), cpu, t0.elapsed()))
}

/// (d) rlock: `locks` guards held under the watchdog (lease `ttl`), measured over `window`.
pub async fn watchdog_rlock(
    url: &str,
    probe: &mut Probe,
    locks: usize,
    ttl: Duration,
    window: Duration,
) -> Result<Watchdog, BenchError> {
    let client = LockClient::connect(url).await?;
    let guards = crate::scale::take(&client, locks, ttl, 64, PHASE_LIMIT).await?;
    let (server, client_cpu, elapsed) = renewal_window(probe, ttl / 2, window).await?;
    let kept = guards.iter().filter(|g| !g.is_lost()).count();
    crate::scale::give_back(guards, 64, PHASE_LIMIT).await?;
    Ok(Watchdog {
        locks,
        ttl,
        window: elapsed,
        round_trips: server.round_trips(RENEWAL_TOP_LEVEL),
        server,
        client_cpu,
        kept,
    })
}

/// (d) rslock: `locks` concurrent `LockManager::using` calls (its renewing API).
pub async fn watchdog_rslock(
    url: &str,
    probe: &mut Probe,
    locks: usize,
    ttl: Duration,
    window: Duration,
) -> Result<Watchdog, BenchError> {
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let prefix = fresh();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let started = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(locks);
    for i in 0..locks {
        let manager = manager.clone();
        let mut stop = stop_rx.clone();
        let started = started.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("bench:wd:{prefix}:{i}");
            manager
                .using(key.as_bytes(), ttl, async move || {
                    started.fetch_add(1, Ordering::Relaxed);
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }));
    }
    let deadline = Instant::now() + PHASE_LIMIT;
    while started.load(Ordering::Relaxed) < locks && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if started.load(Ordering::Relaxed) < locks {
        return Err("rslock: the locks were not all acquired in time".into());
    }
    let (server, client_cpu, elapsed) = renewal_window(probe, ttl / 2, window).await?;
    let _ = stop_tx.send(true);
    let mut kept = 0;
    for h in handles {
        if tokio::time::timeout(PHASE_LIMIT, h).await??.is_ok() {
            kept += 1;
        }
    }
    Ok(Watchdog {
        locks,
        ttl,
        window: elapsed,
        round_trips: server.round_trips(RENEWAL_TOP_LEVEL),
        server,
        client_cpu,
        kept,
    })
}

/// (e) The topologies of the latency rows, as numbers of masters (1: a single node through a
/// plain `redis://` URL; more: Redlock).
pub const REDLOCK_MASTERS: [usize; 3] = [1, 3, 5];

/// The URL of the client over the first `masters` of `ports`.
pub fn masters_url(ports: &[u16], masters: usize) -> String {
    match &ports[..masters] {
        [one] => format!("redis://127.0.0.1:{one}/"),
        some => {
            let hosts: Vec<String> = some.iter().map(|p| format!("127.0.0.1:{p}")).collect();
            format!("redlock://{}", hosts.join(","))
        }
    }
}

/// (e) `n` acquisitions of fresh keys one after the other: each latency is that of
/// `acquire().await` alone; the release follows, untimed.
pub async fn acquire_latency(client: &LockClient, n: u64) -> Result<Batch, BenchError> {
    timed(n, || {
        bounded(async move {
            let key = format!("bench:{}", fresh());
            let t = Instant::now();
            let guard = client.lock(key).ttl(TTL).acquire().await?;
            let took = t.elapsed();
            guard.release().await?;
            Ok(took)
        })
    })
    .await
}

/// (e) The floor of a fan-out: `SET key token NX PX` sent on every connection at once with
/// the `redis` crate, timed until all have answered; the key is then deleted, untimed.
pub async fn fanout_latency(
    conns: &[redis::aio::MultiplexedConnection],
    n: u64,
) -> Result<Batch, BenchError> {
    timed(n, || {
        bounded(async move {
            let key = format!("bench:{}", fresh());
            let t = Instant::now();
            let sets = conns.iter().map(|conn| {
                let (mut conn, key) = (conn.clone(), key.as_str());
                async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg("token")
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL.as_millis() as u64)
                        .query_async::<Option<String>>(&mut conn)
                        .await
                }
            });
            for set in futures_util::future::join_all(sets).await {
                set?;
            }
            let took = t.elapsed();
            for conn in conns {
                let _: i64 = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut conn.clone())
                    .await?;
            }
            Ok(took)
        })
    })
    .await
}

/// Fails with the install command when `binary` cannot be run.
pub fn require(binary: &str, package: &str) -> Result<(), BenchError> {
    match std::process::Command::new(binary).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err(format!(
            "workload (e) needs `{binary}` on PATH; install it with `apt-get install -y {package}`"
        )
        .into()),
    }
}

/// Runs a start-up of the test harness (which panics when it fails) on a blocking thread,
/// and turns its panic into an error that says what could not start.
pub async fn start<T: Send + 'static>(
    what: &str,
    start: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BenchError> {
    // The error carries the panic's message: the default hook would only print it twice.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = tokio::task::spawn_blocking(start).await;
    std::panic::set_hook(hook);
    started.map_err(|e| {
        let why = match e.try_into_panic() {
            Ok(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "it panicked".to_owned()),
            Err(e) => e.to_string(),
        };
        format!("workload (e): could not start {what}: {}", why.trim_end()).into()
    })
}
