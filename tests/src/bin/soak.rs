//! The soak run: worker processes take locks on a few keys while a nemesis breaks Redis, the
//! network and the workers themselves; then the merged history is checked
//! ([`rlock_tests::soak`]).
//!
//! ```text
//! cargo run -p rlock-tests --bin soak -- --quick                 # ≈ 1 minute, every fault
//! cargo run --release -p rlock-tests --bin soak -- --acquisitions 1000000 [--aof]
//!     [--workers 4] [--tasks 8] [--ttl-ms 500] [--seed N] [--fault-every-ms 1500]
//!     [--report FILE]
//! cargo run --release -p rlock-tests --bin soak -- --sentinel [--min-replicas 1] …
//! ```
//!
//! Layout: one `redis-server` holds the locks (the one the nemesis attacks; `--aof` runs it
//! with `appendonly yes`, `appendfsync always`); a second one is the fenced store, a hash
//! that keeps the highest fence written per key and refuses lower ones. Each worker process
//! (this binary with `--worker`) reaches the lock server through its own [`FaultProxy`].
//! Its tasks lock a hot key (one of four, contended by everyone) or a cold one of their own,
//! write once through the store with the section's fence, and log each section.
//!
//! With `--sentinel` the locks live on a Sentinel deployment (a master, two replicas, three
//! sentinels) that the workers reach directly, and the deck holds failovers instead of the
//! proxy's faults: an operator's switch-over, and the master killed (then restarted, to be
//! turned into a replica). `--min-replicas 1` makes every grant wait for a replica.
//!
//! The nemesis deals its faults from a shuffled deck, so every kind comes up equally often;
//! everything it does is drawn from `--seed`. The run fails (exit status 1) on a silent
//! overlap, a stale write accepted, a fence regression, a panic, a worker that did not
//! finish, or a lock key left behind.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::deploy::SentinelDeployment;
use rlock_tests::proxy::FaultProxy;
use rlock_tests::soak::{self, History, Record, Release, Write};

/// Keeps the highest fence per key; answers 1 when this write's fence is higher (accepted).
const STORE_SCRIPT: &str = r"
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local fence = tonumber(ARGV[2])
if fence > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0";
const STORE_HASH: &str = "fenced-store";
/// Hot keys: every task of every worker contends for these.
const HOT_KEYS: u64 = 4;
/// Bound of every command the harness sends itself (admin, store).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = if args.first().map(String::as_str) == Some("--worker") {
        worker::main(&args[1..])
    } else {
        Config::parse(&args).and_then(orchestrate)
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `--flag value` pairs and bare `--flag`s.
fn flags(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut it = args.iter().peekable();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}"))?;
        let value = match it.peek() {
            Some(v) if !v.starts_with("--") => it.next().cloned().unwrap_or_default(),
            _ => String::new(),
        };
        out.insert(name.to_owned(), value);
    }
    Ok(out)
}

fn number(flags: &BTreeMap<String, String>, name: &str, default: u64) -> Result<u64, String> {
    match flags.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("--{name} takes a number, not {v:?}")),
    }
}

/// How the run is shaped.
#[derive(Debug, Clone)]
struct Config {
    workers: u64,
    tasks: u64,
    ttl: Duration,
    /// Total acquisitions to reach (0: run for `duration`).
    acquisitions: u64,
    duration: Duration,
    fault_every: Duration,
    seed: u64,
    aof: bool,
    sentinel: bool,
    min_replicas: u64,
    report: Option<PathBuf>,
    quick: bool,
}

impl Config {
    fn parse(args: &[String]) -> Result<Config, String> {
        let f = flags(args)?;
        for name in f.keys() {
            let known = [
                "quick",
                "acquisitions",
                "duration-s",
                "workers",
                "tasks",
                "ttl-ms",
                "seed",
                "fault-every-ms",
                "aof",
                "sentinel",
                "min-replicas",
                "report",
                "help",
            ];
            if !known.contains(&name.as_str()) {
                return Err(format!("unknown option --{name} (see the source's docs)"));
            }
        }
        if f.contains_key("help") {
            return Err(
                "usage: soak [--quick] [--acquisitions N | --duration-s S] [--aof] \
                 [--workers W] [--tasks T] [--ttl-ms MS] [--seed N] [--fault-every-ms MS] \
                 [--report FILE]"
                    .into(),
            );
        }
        let quick = f.contains_key("quick");
        let config = Config {
            workers: number(&f, "workers", if quick { 3 } else { 4 })?.clamp(1, 32),
            tasks: number(&f, "tasks", if quick { 4 } else { 8 })?.clamp(1, 256),
            ttl: Duration::from_millis(number(&f, "ttl-ms", 500)?.clamp(50, 60_000)),
            acquisitions: number(&f, "acquisitions", 0)?,
            duration: Duration::from_secs(number(&f, "duration-s", if quick { 45 } else { 300 })?),
            fault_every: Duration::from_millis(
                number(&f, "fault-every-ms", if quick { 900 } else { 1500 })?.max(100),
            ),
            seed: number(&f, "seed", now_us())?,
            aof: f.contains_key("aof"),
            sentinel: f.contains_key("sentinel"),
            min_replicas: number(&f, "min-replicas", 0)?.min(2),
            report: f.get("report").map(PathBuf::from),
            quick,
        };
        Ok(config)
    }
}

/// The kinds of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// `kill -9` of the lock server, restarted at once on the same port.
    KillRestart,
    /// SIGSTOP of the lock server for 0.5–2 ttl, then SIGCONT.
    PauseServer,
    /// `CLIENT PAUSE` for 0.5–2 ttl.
    ClientPause,
    /// `DEBUG SLEEP` for 0.5–2 ttl.
    DebugSleep,
    /// One worker's flows delayed by 5–50 ms for 1–3 ttl.
    Delay,
    /// One worker's flows batched on a 5–30 ms tick for 1–3 ttl.
    Batch,
    /// One worker's open flows go silent (no FIN, no RST).
    Blackhole,
    /// One worker's flows reset.
    Reset,
    /// SIGSTOP of one worker process for 1.5–3 ttl (a GC pause past the lease).
    PauseHolder,
    /// Sentinel: `SENTINEL FAILOVER`, the old master staying up as a replica.
    SwitchOver,
    /// Sentinel: the master killed, a replica promoted, the old one restarted.
    KillFailover,
}

/// The deck on a Sentinel deployment (workers reach it directly: no proxy; its servers run
/// without the debug command).
const SENTINEL_FAULTS: [Fault; 5] = [
    Fault::SwitchOver,
    Fault::KillFailover,
    Fault::PauseServer,
    Fault::ClientPause,
    Fault::PauseHolder,
];

const FAULTS: [Fault; 9] = [
    Fault::KillRestart,
    Fault::PauseServer,
    Fault::ClientPause,
    Fault::DebugSleep,
    Fault::Delay,
    Fault::Batch,
    Fault::Blackhole,
    Fault::Reset,
    Fault::PauseHolder,
];

/// A worker process and the proxy in front of it.
struct Worker {
    child: Child,
    /// In front of the lock server (not on a Sentinel deployment).
    proxy: Option<FaultProxy>,
    history: PathBuf,
    stopped: bool,
}

impl Worker {
    fn signal(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status();
        self.stopped = signal == "STOP";
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.stopped {
            self.signal("CONT");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn orchestrate(config: Config) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut server_args = vec!["--enable-debug-command", "yes"];
    if config.aof {
        server_args.extend(["--appendonly", "yes", "--appendfsync", "always"]);
    }
    let locks = if config.sentinel {
        Locks::Sentinel(SentinelDeployment::start())
    } else {
        Locks::Single(RedisServer::start_with_args(&server_args))
    };
    let store = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("rlock-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;

    let per_worker = config.acquisitions.div_ceil(config.workers);
    let started = Instant::now();
    let deadline_us = if config.acquisitions == 0 {
        now_us() + u64::try_from(config.duration.as_micros()).unwrap_or(u64::MAX)
    } else {
        0
    };
    let mut workers = Vec::new();
    for w in 0..config.workers {
        let (proxy, url) = match &locks {
            Locks::Single(server) => {
                let proxy = FaultProxy::start(server.port());
                let url = proxy.url();
                (Some(proxy), url)
            }
            Locks::Sentinel(deployment) => (None, deployment.url()),
        };
        let history = dir.join(format!("worker-{w}.log"));
        let child = Command::new(&exe)
            .arg("--worker")
            .args(["--id", &w.to_string()])
            .args(["--redis", &url])
            .args(["--min-replicas", &config.min_replicas.to_string()])
            .args(["--store", &store.url()])
            .args(["--history", &history.to_string_lossy()])
            .args(["--tasks", &config.tasks.to_string()])
            .args(["--ttl-ms", &config.ttl.as_millis().to_string()])
            .args(["--acquisitions", &per_worker.to_string()])
            .args(["--until-us", &deadline_us.to_string()])
            .args(["--seed", &config.seed.wrapping_add(w).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        workers.push(Worker {
            child,
            proxy,
            history,
            stopped: false,
        });
    }
    println!(
        "soak: {} workers × {} tasks, ttl {:?}, {}, seed {}, {}",
        config.workers,
        config.tasks,
        config.ttl,
        if config.acquisitions > 0 {
            format!("{} acquisitions", config.acquisitions)
        } else {
            format!("{:?}", config.duration)
        },
        config.seed,
        if config.sentinel {
            "Sentinel"
        } else if config.aof {
            "AOF (fsync always)"
        } else {
            "no persistence"
        },
    );

    let mut nemesis = Nemesis {
        rng: fastrand::Rng::with_seed(config.seed),
        deck: Vec::new(),
        faults: if config.sentinel {
            &SENTINEL_FAULTS
        } else {
            &FAULTS
        },
        injected: BTreeMap::new(),
        log: Vec::new(),
        ttl: config.ttl,
    };
    let mut exits = vec![None; workers.len()];
    let mut next_fault = Instant::now() + config.fault_every;
    // A bound on the whole run: workers that make no progress are killed and reported.
    let give_up = started
        + if config.acquisitions > 0 {
            Duration::from_secs(4 * 60 * 60)
        } else {
            config.duration * 3 + Duration::from_secs(60)
        };
    while exits.iter().any(Option::is_none) {
        if Instant::now() >= give_up {
            return Err(format!(
                "workers still running after {:?}; histories in {}",
                started.elapsed(),
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
        for (i, w) in workers.iter_mut().enumerate() {
            if exits[i].is_none() {
                exits[i] = w.child.try_wait().map_err(|e| e.to_string())?;
            }
        }
        if Instant::now() >= next_fault && exits.iter().any(Option::is_none) {
            runtime.block_on(nemesis.strike(&locks, &mut workers))?;
            next_fault = Instant::now() + config.fault_every;
        }
    }
    let elapsed = started.elapsed();

    // Leftovers: every lease, queue and mark must have expired once the workers are gone.
    std::thread::sleep(config.ttl.max(Duration::from_secs(2)) + Duration::from_secs(3));
    let orphans = runtime.block_on(async {
        let mut raw = locks.server().raw_with_timeout(COMMAND_TIMEOUT).await;
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut raw).await?;
        Ok::<_, redis::RedisError>(keys)
    });
    let orphans = orphans.map_err(|e| format!("cannot list leftover keys: {e}"))?;

    let mut history = History::default();
    let mut problems = Vec::new();
    for (i, w) in workers.iter().enumerate() {
        let status = exits[i].map(|s| s.success()).unwrap_or(false);
        if !status {
            history.panics += 1;
            problems.push(format!("worker {i} exited with {:?}", exits[i]));
        }
        match std::fs::read_to_string(&w.history) {
            Ok(text) => {
                if let Err(e) = history.add_worker(u32::try_from(i).unwrap_or(0), &text) {
                    problems.push(e);
                }
            }
            Err(e) => problems.push(format!("worker {i}: {}: {e}", w.history.display())),
        }
    }
    drop(workers);
    let verdict = soak::check(&history);
    // On Sentinel, a grant from a master being demoted can arrive after a grant from the
    // new one (two masters for a moment): the fence order then goes backwards, and the
    // fenced store refuses the late holder. A failover non-guarantee, counted and shown
    // (RELIABILITY.md); on one server a regression is a defect.
    let mut regressions_after: BTreeMap<Option<Fault>, u64> = BTreeMap::new();
    for (_, later) in &verdict.fence_regressions {
        *regressions_after
            .entry(nemesis.cause(later.grant_us))
            .or_default() += 1;
    }
    let violations = verdict.violations(&history);
    problems.extend(
        violations
            .into_iter()
            .filter(|v| !(config.sentinel && v.starts_with("fence went backwards"))),
    );
    if !orphans.is_empty() {
        problems.push(format!("lock keys left behind: {orphans:?}"));
    }
    if history.panics > 0 {
        problems.push(format!("{} panics", history.panics));
    }
    let missing: Vec<Fault> = nemesis
        .faults
        .iter()
        .filter(|f| !nemesis.injected.contains_key(f))
        .copied()
        .collect();
    if config.quick && !missing.is_empty() {
        problems.push(format!("faults never injected: {missing:?}"));
    }

    let mut report = report(&config, &history, &verdict, &nemesis, &orphans, elapsed);
    if !regressions_after.is_empty() {
        let _ = writeln!(
            report,
            "\nFence regressions by the fault around the later grant: {regressions_after:?}"
        );
    }
    println!("{report}");
    if let Some(path) = &config.report {
        std::fs::write(path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for overlap in &verdict.silent_overlaps {
        let cause = nemesis.cause(overlap.later.grant_us);
        problems.push(format!(
            "(the silent overlap granted at {} followed {cause:?})",
            overlap.later.grant_us
        ));
    }
    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        println!("soak: passed");
        Ok(())
    } else {
        Err(format!(
            "failed (histories kept in {}):\n  {}",
            dir.display(),
            problems.join("\n  ")
        ))
    }
}

/// Where the locks live: the server the nemesis attacks.
enum Locks {
    Single(RedisServer),
    Sentinel(SentinelDeployment),
}

impl Locks {
    /// The server holding the locks now (the master, on Sentinel).
    fn server(&self) -> &RedisServer {
        match self {
            Locks::Single(server) => server,
            Locks::Sentinel(d) => d.master().unwrap_or(&d.servers[0]),
        }
    }
}

struct Nemesis {
    rng: fastrand::Rng,
    deck: Vec<Fault>,
    /// The kinds this deployment's deck holds.
    faults: &'static [Fault],
    injected: BTreeMap<Fault, u64>,
    /// Every fault: its kind, when it began and when it was healed (µs since the epoch).
    log: Vec<(Fault, u64, u64)>,
    ttl: Duration,
}

impl Nemesis {
    fn ttl_times(&mut self, low: f64, high: f64) -> Duration {
        self.ttl.mul_f64(low + (high - low) * self.rng.f64())
    }

    /// Injects the next fault of the deck, waits it out and heals it.
    async fn strike(&mut self, deployment: &Locks, workers: &mut [Worker]) -> Result<(), String> {
        let locks = deployment.server();
        if self.deck.is_empty() {
            self.deck = self.faults.to_vec();
            self.rng.shuffle(&mut self.deck);
        }
        let Some(fault) = self.deck.pop() else {
            return Ok(());
        };
        let victim = self.rng.usize(..workers.len());
        let began = now_us();
        match fault {
            Fault::KillRestart => {
                locks.kill();
                tokio::time::sleep(Duration::from_millis(self.rng.u64(0..100))).await;
                locks.restart();
            }
            Fault::PauseServer => {
                let pause = self.ttl_times(0.5, 2.0);
                locks.pause();
                tokio::time::sleep(pause).await;
                locks.resume();
            }
            Fault::ClientPause | Fault::DebugSleep => {
                let pause = self.ttl_times(0.5, 2.0);
                let mut admin = locks.raw_with_timeout(COMMAND_TIMEOUT + pause).await;
                let command = if fault == Fault::ClientPause {
                    redis::cmd("CLIENT")
                        .arg("PAUSE")
                        .arg(pause.as_millis().to_string())
                        .arg("ALL")
                        .clone()
                } else {
                    redis::cmd("DEBUG")
                        .arg("SLEEP")
                        .arg(format!("{:.3}", pause.as_secs_f64()))
                        .clone()
                };
                command
                    .query_async::<()>(&mut admin)
                    .await
                    .map_err(|e| format!("{fault:?}: {e}"))?;
                if fault == Fault::ClientPause {
                    tokio::time::sleep(pause).await;
                }
            }
            Fault::Delay | Fault::Batch => {
                let span = self.ttl_times(1.0, 3.0);
                let Some(proxy) = &workers[victim].proxy else {
                    return Ok(());
                };
                if fault == Fault::Delay {
                    proxy.set_delay(Duration::from_millis(self.rng.u64(5..=50)));
                } else {
                    proxy.set_batching(Some(Duration::from_millis(self.rng.u64(5..=30))));
                }
                tokio::time::sleep(span).await;
                proxy.set_delay(Duration::ZERO);
                proxy.set_batching(None);
            }
            Fault::Blackhole => workers[victim]
                .proxy
                .iter()
                .for_each(FaultProxy::blackhole_existing),
            Fault::Reset => workers[victim].proxy.iter().for_each(FaultProxy::reset_all),
            Fault::SwitchOver => {
                let Locks::Sentinel(d) = deployment else {
                    return Ok(());
                };
                // Refused while a failover (one a pause set off) is under way: not injected.
                if d.try_switch_over().is_err() {
                    return Ok(());
                }
            }
            Fault::KillFailover => {
                if let Locks::Sentinel(d) = deployment {
                    let old = d.master().map(RedisServer::port);
                    d.fail_over();
                    // Back as a replica (Sentinel turns the old master into one).
                    if let Some(old) = d.servers.iter().find(|s| Some(s.port()) == old) {
                        old.restart();
                    }
                }
            }
            Fault::PauseHolder => {
                let pause = self.ttl_times(1.5, 3.0);
                let worker = &mut workers[victim];
                if worker.child.try_wait().ok().flatten().is_none() {
                    worker.signal("STOP");
                    tokio::time::sleep(pause).await;
                    worker.signal("CONT");
                }
            }
        }
        *self.injected.entry(fault).or_default() += 1;
        self.log.push((fault, began, now_us()));
        Ok(())
    }

    /// The fault most likely behind an event at `at_us`: the last one begun before it, if
    /// it was healed less than three leases before.
    fn cause(&self, at_us: u64) -> Option<Fault> {
        let slack_us = 3 * u64::try_from(self.ttl.as_micros()).unwrap_or(u64::MAX);
        self.log
            .iter()
            .rev()
            .find(|(_, began, _)| *began <= at_us)
            .filter(|(_, _, healed)| at_us <= healed.saturating_add(slack_us))
            .map(|(fault, _, _)| *fault)
    }
}

fn report(
    config: &Config,
    history: &History,
    verdict: &soak::Verdict,
    nemesis: &Nemesis,
    orphans: &[String],
    elapsed: Duration,
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "| run | |\n|---|---|\n| command | `soak {}` |\n| workers × tasks | {} × {} |\n\
         | ttl | {} ms |\n| deployment | {} |\n| wall time | {:.0} s |\n\
         | acquisitions | {} ({:.0}/s) |",
        command_line(config),
        config.workers,
        config.tasks,
        config.ttl.as_millis(),
        if config.sentinel {
            format!(
                "Sentinel (a master, two replicas), min_replicas {}",
                config.min_replicas
            )
        } else if config.aof {
            "one server, AOF with `appendfsync always`".to_owned()
        } else {
            "one server, no persistence".to_owned()
        },
        elapsed.as_secs_f64(),
        verdict.sections,
        verdict.sections as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    // Each signalled overlap, put down to the fault around its later grant.
    let mut overlaps_after: BTreeMap<Option<Fault>, u64> = BTreeMap::new();
    for overlap in &verdict.signalled_overlaps {
        let cause = nemesis.cause(overlap.later.grant_us);
        *overlaps_after.entry(cause).or_default() += 1;
    }
    let _ = writeln!(
        o,
        "\n| fault | injected | overlaps (holder told late) after it |\n|---|---:|---:|"
    );
    for (fault, n) in &nemesis.injected {
        let overlaps = overlaps_after.get(&Some(*fault)).copied().unwrap_or(0);
        let _ = writeln!(o, "| {fault:?} | {n} | {overlaps} |");
    }
    if let Some(n) = overlaps_after.get(&None) {
        let _ = writeln!(o, "| (no fault nearby) | | {n} |");
    }
    let _ = writeln!(
        o,
        "\n| outcome | count |\n|---|---:|\n| leases lost (`lost()` fired) | {} |\n\
         | overlaps, the earlier holder told late (`lost()` or its release) | {} |\n\
         | overlaps, the earlier holder never told | {} |\n\
         | writes refused by fencing | {} |\n| stale writes accepted | {} |\n\
         | fence regressions | {} |\n| panics | {} |\n| orphan keys | {} |",
        verdict.lost,
        verdict.signalled_overlaps.len(),
        verdict.silent_overlaps.len(),
        verdict.rejected_writes,
        verdict.stale_writes.len(),
        verdict.fence_regressions.len(),
        history.panics,
        orphans.len(),
    );
    let _ = writeln!(
        o,
        "\nHow long after the later grant the earlier holder was told, p50 / p99 / max: {} ms",
        soak::percentiles_ms(&verdict.lost_windows_us)
    );
    let _ = writeln!(o, "\n| error (`LockError`) | count |\n|---|---:|");
    for (variant, n) in &history.errors {
        let _ = writeln!(o, "| {variant} | {n} |");
    }
    o
}

fn command_line(config: &Config) -> String {
    let mut line = if config.quick {
        "--quick".to_owned()
    } else if config.acquisitions > 0 {
        format!("--acquisitions {}", config.acquisitions)
    } else {
        format!("--duration-s {}", config.duration.as_secs())
    };
    if config.aof {
        line.push_str(" --aof");
    }
    if config.sentinel {
        let _ = write!(line, " --sentinel --min-replicas {}", config.min_replicas);
    }
    let _ = write!(line, " --seed {}", config.seed);
    line
}

mod worker {
    //! One worker process: `--tasks` tasks lock, write through the fenced store and log.

    use super::*;

    struct Args {
        id: u64,
        redis: String,
        store: String,
        history: PathBuf,
        tasks: u64,
        ttl: Duration,
        acquisitions: u64,
        until_us: u64,
        seed: u64,
        min_replicas: u32,
    }

    pub(super) fn main(args: &[String]) -> Result<(), String> {
        let f = flags(args)?;
        let text = |name: &str| {
            f.get(name)
                .cloned()
                .ok_or_else(|| format!("worker: missing --{name}"))
        };
        let args = Args {
            id: number(&f, "id", 0)?,
            redis: text("redis")?,
            store: text("store")?,
            history: PathBuf::from(text("history")?),
            tasks: number(&f, "tasks", 4)?,
            ttl: Duration::from_millis(number(&f, "ttl-ms", 500)?),
            acquisitions: number(&f, "acquisitions", 0)?,
            until_us: number(&f, "until-us", 0)?,
            seed: number(&f, "seed", 0)?,
            min_replicas: u32::try_from(number(&f, "min-replicas", 0)?).unwrap_or(0),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(run(args))
    }

    /// What the tasks of one worker share.
    struct Shared {
        client: LockClient,
        store: redis::aio::MultiplexedConnection,
        script: redis::Script,
        acquired: AtomicU64,
        args: Args,
    }

    async fn run(args: Args) -> Result<(), String> {
        let client = connect(&args.redis, args.ttl).await?;
        let store = redis::Client::open(args.store.as_str())
            .map_err(|e| e.to_string())?
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(COMMAND_TIMEOUT))
                    .set_response_timeout(Some(COMMAND_TIMEOUT)),
            )
            .await
            .map_err(|e| format!("store: {e}"))?;
        let shared = Arc::new(Shared {
            client,
            store,
            script: redis::Script::new(STORE_SCRIPT),
            acquired: AtomicU64::new(0),
            args,
        });
        let tasks: Vec<_> = (0..shared.args.tasks)
            .map(|t| tokio::spawn(task(shared.clone(), t)))
            .collect();
        let mut out = String::new();
        let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
        for handle in tasks {
            match handle.await {
                Ok((lines, task_errors)) => {
                    out.push_str(&lines);
                    for (variant, n) in task_errors {
                        *errors.entry(variant).or_default() += n;
                    }
                }
                Err(e) => {
                    let _ = writeln!(out, "P {e}");
                }
            }
        }
        for (variant, n) in errors {
            let _ = writeln!(out, "E {variant} {n}");
        }
        out.push_str("DONE\n");
        std::fs::write(&shared.args.history, out)
            .map_err(|e| format!("{}: {e}", shared.args.history.display()))
    }

    /// Connects, retrying while the nemesis keeps Redis away (bounded: one minute).
    async fn connect(url: &str, ttl: Duration) -> Result<LockClient, String> {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let attempt = LockClient::builder()
                .url(url)
                .command_timeout(ttl.min(Duration::from_millis(300)))
                .connect()
                .await;
            match attempt {
                Ok(client) => return Ok(client),
                Err(e) if Instant::now() >= give_up => return Err(format!("connect: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn done(shared: &Shared) -> bool {
        let args = &shared.args;
        if args.acquisitions > 0 {
            shared.acquired.load(Ordering::Relaxed) >= args.acquisitions
        } else {
            now_us() >= args.until_us
        }
    }

    /// The `LockError` variant's name, for the error table.
    fn variant(e: &LockError) -> &'static str {
        match e {
            LockError::Busy { .. } => "Busy",
            LockError::Lost { .. } => "Lost",
            LockError::Timeout { .. } => "Timeout",
            LockError::Unavailable { .. } => "Unavailable",
            LockError::NotReplicated { .. } => "NotReplicated",
            LockError::QuorumNotReached { .. } => "QuorumNotReached",
            LockError::InvalidKey { .. } => "InvalidKey",
            LockError::InvalidConfig(_) => "InvalidConfig",
            LockError::NotConfigured => "NotConfigured",
            _ => "Other",
        }
    }

    async fn task(shared: Arc<Shared>, t: u64) -> (String, BTreeMap<&'static str, u64>) {
        let args = &shared.args;
        let mut rng = fastrand::Rng::with_seed(args.seed ^ (t << 32));
        let mut out = String::new();
        let mut errors = BTreeMap::new();
        let ttl_ms = u64::try_from(args.ttl.as_millis()).unwrap_or(u64::MAX);
        while !done(&shared) {
            let key = if rng.bool() {
                format!("soak:hot:{}", rng.u64(..HOT_KEYS))
            } else {
                format!("soak:cold:{}:{t}:{}", args.id, rng.u64(..4))
            };
            let attempt = shared
                .client
                .lock(key.as_str())
                .ttl(args.ttl)
                .wait(args.ttl * 2)
                .min_replicas(args.min_replicas)
                .fenced()
                .acquire()
                .await;
            let guard = match attempt {
                Ok(guard) => guard,
                Err(e) => {
                    *errors.entry(variant(&e)).or_default() += 1;
                    if !e.is_busy() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    continue;
                }
            };
            shared.acquired.fetch_add(1, Ordering::Relaxed);
            let grant_us = now_us();
            // Mostly short sections; one in 400 spans renewals (and so the faults).
            let hold_ms = if rng.u64(..400) == 0 {
                rng.u64(ttl_ms / 2..=ttl_ms * 3)
            } else {
                rng.u64(0..=1)
            };
            let write_at = Duration::from_millis(rng.u64(0..=hold_ms));
            let rest = Duration::from_millis(hold_ms) - write_at;
            let fence = guard.fence().map_or(0, |f| f.get());
            let mut record = Record {
                worker: 0,
                key: 0,
                fence,
                grant_us,
                end_us: 0,
                lost_us: 0,
                write_sent_us: 0,
                write_done_us: 0,
                write: Write::None,
                release: Release::Ok,
            };
            tokio::select! {
                biased;
                () = guard.lost() => record.lost_us = now_us(),
                () = tokio::time::sleep(write_at) => {}
            }
            if record.lost_us == 0 {
                // The write itself is never cut short: its outcome must be known.
                record.write_sent_us = now_us();
                let mut store = shared.store.clone();
                let written: Result<i64, _> = shared
                    .script
                    .key(STORE_HASH)
                    .arg(&key)
                    .arg(fence)
                    .invoke_async(&mut store)
                    .await;
                record.write_done_us = now_us();
                record.write = match written {
                    Ok(1) => Write::Accepted,
                    Ok(_) => Write::Rejected,
                    Err(_) => Write::None,
                };
                if guard.is_lost() {
                    record.lost_us = record.write_done_us;
                } else {
                    tokio::select! {
                        biased;
                        () = guard.lost() => record.lost_us = now_us(),
                        () = tokio::time::sleep(rest) => {}
                    }
                }
            }
            record.end_us = now_us();
            record.release = match guard.release().await {
                Ok(()) if record.lost_us == 0 => Release::Ok,
                Ok(()) => Release::Lost,
                Err(LockError::Lost { .. }) => Release::Lost,
                Err(e) => {
                    *errors.entry(variant(&e)).or_default() += 1;
                    Release::Failed
                }
            };
            out.push_str(&record.line(&key));
            out.push('\n');
        }
        (out, errors)
    }
}
