//! A soak run: the servers, the worker processes, the nemesis striking while they run, and
//! the merged history checked once they are done.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::COMMAND_TIMEOUT;
use super::config::Config;
use super::deployment::{Deployment, Locks};
use super::history::{History, Record};
use super::leaders::{self, Candidates};
use super::nemesis::{Fault, Nemesis};
use super::now_us;
use super::report::{deployments, report, waiting_report};
use super::verdict;
use super::waits::{self, Rules};
use crate::RedisServer;
use crate::checkins::CheckInCounter;
use crate::deploy::{ClusterDeployment, SentinelDeployment};
use crate::proxy::FaultProxy;
use crate::stall::{Busy, BusyWatch};

/// What a worker process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Takes locks, permits and read-write locks, and waits in the waiting mix.
    Locks,
    /// Campaigns for every deployment's leader seat, until its stdin is closed.
    Candidate,
}

/// How the run starts a worker process: the binary, the deployments it reaches and the run's
/// shape.
pub(super) struct Recipe {
    exe: PathBuf,
    dir: PathBuf,
    store: String,
    /// The one server, each worker reaching it through a proxy of its own.
    single_port: Option<u16>,
    sentinel: Option<String>,
    cluster: Option<String>,
    config: Config,
    per_worker: u64,
    deadline_us: u64,
}

impl Recipe {
    /// How many locking workers the run has.
    pub(super) fn workers(&self) -> u64 {
        self.config.workers
    }

    /// Starts worker `id`, its history in the run's directory.
    pub(super) fn spawn(&self, id: u64, role: Role) -> Result<Worker, String> {
        let config = &self.config;
        let proxy = self.single_port.map(FaultProxy::start);
        let mut urls = Vec::new();
        if let Some(proxy) = &proxy {
            urls.extend(["--single".to_owned(), proxy.url()]);
        }
        if let Some(url) = &self.sentinel {
            urls.extend(["--sentinel".to_owned(), url.clone()]);
        }
        if let Some(url) = &self.cluster {
            urls.extend(["--cluster".to_owned(), url.clone()]);
        }
        let name = match role {
            Role::Locks => "worker",
            Role::Candidate => "candidate",
        };
        let history = self.dir.join(format!("{name}-{id}.log"));
        let mut command = Command::new(&self.exe);
        command
            .arg("worker")
            .args(["--id", &id.to_string()])
            .args(&urls)
            .args(["--min-replicas", &config.min_replicas.to_string()])
            .args(["--store", &self.store])
            .args(["--history", &history.to_string_lossy()])
            .args(["--tasks", &config.tasks.to_string()])
            .args(["--ttl-ms", &config.ttl.as_millis().to_string()])
            .args(["--waiters", &config.waiters.to_string()])
            .args(["--wait-ttl-ms", &config.wait_ttl.as_millis().to_string()])
            .args(["--acquisitions", &self.per_worker.to_string()])
            .args(["--until-us", &self.deadline_us.to_string()])
            .args(["--seed", &config.seed.wrapping_add(id).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if role == Role::Candidate {
            // It runs until the run closes its stdin.
            command.arg("--candidate").stdin(Stdio::piped());
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start a {name}: {e}"))?;
        Ok(Worker {
            child,
            proxy,
            history,
            stopped: false,
        })
    }
}

/// A worker process and the proxy in front of it.
pub(super) struct Worker {
    pub(super) child: Child,
    /// In front of the lock server (not on a Sentinel deployment).
    pub(super) proxy: Option<FaultProxy>,
    pub(super) history: PathBuf,
    pub(super) stopped: bool,
}

impl Worker {
    pub(super) fn signal(&mut self, signal: &str) {
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

pub(super) fn orchestrate(config: Config) -> Result<(), String> {
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
    // A script that cannot finish stops its whole server: every `BUSY` answer is counted.
    let stalls = BusyWatch::start(&locks.ports());
    let per_worker = config.acquisitions.div_ceil(config.workers);
    let started = Instant::now();
    let deadline_us = if config.acquisitions == 0 {
        now_us() + u64::try_from(config.duration.as_micros()).unwrap_or(u64::MAX)
    } else {
        0
    };
    let recipe = Recipe {
        exe,
        dir: dir.clone(),
        store: store.url(),
        single_port: locks.single.as_ref().map(RedisServer::port),
        sentinel: locks.sentinel.as_ref().map(SentinelDeployment::url),
        cluster: locks.cluster.as_ref().map(ClusterDeployment::url),
        config: config.clone(),
        per_worker,
        deadline_us,
    };
    let mut workers = Vec::new();
    for w in 0..config.workers {
        workers.push(recipe.spawn(w, Role::Locks)?);
    }
    let mut candidates = Candidates::start(recipe, config.candidates)?;
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
    if config.candidates > 0 {
        println!(
            "soak: {} leader candidates campaign on every deployment",
            config.candidates
        );
    }

    let mut faults = locks.faults(&config.on);
    if config.waiters > 0 {
        faults.push(Fault::StallWaiter);
    }
    faults.extend(candidates.faults(locks.single.is_some()));
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
        leader_faults: Vec::new(),
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
            runtime.block_on(nemesis.strike(&locks, &mut workers, &mut candidates))?;
            next_fault = Instant::now() + config.fault_every;
        }
    }
    let campaigns_ended_us = now_us();
    let mut problems = candidates.finish(&config);
    let elapsed = started.elapsed();

    // Leftovers: every lease, queue and mark must have expired once the workers are gone.
    let longest_lease = config.ttl.max(config.wait_ttl).max(Duration::from_secs(2));
    std::thread::sleep(longest_lease + Duration::from_secs(3));
    let check_ins = check_ins.finish();
    let (stalls, stalls_in_faults): (Vec<Busy>, Vec<Busy>) = stalls
        .finish()
        .into_iter()
        .partition(|busy| !nemesis.server_stopped_around(busy.at_us));
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
    candidates.add_histories(&mut history, &mut problems);
    let mut verdict = verdict::check(&history);
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
    // A failover can lose a grant's fence count: the new master may grant a fence again.
    let (repeats_excused, repeats): (Vec<_>, Vec<_>) = std::mem::take(&mut verdict.repeated_fences)
        .into_iter()
        .partition(|(_, second)| {
            nemesis
                .failover_around(second.grant_us, history.key(second))
                .is_some()
        });
    verdict.repeated_fences = repeats;
    let mut regressions_after: BTreeMap<Option<Fault>, u64> = BTreeMap::new();
    for (_, later) in &excused {
        *regressions_after
            .entry(nemesis.cause(later.grant_us, history.key(later)))
            .or_default() += 1;
    }
    // Without replica acknowledgement, a failover may lose a grant or run two masters for a
    // moment, and both holders may then finish untold (RELIABILITY.md, "What rlock does not
    // promise"); with it, a silent overlap is a defect wherever it happens.
    if config.min_replicas == 0 {
        let across = |o: &verdict::Overlap| {
            nemesis
                .failover_around(o.later.grant_us, history.key(&o.later))
                .is_some()
        };
        for silent in [&mut verdict.silent_overlaps, &mut verdict.silent_excesses] {
            let (excused, defects) = std::mem::take(silent).into_iter().partition(across);
            *silent = defects;
            verdict.across_failovers.extend::<Vec<_>>(excused);
        }
    }
    problems.extend(verdict.violations(&history));
    problems.extend(leaders::stuck_elections(
        &history,
        &nemesis.leader_faults,
        config.ttl,
        campaigns_ended_us,
    ));
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
    if !stalls.is_empty() {
        problems.push(format!(
            "Redis answered BUSY (a script ran past {:?}) with no server stopped: {stalls:?}",
            crate::stall::BUSY_AFTER
        ));
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
    if config.quick && verdict.upgrade_sections == 0 {
        problems.push("no upgradeable read was upgraded: the run did not cover upgrades".into());
    }

    let mut report = report(&config, &history, &verdict, &nemesis, &orphans, elapsed);
    let _ = writeln!(
        report,
        "\nStalls: {} `BUSY` answers to a `PING` every 10 ms per server (a script running past \
         {:?}), {} more while a fault had stopped a server.",
        stalls.len(),
        crate::stall::BUSY_AFTER,
        stalls_in_faults.len()
    );
    report.push_str(&waiting_report(
        &config,
        &history,
        &waiting,
        &check_ins,
        unattributed,
    ));
    if config.candidates > 0 {
        report.push_str(&leaders::report(
            &history,
            &nemesis.leader_faults,
            config.ttl,
        ));
    }
    if !repeats_excused.is_empty() {
        let _ = writeln!(
            report,
            "\nFences granted twice across failovers (keys on replicated deployments): {}",
            repeats_excused.len()
        );
    }
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
    for (overlap, what) in (verdict.silent_overlaps.iter().map(|o| (o, "overlap")))
        .chain(verdict.silent_excesses.iter().map(|e| (e, "permit excess")))
    {
        let cause = nemesis.cause(overlap.later.grant_us, history.key(&overlap.later));
        problems.push(format!(
            "(the silent {what} granted at {} followed {cause:?})",
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
