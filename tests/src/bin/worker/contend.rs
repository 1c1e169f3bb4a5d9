//! `contend`: tasks take one lock again and again and record every critical section; the
//! multi-process tests merge the records of several such processes and check them
//! ([`rlock_tests::history`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use rlock_runtime::{LockClient, LockError, LockGuard};
use rlock_tests::protocol::{Line, Release, SectionKind, SectionLine, Write, variant_name};
use rlock_tests::worker::Contend;

use crate::say;

pub(crate) fn main(args: Contend) -> Result<(), String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(run(args))
}

fn now_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

/// The section's work: the racy increment of `counter` on `raw` if there is one, else a pause.
async fn work(raw: &mut Option<MultiplexedConnection>, args: &Contend) -> Result<(), String> {
    match (raw, &args.counter) {
        (Some(raw), Some(counter)) => racy_increment(raw, counter).await,
        _ => {
            tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;
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
async fn stale_hold(client: &LockClient, args: &Contend) -> Result<bool, String> {
    let guard = match client
        .lock(args.key.as_str())
        .ttl(STALE_TTL)
        .renew(false)
        .wait(Duration::from_millis(args.wait_ms))
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
async fn extend_during_renewals(guard: &LockGuard, ttl: Duration) -> Result<(), String> {
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

/// What one task did: its sections, and its failed acquisitions by `LockError` variant.
#[derive(Debug, Default)]
struct Tally {
    sections: Vec<SectionLine>,
    errors: BTreeMap<&'static str, u64>,
}

/// One task's loop.
async fn run_task(
    client: LockClient,
    mut raw: Option<MultiplexedConnection>,
    args: Contend,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let mut stale_due = false;
    let ttl = Duration::from_millis(args.ttl_ms);
    let section = |start_us, end_us| SectionLine {
        key: args.key.clone(),
        fence: None,
        start_us,
        end_us,
        lost_us: None,
        write: Write::None,
        write_sent_us: 0,
        write_done_us: 0,
        release: Release::Ok,
        kind: SectionKind::Lock,
    };
    while tally.sections.len() < args.iterations {
        if stale_due {
            stale_due = !stale_hold(&client, &args).await?;
            continue;
        }
        if args.no_lock {
            let start = now_us();
            work(&mut raw, &args).await?;
            tally.sections.push(section(start, now_us()));
            continue;
        }
        let mut request = client
            .lock(args.key.as_str())
            .ttl(ttl)
            .wait(Duration::from_millis(args.wait_ms))
            .fenced()
            .min_replicas(args.min_replicas);
        if args.fair {
            request = request.fair();
        }
        let guard = match request.acquire().await {
            Ok(guard) => guard,
            Err(e) if e.is_busy() || (args.ride_outages && e.is_backend()) => {
                *tally.errors.entry(variant_name(&e)).or_default() += 1;
                if !e.is_busy() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
            Err(e) => return Err(format!("acquire: {e}")),
        };
        let start = now_us();
        let work = async {
            if args.extend_every > 0 && tally.sections.len() % args.extend_every == 0 {
                extend_during_renewals(&guard, ttl).await?;
            }
            work(&mut raw, &args).await
        };
        // A holder stops acting on a lost lock: the section ends when `lost()` fires.
        let (worked, lost) = tokio::select! {
            biased;
            () = guard.lost() => (Ok(()), true),
            worked = work => (worked, false),
        };
        let end = now_us();
        let fence = guard.fence().map(|f| f.get());
        let released = guard.release().await;
        worked?;
        let release = match released {
            Ok(()) if !lost => Release::Ok,
            Ok(()) | Err(LockError::Lost { .. }) => Release::Lost,
            Err(_) => Release::Failed,
        };
        if release != Release::Ok && !args.ride_outages {
            return Err(match released {
                Ok(()) => format!("the lease was lost (fence {fence:?})"),
                Err(e) => format!("release (fence {fence:?}): {e}"),
            });
        }
        tally.sections.push(SectionLine {
            fence,
            lost_us: lost.then_some(end),
            release,
            ..section(start, end)
        });
        stale_due = args.stale_every > 0 && tally.sections.len() % args.stale_every == 0;
    }
    Ok(tally)
}

async fn run(args: Contend) -> Result<(), String> {
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
    let mut sections = 0;
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(tally)) => {
                for section in tally.sections {
                    say(&Line::Section(section));
                    sections += 1;
                }
                for (variant, n) in tally.errors {
                    *errors.entry(variant).or_default() += n;
                }
            }
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(e) => first_error = first_error.or(Some(format!("task panicked: {e}"))),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    for (variant, count) in errors {
        say(&Line::Errors {
            variant: variant.to_owned(),
            count,
        });
    }
    say(&Line::Done { sections });
    Ok(())
}
