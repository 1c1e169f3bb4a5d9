//! The soak run: worker processes take locks on a few keys while a nemesis breaks Redis, the
//! network and the workers themselves; then the merged history is checked.
//!
//! ```text
//! cargo run -p rlock-tests --bin soak -- --quick                 # ≈ 1 minute, every fault
//! cargo run --release -p rlock-tests --bin soak -- --acquisitions 1000000 [--aof]
//!     [--workers 4] [--tasks 8] [--ttl-ms 500] [--seed N] [--fault-every-ms 1500]
//!     [--waiters 8] [--wait-ttl-ms 2000] [--candidates 3] [--report FILE]
//!                                                           (--help lists them all)
//! cargo run --release -p rlock-tests --bin soak -- --on single,sentinel,cluster
//!     [--min-replicas 1] …
//! ```
//!
//! Layout: one `redis-server` holds the locks (the one the nemesis attacks; `--aof` runs it
//! with `appendonly yes`, `appendfsync always`); a second one is the fenced store, a hash
//! that keeps the highest fence written per key and refuses lower ones. Each worker process
//! (the `soak` binary's hidden `worker` subcommand, `worker.rs`) reaches the lock server
//! through its own [`FaultProxy`](crate::proxy::FaultProxy).
//! Its tasks lock a hot key (one of four, contended by everyone) or a cold one of their own,
//! write once through the store with the section's fence, and log each section. One section
//! in four takes a permit of a **semaphore** instead (`soak:<name>:sem:<k>`, two keys per
//! deployment, three permits each, one such section in four holding two at once, waited for
//! like a lock): held a few ms, released, logged with its permit count; no write, as a
//! permit carries no fence. Its keys are checked for more permits held at once than the
//! count ([`crate::history::count_sweep`]) instead of overlaps.
//! One section in sixteen names a key that every kind asks for (`soak:<name>:mixed:<k>`, a
//! misuse users make): its requests of another kind than the key holds are refused
//! (`WrongKind`, counted), and no two sections of different kinds may overlap on it
//! ([`crate::history::kinds_sweep`]). Every server is pinged every 10 ms with its
//! `lua-time-limit` at 100 ms ([`crate::stall::BusyWatch`]): a `BUSY` answer while no fault
//! had stopped a server is a script that held Redis, and fails the run.
//!
//! The **waiting mix** (`--waiters N` per key and worker, on by default; `0` turns it off)
//! adds, on each deployment, two keys that many requests wait for at once
//! (`soak:<name>:wait:<k>`, `fair` on the first), with a ttl of `--wait-ttl-ms` and a budget
//! of five ttl; one request in eight is cancelled while it waits (a timeout around
//! `acquire`). Their sections are checked like the others. Each worker reports how its waits
//! went per key, and a `MONITOR` connection per server counts every queued waiter's check
//! ins ([`crate::checkins`]); [`waits`] judges starvation and the check-in
//! rate. The deck gains `StallWaiter`: a worker (whose waiters are queued) stopped for longer
//! than the waiting keys' hand-off lease.
//!
//! Every worker also measures its own timer lateness (a probe sleeping 5–10 ms, again and
//! again) and reports the worst per 100 ms: an overlap with no fault nearby whose earlier
//! holder's process ran about as late as it was told is put down to scheduling delay.
//!
//! The **leaders** (`--candidates N`, 3 by default; `0` turns them off; `leaders`): N more
//! worker processes campaign for every deployment's seat (`soak:<name>:leader`), hold each
//! term 2–6 ttl writing once through the store with the term, and resign. The deck gains
//! `KillLeader`, `StopLeader` and `PartitionLeader`, which strike whichever candidate leads
//! (found by `observe`); each one's failover time, until another candidate leads, is
//! reported. The terms are checked as a fenced lock's sections, and for a term granted
//! twice.
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
//! overlap, a silent permit excess (more holders of a semaphore than permits, too few of
//! them ever told they lost theirs), a stale write accepted, a fence regression, a panic, a worker that did not
//! finish, a lock key left behind, a starved waiter, check ins above their bound, a stall, a fence
//! granted twice, or a leader not replaced after a fault.
//!
//! The modules, by concern: `config` (the command line and a run's shape), `deployment`
//! (where the locks live), `nemesis` (the faults), `leaders` (the candidates and their
//! failover times), `run` (the run itself), `worker` (one
//! worker process, writing the lines of [`crate::protocol`]), [`history`] (the workers'
//! records merged), [`verdict`] (the checks, on the one overlap check of
//! [`crate::history`]), [`waits`] (the waiting mix judged) and `report`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod config;
mod deployment;
pub mod history;
mod leaders;
mod nemesis;
mod report;
mod run;
pub mod verdict;
pub mod waits;
mod worker;

pub use config::Cli;
use config::{Config, Role};

/// Bound of every command the harness sends itself (admin, store).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Runs what `cli` asks for: a soak run, or one worker process of a run.
///
/// # Errors
///
/// When the run fails (its report says why), or a worker cannot do its part.
pub fn main(cli: Cli) -> Result<(), String> {
    match cli.role {
        Some(Role::Worker(args)) => worker::main(args),
        None => run::orchestrate(Config::from(cli.run)),
    }
}
