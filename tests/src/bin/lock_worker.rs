//! One OS process of the multi-process mutual-exclusion test.
//!
//! ```text
//! lock_worker --redis URL --key K --tasks N --iterations M --ttl-ms T --wait-ms W [--counter C]
//!             [--no-lock] [--stale-every S] [--extend-every E] [--min-replicas R]
//!             [--ride-outages] [--fair] [--hold-ms H]
//! ```
//!
//! Spawns `N` tokio tasks; each enters the critical section of lock `K` `M` times. Inside, it
//! increments the plain Redis key `C` with a deliberately racy read-sleep-write, so any two
//! overlapping holders lose an increment (without `--counter`, the section only sleeps 1 ms:
//! the history alone is checked). Acquisitions that give up with `Busy` are retried and
//! counted.
//!
//! Output (stdout), one line per critical section, then a summary:
//!
//! ```text
//! H <fence> <start_us> <end_us>
//! DONE entered=<n> busy=<n> unavailable=<n> lost=<n>
//! ```
//!
//! `start_us` is taken right after `acquire` returned and `end_us` right before `release`, or
//! when `lost()` fired if it fired first (a holder stops acting on a lost lock), both as
//! wall-clock microseconds since the UNIX epoch, so histories of several processes on one
//! machine can be merged. Any error other than `Busy` exits with status 1, and so does a lost
//! lease.
//!
//! `--ride-outages` is for runs with a failover in the middle: an acquisition that fails with
//! a backend error (Redis unreachable, `NotReplicated`, …) is retried after a short pause and
//! counted as `unavailable`; a lease lost in a section, or a release that fails, is counted as
//! `lost` instead of ending the run.
//!
//! `--min-replicas R` asks every acquisition for `R` replica acknowledgements.
//!
//! `--fair` asks for fair waiting (grants in arrival order across processes); `--hold-ms H`
//! makes a section without `--counter` last `H` ms instead of 1.
//!
//! `--no-lock` skips the lock (fence 0 on every line): the negative control that shows the
//! checks catch a broken lock.
//!
//! `--stale-every S` adds, after every S-th critical section of a task, a *stale* hold: a
//! lock with a 30 ms lease and no renewal whose holder then stalls well past it (a GC pause)
//! before releasing. It writes nothing and prints nothing; its late release must not free the
//! lock of whoever holds it now, or the next sections overlap.
//!
//! `--extend-every E` makes every E-th critical section of a task hold the lock across the
//! watchdog's renewal window (1/6 to 1/2 of the ttl) and call `extend` with a new lease
//! (1/2 to 2 ttl) at a random moment, racing the renewals. A lease lost meanwhile is an error:
//! nothing faulty happens in this run, so a loss can only come from an extend undone by a
//! renewal.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use rlock_runtime::{LockClient, LockError};

#[derive(Debug, Clone)]
struct Args {
    redis: String,
    key: String,
    tasks: usize,
    iterations: usize,
    ttl: Duration,
    wait: Duration,
    counter: Option<String>,
    no_lock: bool,
    stale_every: usize,
    extend_every: usize,
    min_replicas: u32,
    ride_outages: bool,
    fair: bool,
    hold: Duration,
}

/// One critical section: fence, start and end in microseconds since the UNIX epoch.
type Entry = (u64, u64, u64);

fn parse_args() -> Result<Args, String> {
    let mut redis = None;
    let mut key = None;
    let mut tasks = None;
    let mut iterations = None;
    let mut ttl = None;
    let mut wait = None;
    let mut counter = None;
    let mut no_lock = false;
    let mut stale_every = 0;
    let mut extend_every = 0;
    let mut min_replicas = 0;
    let mut ride_outages = false;
    let mut fair = false;
    let mut hold = Duration::from_millis(1);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--no-lock" => {
                no_lock = true;
                continue;
            }
            "--ride-outages" => {
                ride_outages = true;
                continue;
            }
            "--fair" => {
                fair = true;
                continue;
            }
            _ => {}
        }
        let value = it
            .next()
            .ok_or_else(|| format!("missing value after {flag}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--redis" => redis = Some(value.clone()),
            "--key" => key = Some(value.clone()),
            "--counter" => counter = Some(value.clone()),
            "--tasks" => tasks = Some(usize::try_from(number()?).map_err(|e| e.to_string())?),
            "--iterations" => {
                iterations = Some(usize::try_from(number()?).map_err(|e| e.to_string())?);
            }
            "--ttl-ms" => ttl = Some(Duration::from_millis(number()?)),
            "--wait-ms" => wait = Some(Duration::from_millis(number()?)),
            "--hold-ms" => hold = Duration::from_millis(number()?),
            "--stale-every" => {
                stale_every = usize::try_from(number()?).map_err(|e| e.to_string())?;
            }
            "--extend-every" => {
                extend_every = usize::try_from(number()?).map_err(|e| e.to_string())?;
            }
            "--min-replicas" => {
                min_replicas = u32::try_from(number()?).map_err(|e| e.to_string())?;
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let missing = |name: &str| format!("missing --{name}");
    Ok(Args {
        redis: redis.ok_or_else(|| missing("redis"))?,
        key: key.ok_or_else(|| missing("key"))?,
        tasks: tasks.ok_or_else(|| missing("tasks"))?,
        iterations: iterations.ok_or_else(|| missing("iterations"))?,
        ttl: ttl.ok_or_else(|| missing("ttl-ms"))?,
        wait: wait.ok_or_else(|| missing("wait-ms"))?,
        counter,
        no_lock,
        stale_every,
        extend_every,
        min_replicas,
        ride_outages,
        fair,
        hold,
    })
}

fn now_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

/// The section's work: the racy increment of `counter` on `raw` if there is one, else a pause.
async fn work(raw: &mut Option<MultiplexedConnection>, args: &Args) -> Result<(), String> {
    match (raw, &args.counter) {
        (Some(raw), Some(counter)) => racy_increment(raw, counter).await,
        _ => {
            tokio::time::sleep(args.hold).await;
            Ok(())
        }
    }
}

/// The racy increment: a lost update shows up as a counter below the number of entries.
async fn racy_increment(raw: &mut MultiplexedConnection, counter: &str) -> Result<(), String> {
    let value: Option<u64> = redis::cmd("GET")
        .arg(counter)
        .query_async(raw)
        .await
        .map_err(|e| format!("GET {counter}: {e}"))?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let () = redis::cmd("SET")
        .arg(counter)
        .arg(value.unwrap_or(0) + 1)
        .query_async(raw)
        .await
        .map_err(|e| format!("SET {counter}: {e}"))?;
    Ok(())
}

/// Lease of a stale hold, and how long its holder stalls inside it.
const STALE_TTL: Duration = Duration::from_millis(30);
const STALE_STALL: Duration = Duration::from_millis(90);

/// A hold whose holder stalls past its lease, then releases late. `Ok(false)` when the lock
/// was busy (the caller retries later).
async fn stale_hold(client: &LockClient, args: &Args) -> Result<bool, String> {
    let guard = match client
        .lock(args.key.as_str())
        .ttl(STALE_TTL)
        .renew(false)
        .wait(args.wait)
        .acquire()
        .await
    {
        Ok(guard) => guard,
        Err(LockError::Busy { .. }) => return Ok(false),
        // A 30 ms lease leaves its acquire 15 ms to be answered: through a slow network it
        // may time out, a typed outcome like any other; the stale hold is tried again later.
        Err(e) if e.is_backend() => return Ok(false),
        Err(e) => return Err(format!("stale acquire: {e}")),
    };
    tokio::time::sleep(STALE_STALL).await;
    match guard.release().await {
        // The lease ended during the stall: the late release must change nothing.
        Err(LockError::Lost { .. }) => Ok(true),
        Ok(()) => Err("a release after the lease ended reported success".into()),
        Err(e) => Err(format!("stale release: {e}")),
    }
}

/// Holds `guard` across the renewal window and extends it at a random moment meanwhile.
async fn extend_during_renewals(
    guard: &rlock_runtime::LockGuard,
    ttl: Duration,
) -> Result<(), String> {
    let hold = ttl.mul_f64(fastrand::f64().mul_add(1.0 / 3.0, 1.0 / 6.0));
    let extend_at = hold.mul_f64(fastrand::f64());
    let new_ttl = ttl.mul_f64(fastrand::f64().mul_add(1.5, 0.5));
    let work = async {
        tokio::time::sleep(extend_at).await;
        guard
            .extend(new_ttl)
            .await
            .map_err(|e| format!("extend to {new_ttl:?}: {e}"))?;
        tokio::time::sleep(hold - extend_at).await;
        Ok(())
    };
    tokio::select! {
        biased;
        () = guard.lost() => Err(format!("the lease was lost while extending it to {new_ttl:?}")),
        done = work => done,
    }
}

/// What one task did.
#[derive(Debug, Default)]
struct Tally {
    history: Vec<Entry>,
    busy: u64,
    unavailable: u64,
    lost: u64,
}

/// One task's loop.
async fn run_task(
    client: LockClient,
    mut raw: Option<MultiplexedConnection>,
    args: Args,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let mut stale_due = false;
    while tally.history.len() < args.iterations {
        if stale_due {
            stale_due = !stale_hold(&client, &args).await?;
            continue;
        }
        if args.no_lock {
            let start = now_us();
            work(&mut raw, &args).await?;
            tally.history.push((0, start, now_us()));
            continue;
        }
        let mut request = client
            .lock(args.key.as_str())
            .ttl(args.ttl)
            .wait(args.wait)
            .fenced()
            .min_replicas(args.min_replicas);
        if args.fair {
            request = request.fair();
        }
        let guard = match request.acquire().await {
            Ok(guard) => guard,
            Err(LockError::Busy { .. }) => {
                tally.busy += 1;
                continue;
            }
            Err(e) if args.ride_outages && e.is_backend() => {
                tally.unavailable += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(e) => return Err(format!("acquire: {e}")),
        };
        let start = now_us();
        let section = async {
            if args.extend_every > 0 && tally.history.len() % args.extend_every == 0 {
                extend_during_renewals(&guard, args.ttl).await?;
            }
            work(&mut raw, &args).await
        };
        // A holder stops acting on a lost lock: the section ends when `lost()` fires.
        let (worked, lost) = tokio::select! {
            biased;
            () = guard.lost() => (Ok(()), true),
            worked = section => (worked, false),
        };
        let end = now_us();
        let fence = guard.fence().map_or(0, |f| f.get());
        let released = guard.release().await;
        worked?;
        match released {
            Ok(()) if !lost => {}
            _ if args.ride_outages => tally.lost += 1,
            Ok(()) => return Err(format!("the lease was lost (fence {fence})")),
            Err(e) => return Err(format!("release (fence {fence}): {e}")),
        }
        tally.history.push((fence, start, end));
        stale_due = args.stale_every > 0 && tally.history.len() % args.stale_every == 0;
    }
    Ok(tally)
}

async fn run(args: Args) -> Result<(), String> {
    let client = LockClient::connect(&args.redis)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let raw = match args.counter {
        None => None,
        Some(_) => Some(
            redis::Client::open(args.redis.as_str())
                .map_err(|e| format!("bad url {}: {e}", args.redis))?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("raw connection: {e}"))?,
        ),
    };

    let tasks: Vec<_> = (0..args.tasks)
        .map(|_| tokio::spawn(run_task(client.clone(), raw.clone(), args.clone())))
        .collect();
    let mut total = Tally::default();
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(tally)) => {
                for (fence, start, end) in &tally.history {
                    println!("H {fence} {start} {end}");
                }
                total.history.extend(tally.history);
                total.busy += tally.busy;
                total.unavailable += tally.unavailable;
                total.lost += tally.lost;
            }
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(e) => first_error = first_error.or(Some(format!("task panicked: {e}"))),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    println!(
        "DONE entered={} busy={} unavailable={} lost={}",
        total.history.len(),
        total.busy,
        total.unavailable,
        total.lost
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("lock_worker: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lock_worker: {e}");
            ExitCode::FAILURE
        }
    }
}
