//! Mutual exclusion across OS processes, checked from the recorded history.
//!
//! Eight `contend` worker processes, each with several tasks, contend for one lock on a real Redis.
//! Inside the lock every holder does a racy read-sleep-write increment of a plain counter key.
//! The test then proves exclusion three ways: no increment was lost, no two recorded critical
//! sections overlap in wall-clock time, and fencing tokens increase in the order the sections
//! happened. A negative control runs the same workers without the lock and shows that these
//! checks catch it. A shorter run goes through the harness' fault proxy, with every chunk
//! delayed and flushed in bursts.
#![allow(clippy::unwrap_used)]

use std::thread;
use std::time::{Duration, Instant};

use rlock_tests::RedisServer;
use rlock_tests::deploy::ClusterDeployment;
use rlock_tests::history::{Section, check_mutual_exclusion, owner_switches};
use rlock_tests::proxy::FaultProxy;
use rlock_tests::worker::Contend;
use rlock_tests::workers::{Running, WorkerReport};

const PROCESSES: usize = 8;
const TASKS: usize = 4;
const ITERATIONS: usize = 40;
/// Generous: the run normally takes a few seconds.
const DEADLINE: Duration = Duration::from_secs(90);
/// The lease outlives any critical section of this test by far.
const TTL_MS: u64 = 10_000;
/// Short on purpose, so that some acquisitions give up with `Busy` and the retry path runs too.
const WAIT_MS: u64 = 250;

/// Runs `processes` workers of `shape` (each incrementing the racy counter `mx:counter`)
/// until all exit (or kills them after [`DEADLINE`] and panics); asserts each succeeded and
/// returns their parsed reports.
fn run_workers(processes: usize, shape: Contend) -> Vec<WorkerReport> {
    let shape = Contend {
        counter: Some("mx:counter".into()),
        ..shape
    };
    Running::spawn(WORKER, processes, &shape).finish(DEADLINE)
}

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

/// A worker of `tasks` tasks entering `iterations` sections each, on the shared key with
/// this test's ttl and wait.
fn shape(url: &str, tasks: usize, iterations: usize) -> Contend {
    Contend {
        tasks,
        iterations,
        ..Contend::new(url, "mx:shared", TTL_MS, WAIT_MS)
    }
}

fn counter(server: &RedisServer) -> u64 {
    let mut con = server.redis_client().get_connection().unwrap();
    redis::cmd("GET").arg("mx:counter").query(&mut con).unwrap()
}

#[test]
fn lock_excludes_across_processes() {
    let server = RedisServer::start();
    let started = Instant::now();
    let reports = run_workers(PROCESSES, shape(&server.url(), TASKS, ITERATIONS));
    let elapsed = started.elapsed();

    let entered: u64 = reports.iter().map(|r| r.entered).sum();
    let busy: u64 = reports.iter().map(|r| r.busy).sum();
    let sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();
    assert_eq!(entered, (PROCESSES * TASKS * ITERATIONS) as u64);

    assert_eq!(
        counter(&server),
        entered,
        "lost updates: two holders were inside the critical section at once"
    );
    check_mutual_exclusion(&sections).unwrap();

    // The processes really contended: in time order the holder changed process many times.
    let switches = owner_switches(&sections);
    assert!(
        switches >= PROCESSES,
        "only {switches} hand-overs between processes; the run did not interleave"
    );
    eprintln!(
        "{entered} critical sections by {PROCESSES} processes in {elapsed:?}, \
         {switches} cross-process hand-overs, {busy} busy retries"
    );
}

/// Holders that stall past their lease and release late (every fifth hold) must not free
/// the lock of the holder after them: the sections that held valid leases still never
/// overlap, and no increment is lost.
#[test]
fn stale_holders_cannot_break_exclusion() {
    let server = RedisServer::start();
    let reports = run_workers(
        4,
        Contend {
            stale_every: 5,
            ..shape(&server.url(), 2, 20)
        },
    );
    let entered: u64 = reports.iter().map(|r| r.entered).sum();
    let sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();
    assert_eq!(counter(&server), entered, "lost updates");
    check_mutual_exclusion(&sections).unwrap();
}

/// Without the lock, the same workers and checks must report lost updates and overlaps;
/// otherwise the test above would prove nothing.
#[test]
fn checks_catch_workers_without_the_lock() {
    let server = RedisServer::start();
    let reports = run_workers(
        2,
        Contend {
            no_lock: true,
            ..shape(&server.url(), 4, 20)
        },
    );
    let entered: u64 = reports.iter().map(|r| r.entered).sum();
    let sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();

    let count = counter(&server);
    assert!(
        count < entered,
        "expected lost updates, counter {count} of {entered}"
    );
    assert!(check_mutual_exclusion(&sections).is_err());
}

/// The same exclusion through a slow, bursty network: every worker reaches Redis through the
/// fault proxy, which delays each chunk by 1 ms and flushes every 2 ms, so replies (renewals,
/// releases, announcements, the racy increment's reads) arrive late and in bursts.
#[test]
fn lock_excludes_across_processes_through_a_slow_bursty_network() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    proxy.set_delay(Duration::from_millis(1));
    proxy.set_batching(Some(Duration::from_millis(2)));
    let reports = run_workers(
        4,
        Contend {
            stale_every: 5,
            ..shape(&proxy.url(), 3, 15)
        },
    );
    let entered: u64 = reports.iter().map(|r| r.entered).sum();
    let sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();
    assert_eq!(entered, 4 * 3 * 15);
    assert_eq!(counter(&server), entered, "lost updates");
    check_mutual_exclusion(&sections).unwrap();
    assert!(
        proxy.connections() >= 4,
        "the workers did not use the proxy"
    );
}

/// `extend` racing the watchdog's renewals across processes, through the slow, bursty proxy:
/// every second critical section holds a 600 ms lease across its renewal window and extends
/// it to a random length at a random moment. A renewal that undid an extend would end a lease
/// early: the worker reports any lost lease as an error, and the history and the counter show
/// any overlap.
#[test]
fn extend_racing_renewals_keeps_exclusion_across_processes() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    proxy.set_delay(Duration::from_millis(1));
    proxy.set_batching(Some(Duration::from_millis(2)));
    let reports = run_workers(
        4,
        Contend {
            ttl_ms: 600,
            extend_every: 2,
            wait_ms: 5000,
            ..shape(&proxy.url(), 2, 6)
        },
    );
    let entered: u64 = reports.iter().map(|r| r.entered).sum();
    let sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();
    assert_eq!(entered, 4 * 2 * 6);
    assert_eq!(counter(&server), entered, "lost updates");
    check_mutual_exclusion(&sections).unwrap();
}

/// Redis Cluster, with the master of the lock's slot killed in the middle of the run and its
/// replica promoted. Every grant waits for a replica's acknowledgement (`min_replicas = 1`),
/// so no granted lock is missing on the promoted replica: the history shows no two sections
/// at once, where a section ends when its holder's `lost()` fires if it fires first. The
/// workers ride out the failover (acquisitions failing meanwhile are retried), and the old
/// master rejoins as the new one's replica.
#[test]
fn a_cluster_failover_keeps_exclusion_across_processes_with_replica_acks() {
    let cluster = ClusterDeployment::start();
    let master = cluster.master_of_key("mx:shared").unwrap();
    let running = Running::spawn(
        WORKER,
        4,
        &Contend {
            min_replicas: 1,
            ride_outages: true,
            // Sections of 2 ms: the run lasts seconds, so the failover lands in its middle
            // however fast the handoffs are.
            hold_ms: 2,
            ..shape(&cluster.url(), 2, 150)
        },
    );
    thread::sleep(Duration::from_millis(500));
    cluster.fail_over(master);
    // The promoted replica has no replica of its own until the old master rejoins as one:
    // until then no grant can be acknowledged, and the workers retry.
    master.restart();
    cluster.wait_healthy(&[]);
    let reports = running.finish(DEADLINE);

    let unavailable: u64 = reports.iter().map(|r| r.unavailable).sum();
    let lost: u64 = reports.iter().map(|r| r.lost).sum();
    let sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();
    check_mutual_exclusion(&sections).unwrap();
    assert!(
        unavailable + lost > 0,
        "the failover happened after the run: nothing was unavailable"
    );
    eprintln!(
        "{} sections across a failover: {unavailable} acquisitions retried while the slot had \
         no master, {lost} sections lost",
        sections.len()
    );
}
