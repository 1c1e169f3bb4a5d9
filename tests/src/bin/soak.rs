//! The soak run: worker processes take locks on a few keys while a nemesis breaks Redis, the
//! network and the workers themselves; then the merged history is checked
//! ([`rlock_tests::soak`]).
//!
//! ```text
//! cargo run -p rlock-tests --bin soak -- --quick                 # ≈ 1 minute, every fault
//! cargo run --release -p rlock-tests --bin soak -- --acquisitions 1000000 [--aof]
//!     [--workers 4] [--tasks 8] [--ttl-ms 500] [--seed N] [--fault-every-ms 1500]
//!     [--waiters 8] [--wait-ttl-ms 2000] [--report FILE]     (--help lists them all)
//! cargo run --release -p rlock-tests --bin soak -- --on single,sentinel,cluster
//!     [--min-replicas 1] …
//! ```
//!
//! Layout: one `redis-server` holds the locks (the one the nemesis attacks; `--aof` runs it
//! with `appendonly yes`, `appendfsync always`); a second one is the fenced store, a hash
//! that keeps the highest fence written per key and refuses lower ones. Each worker process
//! (this binary's hidden `worker` subcommand) reaches the lock server through its own [`FaultProxy`].
//! Its tasks lock a hot key (one of four, contended by everyone) or a cold one of their own,
//! write once through the store with the section's fence, and log each section.
//!
//! The **waiting mix** (`--waiters N` per key and worker, on by default; `0` turns it off)
//! adds, on each deployment, two keys that many requests wait for at once
//! (`soak:<name>:wait:<k>`, `fair` on the first), with a ttl of `--wait-ttl-ms` and a budget
//! of five ttl; one request in eight is cancelled while it waits (a timeout around
//! `acquire`). Their sections are checked like the others. Each worker reports how its waits
//! went per key, and a `MONITOR` connection per server counts every queued waiter's check
//! ins ([`rlock_tests::checkins`]); [`rlock_tests::waits`] judges starvation and the check-in
//! rate. The deck gains `StallWaiter`: a worker (whose waiters are queued) stopped for longer
//! than the waiting keys' hand-off lease.
//!
//! Every worker also measures its own timer lateness (a probe sleeping 5–10 ms, again and
//! again) and reports the worst per 100 ms: an overlap with no fault nearby whose earlier
//! holder's process ran about as late as it was told is put down to scheduling delay.
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
//! finish, a lock key left behind, a starved waiter, or check ins above their bound.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rlock_runtime::{LockClient, LockError, LockGuard};
use rlock_tests::RedisServer;
use rlock_tests::checkins::CheckInCounter;
use rlock_tests::deploy::{ClusterDeployment, SentinelDeployment};
use rlock_tests::proxy::FaultProxy;
use rlock_tests::soak::{self, Cause, History, Record, Release, Write};
use rlock_tests::waits::{self, Rules};

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
/// Keys of the waiting mix per deployment; the even ones are `fair`.
const WAIT_KEYS: u64 = 2;
/// A waiting-mix request's budget, in its ttl: generous next to its holds (5–50 ms, one in
/// 200 spanning renewals for ½–1 ttl), so that honest waits end in a grant.
const WAIT_BUDGET_TTLS: u32 = 5;
/// One waiting-mix request in this many is cancelled while it waits.
const CANCEL_ONE_IN: u64 = 8;
/// The longest lease a release hands a waiter (the runtime's `HANDOFF_LEASE`): a stalled
/// waiter handed the lock blocks its key that long, or its ttl if shorter.
const HANDOFF_LEASE: Duration = Duration::from_secs(2);
/// Bound of every command the harness sends itself (admin, store).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The command line: a run's shape, or (internal) one worker process of a run.
#[derive(Debug, clap::Parser)]
#[command(
    name = "soak",
    about = "Workers lock through a nemesis on every topology; the merged history is checked.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Role {
    /// One worker process, started by a run.
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

/// A run's shape; options left out take the mode's default (`--quick` or a full run).
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// CI's run: every fault of the nemesis at least once, on every topology, in about a
    /// minute.
    #[arg(long)]
    quick: bool,
    /// Stop after this many acquisitions (instead of after --duration-s).
    #[arg(long)]
    acquisitions: Option<u64>,
    /// How long to run [default: 45 with --quick, else 300].
    #[arg(long)]
    duration_s: Option<u64>,
    /// Worker processes [default: 3 with --quick, else 4; at most 32].
    #[arg(long)]
    workers: Option<u64>,
    /// Locking tasks per worker [default: 4 with --quick, else 8; at most 256].
    #[arg(long)]
    tasks: Option<u64>,
    /// The locks' ttl [50–60000].
    #[arg(long, default_value_t = 500)]
    ttl_ms: u64,
    /// The nemesis's and the workers' seed [default: the clock].
    #[arg(long)]
    seed: Option<u64>,
    /// A fault this often [default: 900 with --quick, else 1500; at least 100].
    #[arg(long)]
    fault_every_ms: Option<u64>,
    /// Redis with AOF, `appendfsync always`.
    #[arg(long)]
    aof: bool,
    /// The deployments [default: all with --quick, else single].
    #[arg(long, value_delimiter = ',', value_parser = Deployment::parse)]
    on: Vec<Deployment>,
    /// Replicas that must confirm each grant [at most 2].
    #[arg(long, default_value_t = 0)]
    min_replicas: u64,
    /// Where to write the report.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Waiting-mix requests per waiting key and worker [default: 6 with --quick, else 8; 0:
    /// no waiting mix; at most 64].
    #[arg(long)]
    waiters: Option<u64>,
    /// The waiting mix's ttl [50–60000].
    #[arg(long, default_value_t = 2000)]
    wait_ttl_ms: u64,
}

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let outcome = match cli.role {
        Some(Role::Worker(args)) => worker::main(args),
        None => orchestrate(Config::from(cli.run)),
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
    /// Waiting-mix requests per waiting key and worker (0: no waiting mix).
    waiters: u64,
    /// The waiting mix's ttl.
    wait_ttl: Duration,
}

impl Config {
    /// The lease a release hands a waiter of the waiting mix.
    fn handoff_lease(&self) -> Duration {
        self.wait_ttl.min(HANDOFF_LEASE)
    }
}

impl From<RunArgs> for Config {
    fn from(args: RunArgs) -> Config {
        let quick = args.quick;
        let on = match args.on {
            on if !on.is_empty() => on,
            _ if quick => Deployment::ALL.to_vec(),
            _ => vec![Deployment::Single],
        };
        let by_mode = |given: Option<u64>, quick_default: u64, full_default: u64| {
            given.unwrap_or(if quick { quick_default } else { full_default })
        };
        Config {
            workers: by_mode(args.workers, 3, 4).clamp(1, 32),
            tasks: by_mode(args.tasks, 4, 8).clamp(1, 256),
            ttl: Duration::from_millis(args.ttl_ms.clamp(50, 60_000)),
            acquisitions: args.acquisitions.unwrap_or(0),
            duration: Duration::from_secs(by_mode(args.duration_s, 45, 300)),
            fault_every: Duration::from_millis(by_mode(args.fault_every_ms, 900, 1500).max(100)),
            seed: args.seed.unwrap_or_else(now_us),
            aof: args.aof,
            on,
            min_replicas: args.min_replicas.min(2),
            report: args.report,
            quick,
            waiters: by_mode(args.waiters, 6, 8).min(64),
            wait_ttl: Duration::from_millis(args.wait_ttl_ms.clamp(50, 60_000)),
        }
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
            .ok_or_else(|| format!("takes single, sentinel or cluster, not {name:?}"))
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
    /// SIGSTOP of one worker process, whose waiters are queued, for the waiting keys'
    /// hand-off lease plus 0.5–1.5 s (a stalled waiter, handed locks it cannot take).
    StallWaiter,
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
            Fault::PauseHolder | Fault::StallWaiter => true,
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

    // Every server, from the start: a master now may be a replica later, and the other way.
    let check_ins = CheckInCounter::start(&locks.ports());
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
            .arg("worker")
            .args(["--id", &w.to_string()])
            .args(&urls)
            .args(["--min-replicas", &config.min_replicas.to_string()])
            .args(["--store", &store.url()])
            .args(["--history", &history.to_string_lossy()])
            .args(["--tasks", &config.tasks.to_string()])
            .args(["--ttl-ms", &config.ttl.as_millis().to_string()])
            .args(["--waiters", &config.waiters.to_string()])
            .args(["--wait-ttl-ms", &config.wait_ttl.as_millis().to_string()])
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
        "soak: {} workers × {} tasks (and {} waiters per waiting key), ttl {:?}, {}, seed {}, \
         on {}",
        config.workers,
        config.tasks,
        config.waiters,
        config.ttl,
        if config.acquisitions > 0 {
            format!("{} acquisitions", config.acquisitions)
        } else {
            format!("{:?}", config.duration)
        },
        config.seed,
        deployments(&config),
    );

    let mut faults = locks.faults(&config.on);
    if config.waiters > 0 {
        faults.push(Fault::StallWaiter);
    }
    let mut nemesis = Nemesis {
        rng: fastrand::Rng::with_seed(config.seed),
        deck: Vec::new(),
        faults,
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
        handoff_lease: config.handoff_lease(),
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
    let longest_lease = config.ttl.max(config.wait_ttl).max(Duration::from_secs(2));
    std::thread::sleep(longest_lease + Duration::from_secs(3));
    let check_ins = check_ins.finish();
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
    let (check_ins, unattributed) = waits::attribute(&history, &check_ins);
    let waiting = waits::judge(
        &history,
        Rules::for_run(config.workers * config.waiters),
        &check_ins,
        |key, from_us, to_us| {
            let key = history.keys.get(key as usize).map_or("", String::as_str);
            nemesis.faults_during(key, from_us, to_us)
        },
    );
    problems.extend(waiting.violations(&history));
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
    report.push_str(&waiting_report(
        &config,
        &history,
        &waiting,
        &check_ins,
        unattributed,
    ));
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
        // The faults beside the histories, to read them against: kind, began, healed (µs).
        let faults: String = nemesis
            .log
            .iter()
            .map(|(fault, began, healed)| format!("{fault:?} {began} {healed}\n"))
            .collect();
        let _ = std::fs::write(dir.join("faults.log"), faults);
        Err(format!(
            "failed (histories and faults.log kept in {}):\n  {}",
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

    /// The ports of every server, masters and replicas.
    fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.single.iter().map(RedisServer::port).collect();
        ports.extend(
            self.sentinel
                .iter()
                .flat_map(|d| d.servers.iter().map(RedisServer::port)),
        );
        ports.extend(
            self.cluster
                .iter()
                .flat_map(|d| d.nodes.iter().map(RedisServer::port)),
        );
        ports
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
    /// The lease a release hands a waiter of the waiting mix.
    handoff_lease: Duration,
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
            Fault::PauseHolder | Fault::StallWaiter => {
                let pause = if fault == Fault::PauseHolder {
                    self.ttl_times(1.5, 3.0)
                } else {
                    self.handoff_lease + Duration::from_millis(self.rng.u64(500..=1500))
                };
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

    /// How many faults that reach `key`'s deployment were under way in `from_us..=to_us`,
    /// or healed less than a second before it (a feed reconnects within a second).
    fn faults_during(&self, key: &str, from_us: u64, to_us: u64) -> u64 {
        let Some(deployment) = Deployment::of_key(key) else {
            return 0;
        };
        self.log
            .iter()
            .filter(|(fault, began, healed)| {
                fault.hits(deployment, self.server_faults_on)
                    && *began <= to_us
                    && healed.saturating_add(1_000_000) >= from_us
            })
            .count() as u64
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
         | ttl | {} ms (waiting mix: {} ms, {} waiters per key and worker) |\n\
         | deployments | {} |\n| wall time | {:.0} s |\n\
         | acquisitions | {} ({:.0}/s) |",
        command_line(config),
        config.workers,
        config.tasks,
        config.ttl.as_millis(),
        config.wait_ttl.as_millis(),
        config.waiters,
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
    // Overlaps by cause: a fault nearby, else the holder's process running late, else none.
    let mut by_cause: BTreeMap<Cause, (u64, u64)> = [Cause::Fault, Cause::SchedulingDelay]
        .into_iter()
        .map(|c| (c, (0, 0)))
        .collect();
    by_cause.insert(Cause::Unexplained, (0, 0));
    for (overlaps, silent) in [
        (&verdict.signalled_overlaps, false),
        (&verdict.silent_overlaps, true),
    ] {
        for overlap in overlaps {
            let nearby = nemesis
                .cause(overlap.later.grant_us, history.key(&overlap.later))
                .is_some();
            let counts = by_cause
                .entry(soak::classify(history, overlap, nearby))
                .or_default();
            if silent {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
    }
    let _ = writeln!(
        o,
        "\n| overlaps by cause | holder told late | holder never told |\n|---|---:|---:|"
    );
    for (cause, (told, never)) in &by_cause {
        let _ = writeln!(o, "| {} | {told} | {never} |", cause.describe());
    }
    let _ = writeln!(
        o,
        "\nTimer lateness of the workers (worst per 100 ms, reported from 1 ms), per worker: \
         windows ≥ 10 ms / ≥ 100 ms, worst: {}",
        lateness_summary(config, history)
    );
    let _ = writeln!(o, "\n| error (`LockError`) | count |\n|---|---:|");
    for (variant, n) in &history.errors {
        let _ = writeln!(o, "| {variant} | {n} |");
    }
    o
}

/// Per worker: its windows at least 10 ms and 100 ms late, and its worst lateness.
fn lateness_summary(config: &Config, history: &History) -> String {
    let per_worker: Vec<String> = (0..config.workers)
        .map(|w| {
            let late: Vec<u64> = history
                .lateness
                .iter()
                .filter(|l| u64::from(l.worker) == w)
                .map(|l| l.late_us)
                .collect();
            let at_least = |us: u64| late.iter().filter(|&&l| l >= us).count();
            format!(
                "{w}: {} / {} / {:.1} ms",
                at_least(10_000),
                at_least(100_000),
                late.iter().max().copied().unwrap_or(0) as f64 / 1000.0
            )
        })
        .collect();
    per_worker.join("; ")
}

/// Whether a waiting-mix key (`soak:<name>:wait:<k>`) is waited for `fair`ly: even `k`.
fn fair_key(key: &str) -> bool {
    key.rsplit(':')
        .next()
        .and_then(|k| k.parse::<u64>().ok())
        .is_some_and(|k| k.is_multiple_of(2))
}

/// The waiting mix: per waiting client and key, then the rules' verdicts.
fn waiting_report(
    config: &Config,
    history: &History,
    waiting: &waits::Verdict,
    check_ins: &BTreeMap<(u32, u32), u64>,
    unattributed: u64,
) -> String {
    let mut o = String::new();
    if config.waiters == 0 {
        return o;
    }
    let _ = writeln!(
        o,
        "\n| waiting client | key | fair | requests | grants | gave up (`Busy`) | cancelled | \
         other errors | waiting (s) | check ins | per s per waiting request |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut total = waits::Row {
        worker: 0,
        key: 0,
        waits: soak::Waits::default(),
        checkins: 0,
    };
    for row in &waiting.rows {
        let key = history
            .keys
            .get(row.key as usize)
            .map_or("", String::as_str);
        let w = &row.waits;
        let _ = writeln!(
            o,
            "| {} | `{key}` | {} | {} | {} | {} | {} | {} | {:.0} | {} | {:.2} |",
            row.worker,
            if fair_key(key) { "yes" } else { "no" },
            w.requests,
            w.grants,
            w.busy,
            w.cancelled,
            w.errors,
            w.waited_us as f64 / 1e6,
            row.checkins,
            row.rate()
        );
        total.waits.requests += w.requests;
        total.waits.grants += w.grants;
        total.waits.busy += w.busy;
        total.waits.cancelled += w.cancelled;
        total.waits.errors += w.errors;
        total.waits.waited_us += w.waited_us;
        total.checkins += row.checkins;
    }
    let t = &total.waits;
    let _ = writeln!(
        o,
        "| all | | | {} | {} | {} | {} | {} | {:.0} | {} | {:.2} |",
        t.requests,
        t.grants,
        t.busy,
        t.cancelled,
        t.errors,
        t.waited_us as f64 / 1e6,
        total.checkins,
        total.rate()
    );
    let elsewhere: u64 = check_ins
        .iter()
        .filter(|((w, k), _)| !history.waits.contains_key(&(*w, *k)))
        .map(|(_, n)| n)
        .sum();
    let rules = waiting.rules.unwrap_or_else(|| Rules::for_run(0));
    let highest = waiting
        .rows
        .iter()
        .filter(|r| r.waits.waited_us as f64 / 1e6 >= rules.min_waiting_s)
        .map(waits::Row::rate)
        .fold(0.0, f64::max);
    let _ = writeln!(
        o,
        "\nCheck ins seen by Redis (a queued waiter's `LPOS`): {} on the waiting keys, {elsewhere} \
         on other keys (the hot keys' waiters), {unattributed} not attributable.\n\
         Check-in rate: highest {highest:.2}/s per waiting request (bound {}/s, judged from {} s \
         of waiting); over the bound: {}.\n\
         Starvation (no grant all run while the others got a round; or `Busy` after more than \
         (1 + faults) × ({} waiters + busiest grants in {} ms) grants to others): {}; \
         `Busy` waits not judged, their process having stalled ≥ {} ms: {}.",
        total.checkins,
        rules.max_checkins_per_s,
        rules.min_waiting_s,
        waiting.too_fast.len(),
        rules.waiters_per_key,
        rules.check_interval_us / 1000,
        waiting.starved.len(),
        rules.stall_us / 1000,
        waiting.stalled_waits,
    );
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
    if !config.quick {
        let _ = write!(line, " --waiters {}", config.waiters);
    }
    let _ = write!(line, " --seed {}", config.seed);
    line
}

mod worker {
    //! One worker process: `--tasks` tasks lock, write through the fenced store and log; the
    //! waiting mix's tasks wait for its keys; a probe measures the process's timer lateness.

    use super::*;
    use std::sync::OnceLock;

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
        /// Waiting-mix tasks per waiting key.
        waiters: u64,
        wait_ttl: Duration,
    }

    /// A worker's command line, as a run writes it.
    #[derive(Debug, clap::Args)]
    pub(super) struct WorkerArgs {
        #[arg(long)]
        id: u64,
        /// The deployments' URLs, each under the name its keys carry.
        #[arg(long)]
        single: Option<String>,
        #[arg(long)]
        sentinel: Option<String>,
        #[arg(long)]
        cluster: Option<String>,
        #[arg(long)]
        store: String,
        #[arg(long)]
        history: PathBuf,
        #[arg(long, default_value_t = 4)]
        tasks: u64,
        #[arg(long, default_value_t = 500)]
        ttl_ms: u64,
        #[arg(long, default_value_t = 0)]
        acquisitions: u64,
        #[arg(long, default_value_t = 0)]
        until_us: u64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long, default_value_t = 0)]
        min_replicas: u32,
        #[arg(long, default_value_t = 0)]
        waiters: u64,
        #[arg(long, default_value_t = 2000)]
        wait_ttl_ms: u64,
    }

    pub(super) fn main(given: WorkerArgs) -> Result<(), String> {
        let urls = [
            (Deployment::Single, given.single),
            (Deployment::Sentinel, given.sentinel),
            (Deployment::Cluster, given.cluster),
        ];
        let args = Args {
            id: given.id,
            urls: urls
                .into_iter()
                .filter_map(|(d, url)| Some((d.name(), url?)))
                .collect(),
            store: given.store,
            history: given.history,
            tasks: given.tasks,
            ttl: Duration::from_millis(given.ttl_ms),
            acquisitions: given.acquisitions,
            until_us: given.until_us,
            seed: given.seed,
            min_replicas: given.min_replicas,
            waiters: given.waiters,
            wait_ttl: Duration::from_millis(given.wait_ttl_ms),
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
        /// Each client's id, as its owner tokens carry it (`<id>:<n>`), once a grant shows it.
        client_ids: Vec<OnceLock<String>>,
        store: redis::aio::MultiplexedConnection,
        script: redis::Script,
        acquired: AtomicU64,
        /// Set once the run is over ([`done`], looked at by the lateness probe every 5–10 ms).
        over: tokio::sync::watch::Sender<bool>,
        args: Args,
    }

    /// What a task hands back: its lines, and its failures by `LockError` variant.
    type Output = (String, BTreeMap<&'static str, u64>);

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
            client_ids: clients.iter().map(|_| OnceLock::new()).collect(),
            clients,
            store,
            script: redis::Script::new(STORE_SCRIPT),
            acquired: AtomicU64::new(0),
            over: tokio::sync::watch::Sender::new(false),
            args,
        });
        let probe = tokio::spawn(lateness_probe(shared.clone()));
        let mut tasks: Vec<_> = (0..shared.args.tasks)
            .map(|t| tokio::spawn(task(shared.clone(), t)))
            .collect();
        for c in 0..shared.clients.len() {
            for k in 0..WAIT_KEYS {
                for n in 0..shared.args.waiters {
                    tasks.push(tokio::spawn(waiting_task(shared.clone(), c, k, n)));
                }
            }
        }
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
        match probe.await {
            Ok(lines) => out.push_str(&lines),
            Err(e) => {
                let _ = writeln!(out, "P {e}");
            }
        }
        for ((name, _), id) in shared.clients.iter().zip(&shared.client_ids) {
            if let Some(id) = id.get() {
                let _ = writeln!(out, "C {name} {id}");
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

    /// Resolves once the run is over, to cut the waits still going.
    async fn run_over(shared: &Shared) {
        let mut over = shared.over.subscribe();
        let _ = over.wait_for(|&over| over).await;
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

    /// Sleeps 5–10 ms again and again until the run is over, and reports the worst lateness
    /// of each 100 ms window (from 1 ms) as `T` lines, stamped with the history's clock.
    async fn lateness_probe(shared: Arc<Shared>) -> String {
        let mut rng = fastrand::Rng::with_seed(shared.args.seed ^ 0x1a7e);
        let mut out = String::new();
        let mut worst: Option<soak::Lateness> = None;
        let report = |worst: Option<soak::Lateness>, out: &mut String| {
            if let Some(l) = worst.filter(|l| l.late_us >= soak::LATENESS_REPORTED_US) {
                out.push_str(&l.line());
                out.push('\n');
            }
        };
        while !done(&shared) {
            let sleep = Duration::from_micros(rng.u64(5_000..=soak::PROBE_SLEEP_MAX_US));
            let due = tokio::time::Instant::now() + sleep;
            tokio::time::sleep_until(due).await;
            let late_us = u64::try_from(
                tokio::time::Instant::now()
                    .saturating_duration_since(due)
                    .as_micros(),
            )
            .unwrap_or(u64::MAX);
            let sample = soak::Lateness {
                worker: 0,
                woke_us: now_us(),
                late_us,
            };
            let window = sample.woke_us / soak::LATENESS_WINDOW_US;
            match worst {
                Some(w) if w.woke_us / soak::LATENESS_WINDOW_US == window => {
                    if late_us > w.late_us {
                        worst = Some(sample);
                    }
                }
                _ => {
                    report(worst, &mut out);
                    worst = Some(sample);
                }
            }
        }
        report(worst, &mut out);
        shared.over.send_replace(true);
        out
    }

    /// Runs one critical section under `guard`: holds it `hold_ms`, writing once through the
    /// store at a random moment of it, then releases it. Returns its line.
    async fn section(
        shared: &Shared,
        client: usize,
        key: &str,
        guard: LockGuard,
        hold_ms: u64,
        rng: &mut fastrand::Rng,
        errors: &mut BTreeMap<&'static str, u64>,
    ) -> String {
        shared.acquired.fetch_add(1, Ordering::Relaxed);
        let grant_us = now_us();
        if let Some((id, _)) = guard.token().split_once(':') {
            let _ = shared.client_ids[client].set(id.to_owned());
        }
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
                .arg(key)
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
        record.line(key) + "\n"
    }

    async fn task(shared: Arc<Shared>, t: u64) -> Output {
        let args = &shared.args;
        let mut rng = fastrand::Rng::with_seed(args.seed ^ (t << 32));
        let mut out = String::new();
        let mut errors = BTreeMap::new();
        let ttl_ms = u64::try_from(args.ttl.as_millis()).unwrap_or(u64::MAX);
        while !done(&shared) {
            let c = rng.usize(..shared.clients.len());
            let (on, client) = &shared.clients[c];
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
            // Mostly short sections; one in 400 spans renewals (and so the faults).
            let hold_ms = if rng.u64(..400) == 0 {
                rng.u64(ttl_ms / 2..=ttl_ms * 3)
            } else {
                rng.u64(0..=1)
            };
            let line = section(&shared, c, &key, guard, hold_ms, &mut rng, &mut errors).await;
            out.push_str(&line);
        }
        (out, errors)
    }

    /// How one waiting-mix request ended, besides a grant.
    enum Ended {
        Granted(LockGuard),
        Failed(LockError),
        /// Our timeout around `acquire`, or the end of the run.
        Cancelled,
    }

    /// One of the `--waiters` tasks waiting for waiting key `k` of client `c`: requests with
    /// a budget of [`WAIT_BUDGET_TTLS`] ttl, one in [`CANCEL_ONE_IN`] cancelled before it;
    /// holds of 5–50 ms, one in 200 of ½–1 ttl (across renewals); up to 20 ms between.
    async fn waiting_task(shared: Arc<Shared>, c: usize, k: u64, n: u64) -> Output {
        let args = &shared.args;
        let mut rng = fastrand::Rng::with_seed(
            args.seed ^ 0x3a17 ^ ((c as u64) << 48) ^ (k << 40) ^ (n << 32),
        );
        let (on, client) = &shared.clients[c];
        let key = format!("soak:{on}:wait:{k}");
        let min_replicas = if *on == "single" {
            0
        } else {
            args.min_replicas
        };
        let budget = args.wait_ttl * WAIT_BUDGET_TTLS;
        let wait_ttl_ms = u64::try_from(args.wait_ttl.as_millis()).unwrap_or(u64::MAX);
        let budget_ms = wait_ttl_ms * u64::from(WAIT_BUDGET_TTLS);
        let mut out = String::new();
        let mut errors = BTreeMap::new();
        let mut waits = soak::Waits::default();
        while !done(&shared) {
            let cancel_after = (rng.u64(..CANCEL_ONE_IN) == 0)
                .then(|| Duration::from_millis(rng.u64(50..=budget_ms / 2)));
            let mut request = client
                .lock(key.as_str())
                .ttl(args.wait_ttl)
                .wait(budget)
                .min_replicas(min_replicas)
                .fenced();
            if k.is_multiple_of(2) {
                request = request.fair();
            }
            let start_us = now_us();
            let started = Instant::now();
            let ended = tokio::select! {
                result = async {
                    match cancel_after {
                        Some(after) => tokio::time::timeout(after, request.acquire()).await.ok(),
                        None => Some(request.acquire().await),
                    }
                } => match result {
                    Some(Ok(guard)) => Ended::Granted(guard),
                    Some(Err(e)) => Ended::Failed(e),
                    None => Ended::Cancelled,
                },
                () = run_over(&shared) => Ended::Cancelled,
            };
            waits.requests += 1;
            waits.waited_us += u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            match ended {
                Ended::Granted(guard) => {
                    waits.grants += 1;
                    let hold_ms = if rng.u64(..200) == 0 {
                        rng.u64(wait_ttl_ms / 2..=wait_ttl_ms)
                    } else {
                        rng.u64(5..=50)
                    };
                    let line =
                        section(&shared, c, &key, guard, hold_ms, &mut rng, &mut errors).await;
                    out.push_str(&line);
                }
                Ended::Failed(e) => {
                    *errors.entry(variant(&e)).or_default() += 1;
                    if e.is_busy() {
                        waits.busy += 1;
                        let gave_up = soak::GaveUp {
                            worker: 0,
                            key: 0,
                            start_us,
                            end_us: now_us(),
                        };
                        out.push_str(&(gave_up.line(&key) + "\n"));
                    } else {
                        waits.errors += 1;
                    }
                }
                Ended::Cancelled => waits.cancelled += 1,
            }
            tokio::time::sleep(Duration::from_millis(rng.u64(0..=20))).await;
        }
        out.push_str(&(waits.line(&key) + "\n"));
        (out, errors)
    }
}
