//! The soak's command line, and the shape of a run it gives.

use std::path::PathBuf;
use std::time::Duration;

use super::deployment::Deployment;
use super::now_us;

/// The longest lease a release hands a waiter (the runtime's `HANDOFF_LEASE`): a stalled
/// waiter handed the lock blocks its key that long, or its ttl if shorter.
pub(super) const HANDOFF_LEASE: Duration = Duration::from_secs(2);

/// The command line: a run's shape, or (internal) one worker process of a run.
#[derive(Debug, clap::Parser)]
#[command(
    name = "soak",
    about = "Workers lock through a nemesis on every topology; the merged history is checked.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub(super) role: Option<Role>,
    #[command(flatten)]
    pub(super) run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
pub(super) enum Role {
    /// One worker process, started by a run.
    #[command(hide = true)]
    Worker(super::worker::WorkerArgs),
}

/// A run's shape; options left out take the mode's default (`--quick` or a full run).
#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
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
    /// Leader candidate processes, campaigning on every deployment while the nemesis kills,
    /// stops and partitions the leader [0: no leaders; at most 8].
    #[arg(long, default_value_t = 3)]
    candidates: u64,
}

/// How the run is shaped.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) workers: u64,
    pub(super) tasks: u64,
    pub(super) ttl: Duration,
    /// Total acquisitions to reach (0: run for `duration`).
    pub(super) acquisitions: u64,
    pub(super) duration: Duration,
    pub(super) fault_every: Duration,
    pub(super) seed: u64,
    pub(super) aof: bool,
    pub(super) on: Vec<Deployment>,
    pub(super) min_replicas: u64,
    pub(super) report: Option<PathBuf>,
    pub(super) quick: bool,
    /// Waiting-mix requests per waiting key and worker (0: no waiting mix).
    pub(super) waiters: u64,
    /// The waiting mix's ttl.
    pub(super) wait_ttl: Duration,
    /// Leader candidate processes (0: no leaders).
    pub(super) candidates: u64,
}

impl Config {
    /// The lease a release hands a waiter of the waiting mix.
    pub(super) fn handoff_lease(&self) -> Duration {
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
            candidates: args.candidates.min(8),
        }
    }
}
