//! (d) at scale: one client takes many holds and keeps them through renewals for several
//! lease periods, while the process's memory, the watchdog's calls and the commands Redis
//! runs for them are measured, and the client's rate of other acquisitions is compared with
//! its rate when it held nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockGuard};

use crate::BenchError;
use crate::lockers::{RENEWAL_TOP_LEVEL, fresh};
use crate::stats::{self, Delta, Probe};
use crate::workloads::renewal_window;

/// Tasks that take (and later give back) the holds, each its share in turn.
pub const TAKERS: usize = 256;
/// Tasks that lock and unlock fresh keys when the acquisition rate is measured.
const CYCLERS: usize = 16;
/// The shortest time each acquisition rate is measured; at least a renewal period, so that
/// the rate while held takes in the watchdog's busy and quiet moments alike.
const RATE_FOR: Duration = Duration::from_secs(2);
/// The longest any stage may take before the run fails.
const STAGE_LIMIT: Duration = Duration::from_secs(600);

/// What holding `holds` locks cost one client.
#[derive(Debug, Clone, Default)]
pub struct Scale {
    pub holds: usize,
    pub ttl: Duration,
    /// The measured window, in which nothing but renewal runs.
    pub window: Duration,
    /// How long the holds were held, from the last taken to the first given back.
    pub held_for: Duration,
    /// Growth of the process's resident memory while it took them (`VmRSS`), per hold.
    pub bytes_per_hold: f64,
    /// Holds taken per second while taking them.
    pub take_rate: f64,
    /// Commands Redis ran in the window.
    pub server: Delta,
    /// Leases the client renewed in the window (its `renewed` metric).
    pub renewed: u64,
    /// Process CPU time in the window.
    pub client_cpu: Duration,
    /// Holds lost by the time they were given back (must be 0).
    pub lost: usize,
    /// Fresh keys locked and unlocked per second by [`CYCLERS`] tasks of the same client,
    /// holding nothing, then while it held them.
    pub rate_idle: f64,
    pub rate_held: f64,
}

impl Scale {
    /// Renewal periods (ttl/3) in the window.
    pub fn periods(&self) -> f64 {
        self.window.as_secs_f64() / (self.ttl.as_secs_f64() / 3.0).max(1e-9)
    }

    /// Script calls per renewal period.
    pub fn round_trips_per_period(&self) -> f64 {
        self.server.round_trips(RENEWAL_TOP_LEVEL) as f64 / self.periods().max(1e-9)
    }

    /// Commands Redis ran per renewed key. The holder card's post also lengthens the card
    /// (one `PEXPIRE`, or a `DEL`, per post); each post runs one `HLEN`, by which its
    /// `PEXPIRE`s are left out.
    pub fn commands_per_renewal(&self) -> f64 {
        let calls = |c: &str| self.server.calls.get(c).copied().unwrap_or(0);
        let renewal =
            (calls("get") + calls("pttl") + calls("pexpire")).saturating_sub(calls("hlen"));
        renewal as f64 / (self.renewed as f64).max(1.0)
    }

    /// Commands per second Redis ran in the window, and script calls per second.
    pub fn commands_per_second(&self) -> f64 {
        self.server.total_commands as f64 / self.window.as_secs_f64().max(1e-9)
    }
    pub fn round_trips_per_second(&self) -> f64 {
        self.server.round_trips(RENEWAL_TOP_LEVEL) as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// The acquisition rate while held, against the rate holding nothing.
    pub fn rate_while_held(&self) -> f64 {
        self.rate_held / self.rate_idle.max(1e-9)
    }

    /// Redis's CPU in the window, in % of one core.
    pub fn server_cpu_pct(&self) -> f64 {
        100.0 * self.server.cpu_seconds / self.window.as_secs_f64().max(1e-9)
    }

    /// Process CPU in the window, in % of one core.
    pub fn client_cpu_pct(&self) -> f64 {
        100.0 * self.client_cpu.as_secs_f64() / self.window.as_secs_f64().max(1e-9)
    }
}

/// Takes `holds` locks of lease `ttl` in one new client, measures a window of `window` after
/// a renewal period, and gives them back.
pub async fn hold_many(
    url: &str,
    probe: &mut Probe,
    holds: usize,
    ttl: Duration,
    window: Duration,
) -> Result<Scale, BenchError> {
    let client = LockClient::connect(url).await?;
    // Warm: connections open, scripts loaded, the watchdog's task started and stopped.
    let rate_for = RATE_FOR.max(ttl / 3);
    let rate_idle = cycle_rate(&client, rate_for).await?;
    let resident_before = stats::resident_bytes();
    let started = Instant::now();
    let guards = take(&client, holds, ttl, TAKERS, STAGE_LIMIT).await?;
    let take_rate = holds as f64 / started.elapsed().as_secs_f64().max(1e-9);
    let bytes_per_hold =
        stats::resident_bytes().saturating_sub(resident_before) as f64 / holds.max(1) as f64;
    let held_from = Instant::now();
    // A renewal period, so that every hold has been renewed once before the window.
    tokio::time::sleep(ttl / 3).await;
    let renewed_before = client.metrics().renewed;
    let (server, client_cpu, window) = renewal_window(probe, Duration::ZERO, window).await?;
    let renewed = client.metrics().renewed - renewed_before;
    let rate_held = cycle_rate(&client, rate_for).await?;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let held_for = held_from.elapsed();
    give_back(guards, TAKERS, STAGE_LIMIT).await?;
    Ok(Scale {
        holds,
        ttl,
        window,
        held_for,
        bytes_per_hold,
        take_rate,
        server,
        renewed,
        client_cpu,
        lost,
        rate_idle,
        rate_held,
    })
}

/// `holds` locks of lease `ttl` on fresh keys, taken by `takers` tasks in turn, each within
/// `limit`.
pub async fn take(
    client: &LockClient,
    holds: usize,
    ttl: Duration,
    takers: usize,
    limit: Duration,
) -> Result<Vec<LockGuard>, BenchError> {
    let prefix = fresh();
    let takers = takers.min(holds).max(1);
    let mut tasks = Vec::new();
    for t in 0..takers {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut guards = Vec::with_capacity(holds / takers + 1);
            for i in (t..holds).step_by(takers) {
                let key = format!("bench:held:{prefix}:{i}");
                guards.push(client.lock(key).ttl(ttl).acquire().await?);
            }
            Ok::<_, BenchError>(guards)
        }));
    }
    let mut guards = Vec::with_capacity(holds);
    for task in tasks {
        guards.extend(tokio::time::timeout(limit, task).await???);
    }
    Ok(guards)
}

/// Releases every guard, `givers` tasks at a time, each within `limit`.
pub async fn give_back(
    mut guards: Vec<LockGuard>,
    givers: usize,
    limit: Duration,
) -> Result<(), BenchError> {
    let share = guards.len().div_ceil(givers.max(1)).max(1);
    let mut tasks = Vec::new();
    while !guards.is_empty() {
        let chunk: Vec<LockGuard> = guards.drain(..guards.len().min(share)).collect();
        tasks.push(tokio::spawn(async move {
            for guard in chunk {
                let _ = guard.release().await;
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(limit, task).await??;
    }
    Ok(())
}

/// Fresh keys locked and unlocked per second by [`CYCLERS`] tasks of `client`, for
/// `rate_for`.
async fn cycle_rate(client: &LockClient, rate_for: Duration) -> Result<f64, BenchError> {
    let until = Instant::now() + rate_for;
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut cyclers = Vec::new();
    for _ in 0..CYCLERS {
        let (client, done) = (client.clone(), done.clone());
        cyclers.push(tokio::spawn(async move {
            while Instant::now() < until {
                let guard = client
                    .lock(format!("bench:cycle:{}", fresh()))
                    .acquire()
                    .await?;
                guard.release().await?;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok::<_, BenchError>(())
        }));
    }
    for cycler in cyclers {
        tokio::time::timeout(STAGE_LIMIT, cycler).await???;
    }
    let done = done.load(std::sync::atomic::Ordering::Relaxed);
    Ok(done as f64 / started.elapsed().as_secs_f64().max(1e-9))
}
