//! Cancellation fuzz: many tasks on four client handles (two clients and a sibling of each)
//! take four keys with `with_lock` and through guards, and cut every step at random: the
//! wait, the body (which often re-enters its key), the release. Once every task has ended and
//! the clients' background work had a moment, no lock key may exist: a key nobody holds is
//! an orphan, blocking its key until its lease ends. Every body is recorded, and no two of a
//! key may overlap.
//!
//! `RLOCK_FUZZ_SECS` (default 8) and `RLOCK_FUZZ_RUNS` (default 1) size it (the defaults keep
//! the suite quick; 20 runs of 20 s with both cores busy is the real measure).
//! `RLOCK_FUZZ_SEED` replays a run's choices (each run's seed is printed; run `r` uses the
//! seed plus `r`); the interleaving is the machine's.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockOptions};
use rlock_tests::RedisServer;
use rlock_tests::history::{self, Section};
use rlock_tests::locking::client;

const KEYS: u32 = 4;
const TASKS: usize = 24;
/// The wait budgets a call picks from.
const WAITS_MS: [u64; 4] = [0, 20, 100, 400];
const TTL: Duration = Duration::from_secs(30);
/// How long the clients' background work (releases of dropped guards, withdrawals, orphan
/// releases) is given once every task has ended.
const QUIET: Duration = Duration::from_millis(800);
/// A bound on any task's iterations, far above what a run reaches.
const MOST_STEPS: u32 = 10_000_000;

fn setting<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a valid value")),
        Err(_) => default,
    }
}

fn lock_key(key: u32) -> String {
    format!("f:{key}")
}

/// The sections of one run, on one clock.
struct Recorder {
    origin: Instant,
    sections: Mutex<Vec<Section>>,
}

impl Recorder {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A section of `key` by `owner` that begins now and ends when the value is dropped.
    fn open(self: &Arc<Self>, key: u32, owner: usize, fence: Option<u64>) -> Open {
        Open {
            recorder: self.clone(),
            key,
            owner,
            fence,
            start_us: self.now(),
        }
    }
}

/// A body under way: its section ends when it finishes or is cut.
struct Open {
    recorder: Arc<Recorder>,
    key: u32,
    owner: usize,
    fence: Option<u64>,
    start_us: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        let section = Section {
            key: self.key,
            owner: self.owner,
            fence: self.fence,
            start_us: self.start_us,
            end_us: self.recorder.now(),
            lost_us: None,
        };
        self.recorder
            .sections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(section);
    }
}

#[derive(Debug, Default)]
struct Tally {
    calls: AtomicU64,
    ran: AtomicU64,
    cut: AtomicU64,
    reentered: AtomicU64,
    guards: AtomicU64,
    dropped: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A pause of `micros`, or a yield for none.
async fn pause(micros: u64) {
    if micros == 0 {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(Duration::from_micros(micros)).await;
    }
}

/// One `with_lock` task: random key, wait, fence, body and cut, until `stop`.
async fn locker(
    client: LockClient,
    owner: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
    recorder: Arc<Recorder>,
    tally: Arc<Tally>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..MOST_STEPS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = rng.u32(0..KEYS);
        let options = LockOptions::new()
            .ttl(TTL)
            .wait(Duration::from_millis(
                WAITS_MS[rng.usize(0..WAITS_MS.len())],
            ))
            .fenced(rng.bool());
        let body_us = rng.u64(0..=1500);
        let reenter = rng.bool();
        let release_inner = rng.bool();
        let limit = if rng.u8(0..4) == 0 {
            Duration::from_secs(10)
        } else {
            Duration::from_millis(rng.u64(0..=4))
        };
        let body = {
            let (client, recorder, tally) = (client.clone(), recorder.clone(), tally.clone());
            async move {
                let _section = recorder.open(key, owner, None);
                count(&tally.ran);
                if !reenter {
                    return pause(body_us).await;
                }
                // Re-enters the hold around it (unless that was found lost: then it is an
                // acquisition of its own, busy while the outer lease lasts in Redis).
                let Ok(inner) = client.lock(lock_key(key)).acquire().await else {
                    return;
                };
                if inner.is_reentrant() {
                    count(&tally.reentered);
                }
                pause(body_us).await;
                if release_inner {
                    let _ = inner.release().await;
                }
            }
        };
        count(&tally.calls);
        let call = client.with_lock(lock_key(key), options, body);
        if tokio::time::timeout(limit, call).await.is_err() {
            count(&tally.cut);
        }
    }
}

/// The guard task: fenced guards through the builder, cut at random, released or dropped.
async fn guard_taker(
    clients: Vec<LockClient>,
    owner: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
    recorder: Arc<Recorder>,
    tally: Arc<Tally>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..MOST_STEPS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let client = &clients[rng.usize(0..clients.len())];
        let key = rng.u32(0..KEYS);
        let request = client
            .lock(lock_key(key))
            .ttl(TTL)
            .fenced()
            .wait(Duration::from_millis(200))
            .acquire();
        let limit = Duration::from_millis(rng.u64(0..=3));
        let Ok(Ok(guard)) = tokio::time::timeout(limit, request).await else {
            continue;
        };
        count(&tally.guards);
        {
            let _section = recorder.open(key, owner, guard.fence().map(|f| f.get()));
            pause(rng.u64(0..=1000)).await;
        }
        if rng.bool() {
            let _ = guard.release().await;
        } else {
            count(&tally.dropped);
            drop(guard);
        }
    }
}

/// A lock key left behind: its value (the owner token), its remaining lease, and which handle
/// took it.
struct Orphan {
    key: String,
    value: String,
    pttl_ms: i64,
    handle: Option<usize>,
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {} ({} ms left; handle {:?})",
            self.key, self.value, self.pttl_ms, self.handle
        )
    }
}

/// One run of `secs` seconds with `seed`: an error naming the orphans left and the first
/// overlap or fence regression recorded, if any.
async fn run_once(seed: u64, secs: u64) -> Result<(), String> {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let handles = vec![a.clone(), a.sibling(), b.clone(), b.sibling()];
    // Each handle's token prefix, to name the owner of a key left behind.
    let mut prefixes = HashMap::new();
    for (i, handle) in handles.iter().enumerate() {
        let guard = handle.lock(format!("probe:{i}")).acquire().await.unwrap();
        let prefix = guard
            .token()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        prefixes.insert(prefix, i);
        guard.release().await.unwrap();
    }
    let recorder = Arc::new(Recorder {
        origin: Instant::now(),
        sections: Mutex::default(),
    });
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut seeds = fastrand::Rng::with_seed(seed);
    let mut tasks = Vec::new();
    for owner in 0..TASKS {
        tasks.push(tokio::spawn(locker(
            handles[owner % handles.len()].clone(),
            owner,
            seeds.u64(..),
            stop.clone(),
            recorder.clone(),
            tally.clone(),
        )));
    }
    tasks.push(tokio::spawn(guard_taker(
        handles.clone(),
        TASKS,
        seeds.u64(..),
        stop.clone(),
        recorder.clone(),
        tally.clone(),
    )));
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.map_err(|e| format!("a task panicked: {e}"))?;
    }
    tokio::time::sleep(QUIET).await;

    let mut raw = server.raw().await;
    let mut orphans = Vec::new();
    for key in (0..KEYS).map(lock_key) {
        let (value, pttl_ms): (Option<String>, i64) = redis::pipe()
            .cmd("GET")
            .arg(&key)
            .cmd("PTTL")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .map_err(|e| format!("GET {key}: {e}"))?;
        if let Some(value) = value {
            let prefix = value.split(':').next().unwrap_or_default();
            orphans.push(Orphan {
                handle: prefixes.get(prefix).copied(),
                key,
                value,
                pttl_ms,
            });
        }
    }
    let sections = recorder
        .sections
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let found = history::sweep(&sections);
    let orphans: Vec<String> = orphans.iter().map(Orphan::to_string).collect();
    eprintln!(
        "seed {seed}: {tally:?}; {} sections; orphans {orphans:?}; overlaps {}; fence regressions {}",
        sections.len(),
        found.overlaps.len(),
        found.fence_regressions.len()
    );
    for (i, handle) in handles.iter().enumerate() {
        eprintln!("  handle {i}: {:?}", handle.metrics());
    }
    if orphans.is_empty() && found.overlaps.is_empty() && found.fence_regressions.is_empty() {
        return Ok(());
    }
    Err(format!(
        "seed {seed}: orphans {orphans:?}; first overlap {:?}; first fence regression {:?}",
        found.overlaps.first(),
        found.fence_regressions.first()
    ))
}

/// 24 `with_lock` tasks and one guard task on four keys with 30 s leases, every step cut at
/// random: afterwards no key is left held, and no two sections of a key overlapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_calls_leave_no_orphan_under_load() {
    let runs: u64 = setting("RLOCK_FUZZ_RUNS", 1);
    let secs: u64 = setting("RLOCK_FUZZ_SECS", 8);
    let seed: u64 = setting("RLOCK_FUZZ_SEED", fastrand::u64(..));
    let mut failed = Vec::new();
    for run in 0..runs {
        let seed = seed.wrapping_add(run);
        eprintln!("cancel fuzz: run {run} of {runs}, {secs} s, RLOCK_FUZZ_SEED={seed}");
        if let Err(e) = run_once(seed, secs).await {
            eprintln!("FAILED: {e}");
            failed.push(e);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {runs} runs failed: {failed:#?}",
        failed.len()
    );
}
