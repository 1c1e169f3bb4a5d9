//! Stress: two runtimes share one client, a second client contends, thousands of short holds
//! with random extends, cancelled acquires and bodies, and guards dropped unreleased. Every
//! critical section is recorded on one clock and the history goes through the one overlap
//! check ([`rlock_tests::history::sweep`]): no two sections of a key overlap unless the
//! earlier one's `lost()` had fired by the later one's start.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::history::{self, AsSection, Section};
use rlock_tests::locking::client_at;
use rlock_tests::proxy::FaultProxy;

/// One recorded critical section, in microseconds since the run's common origin.
#[derive(Debug, Clone, Copy)]
struct Held {
    key: usize,
    worker: usize,
    start: u64,
    end: u64,
    lost_at: Option<u64>,
}

#[derive(Debug, Default)]
struct StressTally {
    attempts: AtomicUsize,
    busy: AtomicUsize,
    errors: AtomicUsize,
    cancelled_acquires: AtomicUsize,
    cancelled_bodies: AtomicUsize,
    dropped_guards: AtomicUsize,
    extends: AtomicUsize,
    lost: AtomicUsize,
}

struct Stress {
    origin: Instant,
    sections: Mutex<Vec<Held>>,
    tally: StressTally,
    error_samples: Mutex<BTreeMap<String, usize>>,
}

impl Stress {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

const STRESS_KEYS: usize = 8;
const NO_LOST: u64 = u64::MAX;

/// One task's share of holds: random key, ttl 100-300 ms, wait 0-150 ms, random `extend`,
/// random cancellation of the acquire and of the body, random drop without release.
async fn stress_worker(client: LockClient, stress: Arc<Stress>, worker: usize, holds: usize) {
    let mut rng = fastrand::Rng::new();
    // The last extend's round trip in ms: the renewal is timed from when the acquire was
    // sent, about one round trip before it returned.
    let rtt_ms = AtomicU64::new(0);
    let count = |c: &AtomicUsize| {
        c.fetch_add(1, Ordering::Relaxed);
    };
    for _ in 0..holds {
        count(&stress.tally.attempts);
        let key = rng.usize(0..STRESS_KEYS);
        let ttl = Duration::from_millis(rng.u64(100..=300));
        let wait = Duration::from_millis(rng.u64(0..=150));
        let acquire_limit = if rng.u8(0..10) < 3 {
            Duration::from_millis(rng.u64(1..=30))
        } else {
            Duration::from_secs(2)
        };
        let acquired = tokio::time::timeout(
            acquire_limit,
            client
                .lock(format!("stress:{key}"))
                .ttl(ttl)
                .wait(wait)
                .acquire(),
        )
        .await;
        let guard = match acquired {
            Err(_) => {
                count(&stress.tally.cancelled_acquires);
                continue;
            }
            Ok(Err(e)) if e.is_busy() => {
                count(&stress.tally.busy);
                continue;
            }
            Ok(Err(e)) => {
                count(&stress.tally.errors);
                *stress
                    .error_samples
                    .lock()
                    .unwrap()
                    .entry(e.to_string())
                    .or_default() += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Ok(Ok(guard)) => guard,
        };
        let start = stress.now();
        let lost_at = AtomicU64::new(NO_LOST);

        // The body, in steps of (sleep, then maybe extend to this many ms). Four in ten
        // extend right at the watchdog's first renewal (ttl/3 after the grant) to a much
        // longer lease and then outlive the original one; two in ten outlive the lease on
        // renewals alone; the rest are short, with an occasional extend.
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let steps: Vec<(u64, Option<u64>)> = match rng.u8(0..10) {
            0..=3 => vec![
                (
                    ttl_ms / 3 - rng.u64(0..=2 + 2 * rtt_ms.load(Ordering::Relaxed)).min(20),
                    Some(rng.u64(ttl_ms * 3..=2000)),
                ),
                (ttl_ms + 50, None),
            ],
            4..=5 => vec![(rng.u64(ttl_ms..=ttl_ms * 3 / 2), None)],
            _ => vec![(
                rng.u64(0..=ttl_ms / 3),
                (rng.u8(0..10) < 3).then(|| rng.u64(100..=1500)),
            )],
        };
        let body = async {
            tokio::select! {
                biased;
                () = guard.lost() => {
                    lost_at.store(stress.now(), Ordering::Relaxed);
                }
                () = async {
                    for (sleep, extend) in &steps {
                        tokio::time::sleep(Duration::from_millis(*sleep)).await;
                        if let Some(ms) = extend {
                            stress.tally.extends.fetch_add(1, Ordering::Relaxed);
                            let sent = Instant::now();
                            let _ = guard.extend(Duration::from_millis(*ms)).await;
                            let took = u64::try_from(sent.elapsed().as_millis()).unwrap_or(20);
                            rtt_ms.store(took, Ordering::Relaxed);
                        }
                    }
                } => {}
            }
        };
        let body_limit = if rng.u8(0..10) < 3 {
            Duration::from_millis(rng.u64(1..=200))
        } else {
            Duration::from_secs(10)
        };
        if tokio::time::timeout(body_limit, body).await.is_err() {
            count(&stress.tally.cancelled_bodies);
        }
        let end = stress.now();
        let lost_at = lost_at.load(Ordering::Relaxed);
        if lost_at != NO_LOST {
            count(&stress.tally.lost);
        }
        stress.sections.lock().unwrap().push(Held {
            key,
            worker,
            start,
            end,
            lost_at: (lost_at != NO_LOST).then_some(lost_at),
        });
        if rng.u8(0..10) < 3 {
            count(&stress.tally.dropped_guards);
            drop(guard);
        } else {
            let release_limit = if rng.u8(0..10) < 2 {
                Duration::from_millis(rng.u64(0..=2))
            } else {
                Duration::from_secs(2)
            };
            let _ = tokio::time::timeout(release_limit, guard.release()).await;
        }
    }
}

impl AsSection for Held {
    fn section(&self) -> Section {
        Section {
            key: u32::try_from(self.key).unwrap_or(u32::MAX),
            owner: self.worker,
            fence: None,
            start_us: self.start,
            end_us: self.end,
            lost_us: self.lost_at,
        }
    }
}

/// Sections of one key that overlap while the earlier one's `lost()` had not fired by the
/// later one's start.
fn overlaps(sections: &[Held]) -> Vec<String> {
    history::sweep(sections)
        .overlaps
        .iter()
        .map(|o| {
            let (earlier, later) = (o.earlier, o.later);
            format!(
                "key {}: worker {} [{}..{}] lost at {:?} overlaps worker {} [{}..{}] (µs)",
                earlier.key,
                earlier.worker,
                earlier.start,
                earlier.end,
                earlier.lost_at,
                later.worker,
                later.start,
                later.end
            )
        })
        .collect()
}

/// Runs the stress workload: thread A drives a current-thread runtime, thread B a
/// multi-thread runtime (2 workers); they share ONE client (of `shared_url`), and thread B
/// also runs a second client (of `other_url`). Each runtime stays alive (driven) until both
/// are done, so no runtime ends under the other's holds.
fn run_stress(shared_url: String, other_url: String, holds: usize) {
    let stress = Arc::new(Stress {
        origin: Instant::now(),
        sections: Mutex::new(Vec::new()),
        tally: StressTally::default(),
        error_samples: Mutex::new(BTreeMap::new()),
    });
    let finished = Arc::new(AtomicUsize::new(0));
    let tasks = 4;
    // A: 4 tasks with the shared client; B: 4 with the shared client, 4 with the other.
    let per_task_a = holds / 2 / tasks;
    let per_task_b = holds / 4 / tasks;
    let (client_tx, client_rx) = std::sync::mpsc::channel::<LockClient>();
    let keep_driving = |finished: Arc<AtomicUsize>| async move {
        finished.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(120);
        while finished.load(Ordering::SeqCst) < 2 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };

    let thread_a = {
        let (stress, finished) = (stress.clone(), finished.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let client = client_at(&shared_url, Duration::from_secs(1)).await;
                client_tx.send(client.clone()).unwrap();
                let mut set = tokio::task::JoinSet::new();
                for t in 0..tasks {
                    set.spawn(stress_worker(client.clone(), stress.clone(), t, per_task_a));
                }
                while let Some(done) = set.join_next().await {
                    done.unwrap();
                }
                keep_driving(finished).await;
            });
        })
    };
    let thread_b = {
        let (stress, finished) = (stress.clone(), finished.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let shared = client_rx.recv().unwrap();
                let other = client_at(&other_url, Duration::from_secs(1)).await;
                let mut set = tokio::task::JoinSet::new();
                for t in 0..tasks {
                    set.spawn(stress_worker(
                        shared.clone(),
                        stress.clone(),
                        10 + t,
                        per_task_b,
                    ));
                    set.spawn(stress_worker(
                        other.clone(),
                        stress.clone(),
                        20 + t,
                        per_task_b,
                    ));
                }
                while let Some(done) = set.join_next().await {
                    done.unwrap();
                }
                keep_driving(finished).await;
            });
        })
    };
    thread_a.join().unwrap();
    thread_b.join().unwrap();

    let sections = stress.sections.lock().unwrap().clone();
    let bad = overlaps(&sections);
    let t = &stress.tally;
    let get = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    let summary = format!(
        "{} attempts, {} sections, {} overlaps without a fired lost(), {} lost, {} busy, \
         {} errors {:?}, {} cancelled acquires, {} cancelled bodies, {} dropped guards, \
         {} extends, {:?} elapsed",
        get(&t.attempts),
        sections.len(),
        bad.len(),
        get(&t.lost),
        get(&t.busy),
        get(&t.errors),
        stress.error_samples.lock().unwrap(),
        get(&t.cancelled_acquires),
        get(&t.cancelled_bodies),
        get(&t.dropped_guards),
        get(&t.extends),
        stress.origin.elapsed()
    );
    eprintln!("stress: {summary}");
    assert!(
        bad.is_empty(),
        "{summary}; first overlaps: {:?}",
        &bad[..bad.len().min(5)]
    );
    assert!(
        sections.len() >= holds / 4,
        "too few critical sections ran: {summary}"
    );
}

/// Stress: two runtimes (current-thread and multi-thread) share one client, a second client
/// contends, thousands of short holds with random extends, cancelled acquires and bodies,
/// and guards dropped unreleased. From one shared clock: no two sections of one key
/// overlap unless the earlier one's `lost()` fired at or before the later one's start (as
/// observed by the body's `select!`, so a correct engine must signal the loss before the key
/// can be taken, which it does when its expiry estimate is a lower bound of Redis's).
#[test]
fn stress_holds_with_extend_cancel_and_two_runtimes() {
    let server = RedisServer::start();
    run_stress(server.url(), server.url(), 2000);
}

/// The stress run with the shared client behind a slow, bursty network (3 ms each way,
/// flushed every 2 ms); the second client goes straight to Redis.
#[test]
fn stress_holds_with_extend_cancel_and_two_runtimes_through_a_slow_network() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    proxy.set_delay(Duration::from_millis(3));
    proxy.set_batching(Some(Duration::from_millis(2)));
    run_stress(proxy.url(), server.url(), 2000);
}
