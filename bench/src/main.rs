//! The benchmark: rlock against the raw-Redis floor and the peer crates, in one run, on one
//! server; then rlock on a Redis Cluster and over several Redlock masters.
//!
//! ```text
//! cargo run --release -p rlock-bench                 # full, writes BENCHMARKS.md
//! cargo run --release -p rlock-bench -- --quick      # CI smoke run, < 1.5 min
//! cargo run --release -p rlock-bench -- --redis redis://127.0.0.1:6379/ --out /tmp/b.md
//! ```
//!
//! Without `--redis` it starts its own `redis-server` on a free loopback port. Workload (e)
//! always starts its own servers: a Redis Cluster (which needs `redis-cli`) and five
//! independent masters. Workload (f) measures semaphores. The last line printed is
//! `bench: uncontended=R distinct=R contended_throughput=R contended_p99_gain=R
//! macro_overhead=R fair_p99_vs_limit=R handoff_cmds_16_clients=N cluster_distinct=R
//! redlock3_p50=R permit_vs_floor=R semaphore_p99_vs_limit=R semaphore_cmds_16_vs_4=R` (`-`
//! for a ratio of (e) or (f) when it did not run). See BENCHMARKS.md for what each workload does.

mod beyond;
mod charts;
mod lockers;
mod read_write;
mod report;
mod scale;
mod semaphores;
mod stats;
mod workloads;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockers::{ClusterLockers, Kind, Lockers};
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::deploy::ClusterDeployment;
use workloads::{Batch, Contended, Contender, REDLOCK_MASTERS, Watchdog};

pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// The workloads, in run order.
const PHASES: &str = "abcdefgh";
/// (f)'s weighted run: what every fourth task takes at once.
const SEM_HEAVY: u32 = 3;

/// Iteration counts of one mode.
#[derive(Debug, Clone)]
pub struct Config {
    pub quick: bool,
    /// (a): rounds, bursts per round (the implementations take turns), cycles per round per
    /// implementation (redlock: `seq_redlock`).
    pub seq_rounds: usize,
    pub seq_bursts: usize,
    pub seq_n: u64,
    pub seq_redlock: u64,
    /// (b): rounds, bursts per round (the implementations take turns), tasks, cycles per
    /// task per round (redlock: `distinct_redlock`).
    pub distinct_rounds: usize,
    pub distinct_bursts: usize,
    pub distinct_tasks: usize,
    pub distinct_per_task: u64,
    pub distinct_redlock: u64,
    /// (b) throughput against tasks: the numbers of tasks, and the cycles each run does in
    /// all (shared by its tasks).
    pub sweep_tasks: [usize; 5],
    pub sweep_cycles: u64,
    /// (c): tasks, clients, acquisitions per task, holds.
    pub tasks: usize,
    pub clients: usize,
    pub per_task: u64,
    pub holds: [Duration; 2],
    /// (d): locks held, their lease, the measured window.
    pub wd_locks: usize,
    pub wd_ttl: Duration,
    pub wd_window: Duration,
    /// (d) at scale: the numbers of holds one client keeps (one run each, the last the
    /// largest), their lease, and the window of the largest in leases (the others': one).
    pub scale_holds: Vec<usize>,
    pub scale_ttl: Duration,
    pub scale_leases: u32,
    /// (e) cluster: rounds, tasks, cycles per task per implementation.
    pub cluster_rounds: usize,
    pub cluster_tasks: usize,
    pub cluster_per_task: u64,
    /// (e) Redlock: rounds, acquisitions per round per topology.
    pub redlock_rounds: usize,
    pub redlock_n: u64,
    /// (f) uncontended permits: rounds, cycles per round per way (they take turns).
    pub sem_rounds: usize,
    pub sem_n: u64,
    /// (f) the contended semaphore: tasks, the numbers of clients it runs with (one run
    /// each), permits, acquisitions per task, hold.
    pub sem_tasks: usize,
    pub sem_clients: [usize; 2],
    pub sem_permits: u32,
    pub sem_per_task: u64,
    pub sem_hold: Duration,
    /// (g) uncontended reads and writes: rounds, cycles per round per way (they take turns).
    pub rw_rounds: usize,
    pub rw_n: u64,
    /// (g) readers admitted together: readers, their clients, rounds.
    pub rw_readers: usize,
    pub rw_clients: usize,
    pub rw_admissions: usize,
}

impl Config {
    fn full() -> Self {
        Self {
            quick: false,
            seq_rounds: 12,
            seq_bursts: 3,
            seq_n: 1500,
            seq_redlock: 300,
            distinct_rounds: 12,
            distinct_bursts: 4,
            distinct_tasks: 64,
            distinct_per_task: 600,
            distinct_redlock: 15,
            sweep_tasks: [1, 4, 16, 64, 256],
            sweep_cycles: 6_400,
            tasks: 16,
            clients: 4,
            per_task: 25,
            holds: [Duration::from_millis(1), Duration::from_millis(5)],
            wd_locks: 10_000,
            wd_ttl: Duration::from_secs(5),
            wd_window: Duration::from_secs(20),
            scale_holds: vec![10_000, 100_000, 1_000_000],
            scale_ttl: Duration::from_secs(30),
            scale_leases: 3,
            cluster_rounds: 12,
            cluster_tasks: 64,
            cluster_per_task: 150,
            redlock_rounds: 10,
            redlock_n: 500,
            sem_rounds: 8,
            sem_n: 1000,
            sem_tasks: 64,
            sem_clients: [4, 16],
            sem_permits: 8,
            sem_per_task: 25,
            sem_hold: Duration::from_millis(5),
            rw_rounds: 6,
            rw_n: 500,
            rw_readers: 16,
            rw_clients: 4,
            rw_admissions: 10,
        }
    }

    fn quick() -> Self {
        Self {
            quick: true,
            seq_rounds: 1,
            seq_bursts: 2,
            seq_n: 200,
            seq_redlock: 40,
            distinct_rounds: 1,
            distinct_bursts: 1,
            distinct_tasks: 64,
            distinct_per_task: 8,
            distinct_redlock: 2,
            sweep_tasks: [1, 4, 16, 64, 256],
            sweep_cycles: 512,
            tasks: 16,
            clients: 4,
            per_task: 2,
            holds: [Duration::from_millis(1), Duration::from_millis(5)],
            wd_locks: 1_000,
            wd_ttl: Duration::from_secs(1),
            wd_window: Duration::from_secs(2),
            scale_holds: vec![2_000, 20_000],
            scale_ttl: Duration::from_secs(2),
            scale_leases: 2,
            cluster_rounds: 2,
            cluster_tasks: 64,
            cluster_per_task: 20,
            redlock_rounds: 3,
            redlock_n: 300,
            sem_rounds: 1,
            sem_n: 100,
            sem_tasks: 64,
            sem_clients: [4, 16],
            sem_permits: 8,
            sem_per_task: 2,
            sem_hold: Duration::from_millis(5),
            rw_rounds: 1,
            rw_n: 50,
            rw_readers: 16,
            rw_clients: 4,
            rw_admissions: 2,
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Default)]
pub struct Results {
    /// (a) per implementation: one batch per round.
    pub sequential: HashMap<&'static str, Vec<Batch>>,
    /// (b) per implementation: one batch per round.
    pub distinct: HashMap<&'static str, Vec<Batch>>,
    /// (c) in run order: contender, hold, result.
    pub contended: Vec<(Contender, Duration, Contended)>,
    /// (d) rlock, then rslock.
    pub watchdog: Vec<(Kind, Watchdog)>,
    /// (b) against tasks: ops/s of each implementation at each number of tasks.
    pub sweep: Vec<(Kind, usize, f64)>,
    /// (g) what each way's cycles cost, measured apart.
    pub read_write_cost: Vec<read_write::Cost>,
    /// (d) at scale: one run per number of holds, fewest first.
    pub scale: Vec<scale::Scale>,
    /// (e) on the cluster, per implementation (floor, rlock): one batch per round.
    pub cluster: HashMap<&'static str, Vec<Batch>>,
    /// (e) acquire latencies per number of masters (see [`REDLOCK_MASTERS`]): one batch per
    /// round.
    pub redlock: HashMap<usize, Vec<Batch>>,
    /// (e) the raw fan-out to as many masters (`SET NX PX` to all at once), per round.
    pub fanout: HashMap<usize, Vec<Batch>>,
    /// (f) uncontended permits per way: one rate per round.
    pub permits: HashMap<&'static str, Vec<f64>>,
    /// (f) the contended semaphore, one run per number of clients.
    pub semaphore: Vec<semaphores::Contended>,
    /// (g) uncontended reads and writes per way: one rate per round.
    pub read_write: HashMap<&'static str, Vec<f64>>,
    /// (g) readers admitted by a writer's release.
    pub admission: Option<read_write::Admission>,
    /// (h) once-only work and the idempotency layer.
    pub beyond: Option<beyond::Beyond>,
}

/// The benchmark's command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "bench",
    about = "rlock side by side with the same commands by hand and the peer crates.",
    after_help = "Full mode writes BENCHMARKS.md at the repository root unless --out is given; \
                  --quick, --only, --kinds and --rounds write a report only with --out."
)]
struct Args {
    /// Small counts, for CI (under a minute and a half).
    #[arg(long)]
    quick: bool,
    /// Workloads to run, among `abcdefgh`.
    #[arg(long, default_value = PHASES, value_parser = phases)]
    only: String,
    /// The implementations that (a) and (b) run, among
    /// floor,scripts-by-hand,manual,macro,rslock,redlock.
    #[arg(long, value_delimiter = ',', value_parser = kind, default_values = Kind::ALL.map(Kind::flag))]
    kinds: Vec<Kind>,
    /// Rounds of (a) and (b), instead of the mode's.
    #[arg(long)]
    rounds: Option<usize>,
    /// A Redis to measure on, instead of a redis-server started here.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Where to write the report.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The most holds (d) keeps in one client, instead of the mode's (1,000,000 in a full
    /// run); the smaller runs are a tenth and a hundredth of it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    holds: Option<u64>,
}

/// `--only`'s value: letters among [`PHASES`].
fn phases(only: &str) -> Result<String, String> {
    if only.is_empty() || !only.chars().all(|c| PHASES.contains(c)) {
        return Err(format!("takes letters among `{PHASES}`"));
    }
    Ok(only.to_owned())
}

/// One of `--kinds`' names.
fn kind(name: &str) -> Result<Kind, String> {
    Kind::named(name).ok_or_else(|| {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.flag()).collect();
        format!("unknown `{name}`; expected some of {}", known.join(","))
    })
}

impl Args {
    /// The arguments as given, the URL left out (it may carry a password).
    fn as_given(&self) -> Vec<String> {
        let mut given = Vec::new();
        if self.quick {
            given.push("--quick".to_owned());
        }
        if self.only != PHASES {
            given.push(format!("--only {}", self.only));
        }
        if self.kinds != Kind::ALL {
            let names: Vec<&str> = self.kinds.iter().map(|k| k.flag()).collect();
            given.push(format!("--kinds {}", names.join(",")));
        }
        if let Some(rounds) = self.rounds {
            given.push(format!("--rounds {rounds}"));
        }
        if self.redis.is_some() {
            given.push("--redis URL".to_owned());
        }
        if let Some(path) = &self.out {
            given.push(format!("--out {}", path.display()));
        }
        if let Some(holds) = self.holds {
            given.push(format!("--holds {holds}"));
        }
        given
    }
}

/// The implementations (or topologies) in the order of round `round`: each round starts one
/// further, so that none always runs right after the same neighbour (whose keys Redis may
/// still be expiring).
fn rotated<T: Clone>(items: &[T], round: usize) -> Vec<T> {
    let mut items = items.to_vec();
    let n = items.len().max(1);
    items.rotate_left(round % n);
    items
}

/// `rounds` rounds of each of `kinds`, one batch per implementation and round. Within a round
/// the implementations take turns in `bursts` bursts of `cycles(kind) / bursts` cycles each
/// (run by `batch`), added up into the round's batch, so that the machine's slow and fast
/// spells (a few hundred ms here) fall on all of them alike.
async fn in_bursts(
    probe: &mut stats::Probe,
    kinds: &[Kind],
    rounds: usize,
    bursts: usize,
    cycles: impl Fn(Kind) -> u64,
    batch: impl AsyncFn(Kind, u64) -> Result<Batch, BenchError>,
) -> Result<HashMap<&'static str, Vec<Batch>>, BenchError> {
    let mut all: HashMap<&'static str, Vec<Batch>> = HashMap::new();
    for round in 0..rounds {
        let mut this_round: HashMap<&'static str, Batch> = HashMap::new();
        for burst in 0..bursts {
            for kind in rotated(kinds, round + burst) {
                let n = (cycles(kind) / bursts as u64).max(1);
                let measured = workloads::measured(probe, batch(kind, n)).await?;
                this_round.entry(kind.label()).or_default().absorb(measured);
            }
        }
        for (label, batch) in this_round {
            all.entry(label).or_default().push(batch);
        }
    }
    Ok(all)
}

/// (e) rlock on a Redis Cluster against the floor there, then the acquire latency of one
/// node against Redlock over 3 and 5 masters. Starts (and stops) its own servers.
async fn beyond_one_redis(config: &Config, results: &mut Results) -> Result<(), BenchError> {
    eprintln!(
        "bench: (e) Redis Cluster, {} tasks on distinct keys",
        config.cluster_tasks
    );
    let cluster = workloads::start("a Redis Cluster", ClusterDeployment::start).await?;
    let seeds: Vec<String> = cluster.masters().iter().map(|m| m.url()).collect();
    let on_cluster = ClusterLockers::connect(&cluster.url(), &seeds).await?;
    let kinds = [Kind::Floor, Kind::FloorByNode, Kind::Manual];
    // Every node's CPU, replicas' too: on one host they share the cores with the client.
    let mut probes = Vec::new();
    for node in &cluster.nodes {
        probes.push(stats::Probe::connect(&node.url()).await?);
    }
    // Warm-up: every node's connection open, scripts cached.
    for kind in kinds {
        workloads::concurrent(&on_cluster, kind, config.cluster_tasks, 4).await?;
    }
    for round in 0..config.cluster_rounds {
        for kind in rotated(&kinds, round) {
            let before = stats::cpu_seconds(&mut probes).await?;
            let mut batch = workloads::concurrent(
                &on_cluster,
                kind,
                config.cluster_tasks,
                config.cluster_per_task,
            )
            .await?;
            let spent = stats::cpu_seconds(&mut probes).await? - before;
            batch.server_cpu = Duration::from_secs_f64(spent.max(0.0));
            results.cluster.entry(kind.label()).or_default().push(batch);
        }
    }
    drop(on_cluster);
    drop(cluster);

    eprintln!("bench: (e) acquire latency, one node and Redlock over 3 and 5 masters");
    let masters = REDLOCK_MASTERS.iter().max().copied().unwrap_or(1);
    let servers = workloads::start("independent redis-servers", move || {
        RedisServer::start_many(masters)
    })
    .await?;
    let ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    let mut clients = Vec::new();
    for m in REDLOCK_MASTERS {
        let client = LockClient::connect(&workloads::masters_url(&ports, m)).await?;
        // Warm-up: connections open, scripts cached.
        workloads::acquire_latency(&client, 50).await?;
        clients.push((m, client));
    }
    let mut raw = Vec::new();
    for server in &servers {
        raw.push(server.raw().await);
    }
    workloads::fanout_latency(&raw, 50).await?;
    for round in 0..config.redlock_rounds {
        for (m, client) in rotated(&clients, round) {
            let batch = workloads::acquire_latency(&client, config.redlock_n).await?;
            results.redlock.entry(m).or_default().push(batch);
            let batch = workloads::fanout_latency(&raw[..m], config.redlock_n).await?;
            results.fanout.entry(m).or_default().push(batch);
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let args = <Args as clap::Parser>::parse();
    let mut config = if args.quick {
        Config::quick()
    } else {
        Config::full()
    };
    if let Some(rounds) = args.rounds {
        config.seq_rounds = rounds;
        config.distinct_rounds = rounds;
    }
    if let Some(holds) = args.holds {
        let most = usize::try_from(holds).unwrap_or(usize::MAX);
        config.scale_holds = vec![most / 100, most / 10, most];
        config.scale_holds.retain(|&n| n >= 100);
    }
    if args.only.contains('e') {
        // Before the other workloads, so that a missing tool does not waste their run.
        workloads::require("redis-server", "redis-server")?;
        workloads::require("redis-cli", "redis-tools")?;
    }
    let started = Instant::now();
    let load_before = report::loadavg();

    let server;
    let url = match &args.redis {
        Some(url) => url.clone(),
        None => {
            server =
                RedisServer::try_start().map_err(|why| format!("{why}; or pass --redis URL"))?;
            server.url()
        }
    };
    let mut probe = stats::Probe::connect(&url).await?;
    let version = probe.version().await?;
    eprintln!(
        "bench: {} mode against redis {version} at {}",
        if config.quick { "quick" } else { "full" },
        redacted(&url)
    );

    let lockers = Lockers::connect(&url).await?;
    let mut results = Results::default();
    let async_kinds = [
        Kind::Floor,
        Kind::Scripts,
        Kind::Manual,
        Kind::Macro,
        Kind::Rslock,
    ];

    // Warm-up: connections open, scripts cached, allocator and watchdog warm.
    for kind in async_kinds {
        workloads::sequential(&lockers, kind, 100).await?;
    }
    if args.kinds.contains(&Kind::Redlock) {
        workloads::sequential(&lockers, Kind::Redlock, 10).await?;
    }

    let run = |phase: char| args.only.contains(phase);

    // (a), (b): within a round, the implementations take turns in bursts (see `in_bursts`).
    eprintln!("bench: (a) uncontended");
    if run('a') {
        let cycles = |kind| match kind {
            Kind::Redlock => config.seq_redlock,
            _ => config.seq_n,
        };
        let (rounds, bursts) = (config.seq_rounds, config.seq_bursts);
        results.sequential = in_bursts(
            &mut probe,
            &args.kinds,
            rounds,
            bursts,
            cycles,
            async |k, n| workloads::sequential(&lockers, k, n).await,
        )
        .await?;
    }
    eprintln!(
        "bench: (b) {} tasks on distinct keys",
        config.distinct_tasks
    );
    if run('b') {
        let cycles = |kind| match kind {
            Kind::Redlock => config.distinct_redlock,
            _ => config.distinct_per_task,
        };
        let (rounds, bursts) = (config.distinct_rounds, config.distinct_bursts);
        let tasks = config.distinct_tasks;
        results.distinct = in_bursts(
            &mut probe,
            &args.kinds,
            rounds,
            bursts,
            cycles,
            async |k, n| workloads::distinct(&lockers, k, tasks, n).await,
        )
        .await?;
        eprintln!("bench: (b) throughput against tasks");
        let swept = [Kind::Floor, Kind::Manual, Kind::Rslock];
        for tasks in config.sweep_tasks {
            for kind in swept.into_iter().filter(|k| args.kinds.contains(k)) {
                let per_task = (config.sweep_cycles / tasks as u64).max(1);
                let batch = workloads::distinct(&lockers, kind, tasks, per_task).await?;
                results.sweep.push((kind, tasks, batch.rate()));
            }
        }
    }

    // (c)
    let rlock = |fair, clients| Contender::Rlock { fair, clients };
    let contenders = [
        rlock(false, config.clients),
        rlock(true, config.clients),
        rlock(false, config.tasks),
        rlock(true, config.tasks),
        Contender::Rslock {
            delay: Duration::from_millis(200),
        },
        Contender::Rslock {
            delay: Duration::from_millis(20),
        },
        Contender::Redlock {
            delay: Duration::from_millis(200),
        },
    ];
    for hold in config.holds.into_iter().filter(|_| run('c')) {
        for who in contenders {
            let clients = who.clients(config.clients);
            eprintln!(
                "bench: (c) {} tasks / {clients} clients, hold {hold:?}: {}",
                config.tasks,
                who.label()
            );
            let run = workloads::contended(
                &url,
                &mut probe,
                who,
                hold,
                config.tasks,
                clients,
                config.per_task,
            )
            .await?;
            results.contended.push((who, hold, run));
        }
    }

    // (d)
    if run('d') {
        eprintln!("bench: (d) {} locks under renewal", config.wd_locks);
        let wd = workloads::watchdog_rlock(
            &url,
            &mut probe,
            config.wd_locks,
            config.wd_ttl,
            config.wd_window,
        )
        .await?;
        results.watchdog.push((Kind::Manual, wd));
        let wd = workloads::watchdog_rslock(
            &url,
            &mut probe,
            config.wd_locks,
            config.wd_ttl,
            config.wd_window,
        )
        .await?;
        results.watchdog.push((Kind::Rslock, wd));
        let largest = config.scale_holds.iter().copied().max().unwrap_or(0);
        for &holds in &config.scale_holds {
            let leases = if holds == largest {
                config.scale_leases
            } else {
                1
            };
            eprintln!("bench: (d) {holds} holds in one client, {leases} leases measured");
            results.scale.push(
                scale::hold_many(
                    &url,
                    &mut probe,
                    holds,
                    config.scale_ttl,
                    config.scale_ttl * leases,
                )
                .await?,
            );
        }
    }

    // (e)
    if run('e') {
        beyond_one_redis(&config, &mut results).await?;
    }

    // (f)
    if run('f') {
        eprintln!("bench: (f) semaphores");
        semaphores_phase(&url, &config, &mut probe, &mut results).await?;
    }

    // (g)
    if run('g') {
        eprintln!("bench: (g) read-write locks");
        read_write_phase(&url, &config, &mut probe, &mut results).await?;
    }

    // (h)
    if run('h') {
        eprintln!("bench: (h) once-only work and idempotent requests");
        results.beyond =
            Some(beyond::run(&url, &mut probe, config.seq_rounds, config.seq_n).await?);
    }

    let machine = report::Machine {
        redis_version: version,
        load_before,
        load_after: report::loadavg(),
        duration: started.elapsed(),
        command: report::command_line(&args.as_given()),
    };
    let summary = report::summary(&results);
    let out = match (&args.out, config.quick) {
        (Some(path), _) => Some(path.clone()),
        (None, false)
            if args.only == PHASES
                && args.kinds == Kind::ALL
                && args.rounds.is_none()
                && args.holds.is_none() =>
        {
            Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md"))
        }
        (None, _) => None,
    };
    // The charts go beside the report they are shown in.
    let charts = match &out {
        Some(path) => {
            let beside = path.parent().unwrap_or(std::path::Path::new("."));
            charts::draw(&results, &beside.join(charts::FOLDER))?
        }
        None => String::new(),
    };
    let markdown = report::markdown(&config, &machine, &results, &summary, &charts);
    println!("{markdown}");

    if let Some(path) = out {
        report::write(&path, &markdown)?;
        eprintln!("bench: wrote {}", path.display());
    }
    for problem in report::problems(&results) {
        eprintln!("bench: WARNING: {problem}");
    }
    println!("{}", summary.line());
    // Two holders at once is a broken lock, not a slow one: fail the run (and CI).
    let overlaps: u64 = results.contended.iter().map(|(_, _, c)| c.overlaps).sum();
    if overlaps > 0 {
        return Err(format!("mutual exclusion violated {overlaps} times in workload (c)").into());
    }
    if let Some(run) = results
        .semaphore
        .iter()
        .find(|run| run.most_inside > run.permits)
    {
        return Err(format!(
            "{} bodies ran at once under a semaphore of {} permits in workload (f)",
            run.most_inside, run.permits
        )
        .into());
    }
    Ok(())
}

/// (f): the uncontended ways take turns within each round; then the contended run.
async fn semaphores_phase(
    url: &str,
    config: &Config,
    probe: &mut stats::Probe,
    results: &mut Results,
) -> Result<(), BenchError> {
    let permits = semaphores::Permits::connect(url).await?;
    for way in semaphores::Way::ALL {
        permits.rate(way, 50).await?;
    }
    for _ in 0..config.sem_rounds {
        for way in semaphores::Way::ALL {
            let rate = permits.rate(way, config.sem_n).await?;
            results.permits.entry(way.label()).or_default().push(rate);
        }
    }
    // The peers' clients are closed before the contended rows, so that nothing of theirs
    // (connection readers, extension tasks) runs beside rlock's waiters.
    drop(permits);
    let shape = |clients, heavy| semaphores::Contention {
        tasks: config.sem_tasks,
        clients,
        permits: config.sem_permits,
        heavy,
        per_task: config.sem_per_task,
        hold: config.sem_hold,
    };
    // Warm-up, not recorded: a short contended run, so that the first measured row does not
    // start cold on the uncontended rows' heels (a p99 counts any stall of the process).
    semaphores::contended(
        url,
        probe,
        semaphores::Contention {
            per_task: 2,
            ..shape(config.sem_clients[0], 1)
        },
    )
    .await?;
    for clients in config.sem_clients {
        results
            .semaphore
            .push(semaphores::contended(url, probe, shape(clients, 1)).await?);
    }
    // Weighted: every fourth task takes 3 permits at once, over the fewer clients.
    results
        .semaphore
        .push(semaphores::contended(url, probe, shape(config.sem_clients[0], SEM_HEAVY)).await?);
    Ok(())
}

async fn read_write_phase(
    url: &str,
    config: &Config,
    probe: &mut stats::Probe,
    results: &mut Results,
) -> Result<(), BenchError> {
    let locks = read_write::ReadWrite::connect(url).await?;
    for way in read_write::Way::all() {
        locks.rate(way, 20).await?;
    }
    for _ in 0..config.rw_rounds {
        for way in read_write::Way::all() {
            let rate = locks.rate(way, config.rw_n).await?;
            results
                .read_write
                .entry(way.label())
                .or_default()
                .push(rate);
        }
    }
    // What each way's cycle costs, one way at a time: ten times a round's cycles, so that
    // the client's CPU (counted in the kernel's 10 ms ticks) resolves a few µs per cycle.
    let cost_cycles = config.rw_n * 10;
    for way in read_write::Way::all() {
        let before = probe.snapshot().await?;
        let cpu0 = stats::process_cpu();
        let rate = locks.rate(way, cost_cycles).await?;
        let client_cpu = stats::process_cpu().saturating_sub(cpu0);
        let after = probe.snapshot().await?;
        results.read_write_cost.push(read_write::Cost {
            way: way.label(),
            cycles: cost_cycles,
            rate,
            client_cpu,
            server: stats::delta(&before, &after),
        });
    }
    results.admission = Some(
        read_write::admission(
            url,
            probe,
            config.rw_readers,
            config.rw_clients,
            config.rw_admissions,
        )
        .await?,
    );
    Ok(())
}

/// `url` with its credentials hidden, for the log.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}
