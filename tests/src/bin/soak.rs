//! The soak run: worker processes take locks on a few keys while a nemesis breaks Redis, the
//! network and the workers themselves; then the merged history is checked
//! ([`rlock_tests::soak`]).
//!
//! ```text
//! cargo run -p rlock-tests --bin soak -- --quick                 # ≈ 1 minute, every fault
//! cargo run --release -p rlock-tests --bin soak -- --acquisitions 1000000 [--aof]
//!     [--workers 4] [--tasks 8] [--ttl-ms 500] [--seed N] [--fault-every-ms 1500]
//!     [--report FILE]
//! cargo run --release -p rlock-tests --bin soak -- --on single,sentinel,cluster
//!     [--min-replicas 1] …
//! ```
//!
//! Layout: one `redis-server` holds the locks (the one the nemesis attacks; `--aof` runs it
//! with `appendonly yes`, `appendfsync always`); a second one is the fenced store, a hash
//! that keeps the highest fence written per key and refuses lower ones. Each worker process
//! (this binary with `--worker`) reaches the lock server through its own [`FaultProxy`].
//! Its tasks lock a hot key (one of four, contended by everyone) or a cold one of their own,
//! write once through the store with the section's fence, and log each section.
//!
//! `--on` names the deployments the locks live on (default: the one server; `--quick`: all
//! three). Besides the one server, a Sentinel deployment (a master, two replicas, three
//! sentinels) and a Redis Cluster (three masters with a replica each), which the workers
//! reach directly; every section picks one at random, and its keys are named after it. Each
//! adds its failovers to the deck: an operator's switch-over, and a master killed (then
//! restarted, to come back as a replica). `--min-replicas 1` makes every grant on them wait
//! for a replica. Without the one server, the server faults hit a current master.
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
use rlock_tests::deploy::{ClusterDeployment, SentinelDeployment};
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
    on: Vec<Deployment>,
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
                "on",
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
                 [--on single,sentinel,cluster] [--min-replicas R] [--report FILE]"
                    .into(),
            );
        }
        let quick = f.contains_key("quick");
        let on = match f.get("on") {
            Some(list) => list
                .split(',')
                .map(Deployment::parse)
                .collect::<Result<Vec<_>, _>>()?,
            None if quick => Deployment::ALL.to_vec(),
            None => vec![Deployment::Single],
        };
        if on.is_empty() {
            return Err("--on names no deployment".into());
        }
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
            on,
            min_replicas: number(&f, "min-replicas", 0)?.min(2),
            report: f.get("report").map(PathBuf::from),
            quick,
        };
        Ok(config)
    }
}

/// Where locks live during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deployment {
    /// One `redis-server`, each worker behind its own fault proxy.
    Single,
    /// A master, two replicas and three sentinels.
    Sentinel,
    /// Three masters with a replica each.
    Cluster,
}

impl Deployment {
    const ALL: [Deployment; 3] = [
        Deployment::Single,
        Deployment::Sentinel,
        Deployment::Cluster,
    ];

    fn parse(name: &str) -> Result<Deployment, String> {
        Deployment::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| format!("--on takes single, sentinel or cluster, not {name:?}"))
    }

    /// Its name in `--on` and in its lock keys (`soak:<name>:…`).
    fn name(self) -> &'static str {
        match self {
            Deployment::Single => "single",
            Deployment::Sentinel => "sentinel",
            Deployment::Cluster => "cluster",
        }
    }

    /// The faults it adds to the deck.
    fn faults(self) -> &'static [Fault] {
        match self {
            Deployment::Single => &SINGLE_FAULTS,
            Deployment::Sentinel => &[Fault::SentinelSwitchOver, Fault::SentinelKill],
            Deployment::Cluster => &[Fault::ClusterSwitchOver, Fault::ClusterKill],
        }
    }

    /// The deployment a soak key (`soak:<name>:…`) lives on.
    fn of_key(key: &str) -> Option<Deployment> {
        let name = key.strip_prefix("soak:")?.split(':').next()?;
        Deployment::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether it has replicas, which a failover can promote with older data.
    fn fails_over(self) -> bool {
        self != Deployment::Single
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
    SentinelSwitchOver,
    /// Sentinel: the master killed, a replica promoted, the old one restarted.
    SentinelKill,
    /// Cluster: `CLUSTER FAILOVER` on a master's replica, the old master staying up as its
    /// replica.
    ClusterSwitchOver,
    /// Cluster: a master killed, its replica promoted, the old one restarted.
    ClusterKill,
}

impl Fault {
    /// Whether this fault reaches the locks on `deployment`, when the server faults hit
    /// `server_faults_on`.
    fn hits(self, deployment: Deployment, server_faults_on: Deployment) -> bool {
        match self {
            Fault::PauseHolder => true,
            Fault::PauseServer | Fault::ClientPause => deployment == server_faults_on,
            Fault::KillRestart
            | Fault::DebugSleep
            | Fault::Delay
            | Fault::Batch
            | Fault::Blackhole
            | Fault::Reset => deployment == Deployment::Single,
            Fault::SentinelSwitchOver | Fault::SentinelKill => deployment == Deployment::Sentinel,
            Fault::ClusterSwitchOver | Fault::ClusterKill => deployment == Deployment::Cluster,
        }
    }
}

/// Without the one server (no proxy, no debug command), the faults that still apply: they
/// hit a current master.
const MASTER_FAULTS: [Fault; 3] = [Fault::PauseServer, Fault::ClientPause, Fault::PauseHolder];

/// With the one server: every fault of a server, a network and a process.
const SINGLE_FAULTS: [Fault; 9] = [
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
    let locks = Locks {
        single: config
            .on
            .contains(&Deployment::Single)
            .then(|| RedisServer::start_with_args(&server_args)),
        sentinel: config
            .on
            .contains(&Deployment::Sentinel)
            .then(SentinelDeployment::start),
        cluster: config
            .on
            .contains(&Deployment::Cluster)
            .then(ClusterDeployment::start),
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
        let proxy = locks.single.as_ref().map(|s| FaultProxy::start(s.port()));
        let mut urls = Vec::new();
        if let Some(proxy) = &proxy {
            urls.extend(["--single".to_owned(), proxy.url()]);
        }
        if let Some(d) = &locks.sentinel {
            urls.extend(["--sentinel".to_owned(), d.url()]);
        }
        if let Some(d) = &locks.cluster {
            urls.extend(["--cluster".to_owned(), d.url()]);
        }
        let history = dir.join(format!("worker-{w}.log"));
        let child = Command::new(&exe)
            .arg("--worker")
            .args(["--id", &w.to_string()])
            .args(&urls)
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
        "soak: {} workers × {} tasks, ttl {:?}, {}, seed {}, on {}",
        config.workers,
        config.tasks,
        config.ttl,
        if config.acquisitions > 0 {
            format!("{} acquisitions", config.acquisitions)
        } else {
            format!("{:?}", config.duration)
        },
        config.seed,
        deployments(&config),
    );

    let mut nemesis = Nemesis {
        rng: fastrand::Rng::with_seed(config.seed),
        deck: Vec::new(),
        faults: locks.faults(&config.on),
        server_faults_on: if locks.single.is_some() {
            Deployment::Single
        } else if locks.sentinel.is_some() {
            Deployment::Sentinel
        } else {
            Deployment::Cluster
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
        let mut keys = Vec::new();
        for master in locks.masters() {
            let mut raw = master.raw_with_timeout(COMMAND_TIMEOUT).await;
            let found: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut raw).await?;
            keys.extend(found);
        }
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
    let mut verdict = soak::check(&history);
    // Across a failover, a grant from a master being demoted can arrive after a grant from
    // the new one (two masters for a moment): the fence order then goes backwards, and the
    // fenced store refuses the late holder. A failover non-guarantee, counted and shown
    // (RELIABILITY.md); on one server a regression is a defect.
    let on_failover =
        |r: &Record| Deployment::of_key(history.key(r)).is_some_and(Deployment::fails_over);
    let (excused, defects) = std::mem::take(&mut verdict.fence_regressions)
        .into_iter()
        .partition::<Vec<_>, _>(|(_, later)| on_failover(later));
    verdict.fence_regressions = defects;
    let mut regressions_after: BTreeMap<Option<Fault>, u64> = BTreeMap::new();
    for (_, later) in &excused {
        *regressions_after
            .entry(nemesis.cause(later.grant_us, history.key(later)))
            .or_default() += 1;
    }
    problems.extend(verdict.violations(&history));
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
            "\nFence regressions after failovers (keys on replicated deployments), by the fault \
             around the later grant: {regressions_after:?}"
        );
    }
    println!("{report}");
    if let Some(path) = &config.report {
        std::fs::write(path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for overlap in &verdict.silent_overlaps {
        let cause = nemesis.cause(overlap.later.grant_us, history.key(&overlap.later));
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

/// Where the locks live: the servers the nemesis attacks.
struct Locks {
    single: Option<RedisServer>,
    sentinel: Option<SentinelDeployment>,
    cluster: Option<ClusterDeployment>,
}

impl Locks {
    /// The server the server faults hit: the one server, else a current master.
    fn server(&self) -> Option<&RedisServer> {
        self.single
            .as_ref()
            .or_else(|| self.masters().first().copied())
    }

    /// Every server that is a master now: where lock keys live.
    fn masters(&self) -> Vec<&RedisServer> {
        let mut masters: Vec<&RedisServer> = self.single.iter().collect();
        masters.extend(self.sentinel.as_ref().and_then(SentinelDeployment::master));
        masters.extend(self.cluster.iter().flat_map(ClusterDeployment::masters));
        masters
    }

    /// The kinds of fault the deck holds for these deployments.
    fn faults(&self, on: &[Deployment]) -> Vec<Fault> {
        let mut faults: Vec<Fault> = on.iter().flat_map(|d| d.faults()).copied().collect();
        if self.single.is_none() {
            faults.extend(MASTER_FAULTS);
        }
        faults
    }
}

/// The deployments of the run, for its report.
fn deployments(config: &Config) -> String {
    let names: Vec<String> = config
        .on
        .iter()
        .map(|d| match d {
            Deployment::Single if config.aof => "one server (AOF, `appendfsync always`)".into(),
            Deployment::Single => "one server (no persistence)".into(),
            Deployment::Sentinel => "Sentinel (a master, two replicas)".into(),
            Deployment::Cluster => "Cluster (three masters, a replica each)".into(),
        })
        .collect();
    let mut out = names.join(", ");
    if config.on.iter().any(|d| d.fails_over()) {
        let _ = write!(out, "; min_replicas {}", config.min_replicas);
    }
    out
}

struct Nemesis {
    rng: fastrand::Rng,
    deck: Vec<Fault>,
    /// The kinds the deck holds.
    faults: Vec<Fault>,
    /// Where `PauseServer` and `ClientPause` strike (see [`Locks::server`]).
    server_faults_on: Deployment,
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
    async fn strike(&mut self, locks: &Locks, workers: &mut [Worker]) -> Result<(), String> {
        let Some(server) = locks.server() else {
            return Ok(());
        };
        if self.deck.is_empty() {
            self.deck = self.faults.clone();
            self.rng.shuffle(&mut self.deck);
        }
        let Some(fault) = self.deck.pop() else {
            return Ok(());
        };
        let began = now_us();
        if self.inject(fault, locks, server, workers).await? {
            *self.injected.entry(fault).or_default() += 1;
            self.log.push((fault, began, now_us()));
        } else {
            // Dealt again later, so that every kind still comes up as often.
            self.deck.insert(0, fault);
        }
        Ok(())
    }

    /// Injects `fault`, waits it out and heals it; `false` when the deployment was not in a
    /// state to take it (no replica in sync for a failover, one already under way).
    async fn inject(
        &mut self,
        fault: Fault,
        locks: &Locks,
        server: &RedisServer,
        workers: &mut [Worker],
    ) -> Result<bool, String> {
        let victim = self.rng.usize(..workers.len());
        match fault {
            Fault::KillRestart => {
                server.kill();
                tokio::time::sleep(Duration::from_millis(self.rng.u64(0..100))).await;
                server.restart();
            }
            Fault::PauseServer => {
                let pause = self.ttl_times(0.5, 2.0);
                server.pause();
                tokio::time::sleep(pause).await;
                server.resume();
            }
            Fault::ClientPause | Fault::DebugSleep => {
                let pause = self.ttl_times(0.5, 2.0);
                let mut admin = server.raw_with_timeout(COMMAND_TIMEOUT + pause).await;
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
                    return Ok(false);
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
            Fault::SentinelSwitchOver | Fault::SentinelKill => {
                let Some(d) = &locks.sentinel else {
                    return Ok(false);
                };
                // Only with a replica in sync to promote; and a switch-over the sentinels
                // refuse or abort (one a pause set off is under way) is not injected.
                if d.try_wait_synced().is_err() {
                    return Ok(false);
                }
                if fault == Fault::SentinelSwitchOver {
                    if d.try_switch_over().is_err() {
                        return Ok(false);
                    }
                } else {
                    let old = d.master().map(RedisServer::port);
                    let failed_over = d.try_fail_over();
                    // Back as a replica (Sentinel turns the old master into one), or as the
                    // master again if no replica could take over.
                    if let Some(old) = d.servers.iter().find(|s| Some(s.port()) == old) {
                        old.restart();
                    }
                    if let Err(e) = failed_over {
                        eprintln!("soak: {fault:?}: {e}; the old master was restarted");
                    }
                }
            }
            Fault::ClusterSwitchOver | Fault::ClusterKill => {
                let Some(d) = &locks.cluster else {
                    return Ok(false);
                };
                // Only on a settled cluster (every master with a replica in sync).
                if d.try_wait_healthy(&[]).is_err() {
                    return Ok(false);
                }
                let masters = d.masters();
                let Some(master) = masters.get(self.rng.usize(..masters.len().max(1))) else {
                    return Ok(false);
                };
                let done = if fault == Fault::ClusterSwitchOver {
                    d.switch_over(master)
                } else {
                    d.kill_and_rejoin(master)
                };
                // The fault was dealt either way; a cluster that has not settled after it is
                // the next fault's starting point (and the checker's business).
                if let Err(e) = done {
                    eprintln!("soak: {fault:?}: {e}");
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
        Ok(true)
    }

    /// The fault most likely behind an event at `at_us` on `key`: the last one that reaches
    /// the key's deployment begun before it, if it was healed less than three leases before.
    fn cause(&self, at_us: u64, key: &str) -> Option<Fault> {
        let slack_us = 3 * u64::try_from(self.ttl.as_micros()).unwrap_or(u64::MAX);
        let deployment = Deployment::of_key(key)?;
        self.log
            .iter()
            .rev()
            .filter(|(fault, _, _)| fault.hits(deployment, self.server_faults_on))
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
         | ttl | {} ms |\n| deployments | {} |\n| wall time | {:.0} s |\n\
         | acquisitions | {} ({:.0}/s) |",
        command_line(config),
        config.workers,
        config.tasks,
        config.ttl.as_millis(),
        deployments(config),
        elapsed.as_secs_f64(),
        verdict.sections,
        verdict.sections as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    // Each signalled overlap, put down to the fault around its later grant.
    let mut overlaps_after: BTreeMap<Option<Fault>, u64> = BTreeMap::new();
    for overlap in &verdict.signalled_overlaps {
        let cause = nemesis.cause(overlap.later.grant_us, history.key(&overlap.later));
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
    if !config.quick {
        let names: Vec<&str> = config.on.iter().map(|d| d.name()).collect();
        let _ = write!(line, " --on {}", names.join(","));
    }
    if config.on.iter().any(|d| d.fails_over()) {
        let _ = write!(line, " --min-replicas {}", config.min_replicas);
    }
    let _ = write!(line, " --seed {}", config.seed);
    line
}

mod worker {
    //! One worker process: `--tasks` tasks lock, write through the fenced store and log.

    use super::*;

    struct Args {
        id: u64,
        /// The deployments' URLs, by the name their keys carry.
        urls: Vec<(&'static str, String)>,
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
            urls: Deployment::ALL
                .iter()
                .filter_map(|d| Some((d.name(), f.get(d.name())?.clone())))
                .collect(),
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
        /// A client per deployment, with the name its keys carry.
        clients: Vec<(&'static str, LockClient)>,
        store: redis::aio::MultiplexedConnection,
        script: redis::Script,
        acquired: AtomicU64,
        args: Args,
    }

    async fn run(args: Args) -> Result<(), String> {
        if args.urls.is_empty() {
            return Err("worker: no deployment given".into());
        }
        let mut clients = Vec::new();
        for (name, url) in &args.urls {
            clients.push((*name, connect(url, args.ttl).await?));
        }
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
            clients,
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
            let (on, client) = &shared.clients[rng.usize(..shared.clients.len())];
            let key = if rng.bool() {
                format!("soak:{on}:hot:{}", rng.u64(..HOT_KEYS))
            } else {
                format!("soak:{on}:cold:{}:{t}:{}", args.id, rng.u64(..4))
            };
            // The one server has no replica to wait for.
            let min_replicas = if *on == "single" {
                0
            } else {
                args.min_replicas
            };
            let attempt = client
                .lock(key.as_str())
                .ttl(args.ttl)
                .wait(args.ttl * 2)
                .min_replicas(min_replicas)
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
