//! The waiting protocol's invariants (WAITING.md), each against a real server and shown by
//! the fault that broke it: a waiter is out of the queue for at most one check in, whatever
//! took its entry (a hand-off it missed, a queue that was lost); its check ins are bounded in
//! rate whatever the holder does; a release hands the lock to a live waiter behind any number
//! of dead ones, and other subscribers cannot make a dead one look alive; a lock's companion
//! keys are its own; and a dead Redis is never reported as a busy lock.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::__private_0_1::script_calls::ScriptCalls;
use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::{queue_len, wait_listening, wait_queue_len, wait_then_release};
use rlock_tests::monitor::Monitor;
use rlock_tests::worker::Contend;
use rlock_tests::workers::{Running, one_waiting_section};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");
/// Generous: the workers below normally finish in seconds, on a loaded machine too.
const DEADLINE: Duration = Duration::from_secs(90);

/// The head waiter learns the holder's remaining lease from each of its check ins, not only
/// from the one that made the queue: behind a holder that renews past its first lease, it
/// checks in about once per renewed lease (at most once per check interval), not on the
/// pause's floor. (A waiter that kept the first deadline would, once it passed, check in
/// about 300 times a second for as long as the hold lasted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_waiter_checks_in_at_its_pace_behind_a_long_hold() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    // A 600 ms lease, renewed every 200 ms, held for about five of its leases.
    let guard = holder
        .lock("w:long")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let waiting = wait_then_release(&waiter, "w:long", Duration::from_secs(60));
    wait_queue_len(&server, "{w:long}:waiters", 1).await;
    let before = server.counts();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let scripts = server.counts().minus(&before).calls("evalsha");
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    // The holder's renewals (one per 200 ms) and the waiter's check ins (about one per
    // 400–666 ms): about 20 script calls. A machine too busy to keep its timers only makes
    // fewer.
    assert!(
        scripts <= 60,
        "{scripts} script calls in 3 s behind a renewing holder"
    );
}

/// A waiter stopped past the lease of a hand-off (SIGSTOP: a pause, a hung host) declines it
/// when it runs again; the hand-off used up its entry, so its next check in queues it again,
/// and it gets the lock within its 15 s budget while others keep contending, fair or not,
/// rather than believe it is still queued and starve until its budget runs out. Its lease is
/// 1 s, so its hand-off lease is too, and the stop (1.5 s) is shorter than the command
/// timeout: its connections live through it, and nothing but the protocol can bring it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_missed_its_hand_off_queues_again() {
    for fair in [false, true] {
        missed_hand_off(fair).await;
    }
}

async fn missed_hand_off(fair: bool) {
    let server = RedisServer::start();
    let url = server.url();
    let key = "w:missed";
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(key).acquire().await.unwrap();
    // What is checked is that the waiter is granted again; its 1 s lease, held right after
    // a SIGSTOP on a machine whose cores are busy, may be lost to scheduling before its
    // release, and that is recorded (`ride_outages`) instead of ending the worker.
    let section = Contend {
        ride_outages: true,
        ..one_waiting_section(&url, key, 1000, 15_000, fair)
    };
    let stalled = Running::spawn(WORKER, 1, &section);
    wait_queue_len(&server, "{w:missed}:waiters", 1).await;
    wait_listening(&server, key, 1).await;
    let contenders = [
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    ];
    stalled.signal(0, "STOP");
    // The release hands the lock to the stopped waiter, whose hand-off lease then ends.
    guard.release().await.unwrap();
    // Others contend all along, three tasks in each of two clients, so that the queue never
    // empties: each takes the lock for 20 ms, again and again.
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..6 {
        let client = contenders[task % 2].clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let request = client.lock(key).wait(Duration::from_secs(30));
                let request = if fair { request.fair() } else { request };
                let guard = request.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await.unwrap();
                grants += 1;
            }
            grants
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stalled.signal(0, "CONT");
    let resumed = std::time::Instant::now();
    // The worker retries an acquisition that gave up (`Busy`), and counts it.
    let report = tokio::task::spawn_blocking(move || stalled.finish(DEADLINE))
        .await
        .unwrap();
    let gave_up = report[0].busy;
    let took = resumed.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut grants = 0;
    for task in tasks {
        grants += task.await.unwrap();
    }
    eprintln!(
        "fair={fair}: the stalled waiter had its section {took:?} after it resumed, after \
         {gave_up} waits that ran out; the others had {grants} grants"
    );
    assert_eq!(
        gave_up, 0,
        "fair={fair}: the waiter that missed its hand-off starved for its whole budget while \
         the others had {grants} grants"
    );
}

/// The queue is lost (a Redis that blocked past the queue's lease, a failover, here deleted)
/// and a newcomer starts a new one at once: every waiter of the old queue stands in the new
/// one after its next check in, even though the newcomer's queue means no refresh of the
/// queue's expiry ever finds it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_a_lost_queue_stand_in_the_next_one() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock("w:lapsed").acquire().await.unwrap();
    let (a, b, c) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let budget = Duration::from_secs(60);
    let first = wait_then_release(&a, "w:lapsed", budget);
    let second = wait_then_release(&b, "w:lapsed", budget);
    let queue = "{w:lapsed}:waiters";
    wait_queue_len(&server, queue, 2).await;
    wait_listening(&server, "w:lapsed", 2).await;
    let _: () = server.raw().await.del(queue).await.unwrap();
    let newcomer = wait_then_release(&c, "w:lapsed", budget);
    wait_queue_len(&server, queue, 3).await;
    guard.release().await.unwrap();
    for waiter in [first, second, newcomer] {
        waiter.await.unwrap().unwrap();
    }
}

/// Keys Redis has expired since it started (`INFO stats`).
async fn expired_keys(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("expired_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Waiters served within a check interval never check in; their arrivals (a plain `RPUSHX`
/// once their client waits for the key) renew the queue's expiry, once per check interval
/// per client, so the queue never lapses while it is in use. (When only check ins renewed
/// it, it expired every 2 s under fast hand-offs, and each time its waiters waited a check
/// interval: the contended p99 went from 100 ms to 570 ms.) Nothing else here expires: the
/// count of keys Redis expired tells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_never_lapses() {
    let server = RedisServer::start();
    let before = expired_keys(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = LockClient::connect(&server.url()).await.unwrap();
        for _ in 0..4 {
            let (client, stop) = (client.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut grants = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let guard = client
                        .lock("w:busy")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                    grants += 1;
                }
                grants
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let mut grants = 0;
    for task in tasks {
        grants += task.await.unwrap();
    }
    let expired = expired_keys(&server).await - before;
    assert_eq!(
        expired, 0,
        "the queue expired {expired} times while in use ({grants} grants)"
    );
}

/// Dead waiters (their processes killed: Redis dropped their subscriptions) stand before a
/// live one, and a monitoring tool subscribes to every channel by pattern: the release skips
/// every dead entry and hands the lock to the live waiter at once, within a budget shorter
/// than one hand-off lease. (`PUBLISH`'s count, which includes pattern subscribers, made
/// each dead waiter hold the lock for its 2 s hand-off lease; and a release looked at 16
/// entries at most, then left the lock to the live waiter's next check in.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_waiter_behind_dead_ones_is_handed_the_lock_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let key = "w:dead";
    let queue = "{w:dead}:waiters";
    let mut monitor = server.redis_client().get_async_pubsub().await.unwrap();
    monitor.psubscribe("*").await.unwrap();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(key).acquire().await.unwrap();
    let dead = 20;
    let mut doomed = Running::spawn(
        WORKER,
        dead,
        &one_waiting_section(&url, key, 10_000, 60_000, false),
    );
    wait_queue_len(&server, queue, dead).await;
    wait_listening(&server, key, dead).await;
    let live = LockClient::connect(&url).await.unwrap();
    let waiting = wait_then_release(&live, key, Duration::from_secs(1));
    wait_queue_len(&server, queue, dead + 1).await;
    for i in 0..dead {
        doomed.kill(i);
    }
    wait_listening(&server, key, 1).await;
    guard.release().await.unwrap();
    waiting
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the dead waiters blocked the live one: {e}"));
    let killed: Vec<usize> = (0..dead).collect();
    drop(tokio::task::spawn_blocking(move || {
        doomed.finish_except(DEADLINE, &killed)
    }));
}

/// A lock taken without waiting is released with its token alone: such a key most often has
/// nobody queued, and each argument costs Redis a string on every call. When a waiter did
/// queue behind it, the release finds the queue, comes again in full and hands the lock on in
/// that second call, to a fenced waiter with its fence as to a plain one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_without_waiting_is_released_with_its_token_alone() {
    let server = RedisServer::start();
    let (key, queue) = ("w:bare", "{w:bare}:waiters");
    let mut raw = server.raw().await;
    let load = &ScriptCalls::lock(key, Duration::from_secs(10)).loads()[1];
    let release_sha: String = load.query_async(&mut raw).await.unwrap();
    let monitor = Monitor::start(&server).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();

    let guard = holder.lock(key).acquire().await.unwrap();
    let mut tokens = vec![guard.token().to_owned()];
    guard.release().await.unwrap();
    for fenced in [false, true] {
        let guard = holder.lock(key).acquire().await.unwrap();
        tokens.push(guard.token().to_owned());
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let mut lock = waiter.lock(key).wait(Duration::from_secs(30));
                if fenced {
                    lock = lock.fenced();
                }
                lock.acquire().await
            })
        };
        // Queued and listening: a release hands the lock only to a waiter it can tell.
        wait_queue_len(&server, queue, 1).await;
        wait_listening(&server, key, 1).await;
        guard.release().await.unwrap();
        let exists: bool = raw.exists(key).await.unwrap();
        assert!(exists, "the release's second call hands the lock on");
        let handed = waiting.await.unwrap().unwrap();
        assert_eq!(handed.fence().is_some(), fenced, "fenced: {fenced}");
        handed.release().await.unwrap();
    }

    // The holder's release calls, in order: (keys, arguments) of each.
    let calls: Vec<(usize, Vec<String>)> = monitor
        .finish(&server)
        .await
        .into_iter()
        .filter(|args| args.len() > 3 && args[1] == release_sha && args[3] == key)
        .filter_map(|args| {
            let keys: usize = args[2].parse().ok()?;
            let argv = args[3 + keys..].to_vec();
            tokens.contains(argv.first()?).then_some((keys, argv))
        })
        .collect();
    let bare = |n: usize| (2, vec![tokens[n].clone()]);
    let in_full = |n: usize| {
        (
            3,
            vec![
                tokens[n].clone(),
                "rlock:released:".into(),
                "PUBLISH".into(),
            ],
        )
    };
    assert_eq!(
        calls,
        [bare(0), bare(1), in_full(1), bare(2), in_full(2)],
        "nobody behind: the token alone; a waiter behind: again in full"
    );
}

/// `x` and `{x}` are two locks with two queues: a release of the one does not empty the
/// other's queue; a key that is some lock's companion (`{x}:waiters`) is refused as a lock;
/// and a foreign value where a queue would be does not break the lock's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locks_companion_keys_are_its_own() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let braced = client.lock("{x}").acquire().await.unwrap();
    let waiting = wait_then_release(&other, "{x}", Duration::from_secs(30));
    wait_queue_len(&server, "{x}::waiters", 1).await;
    // `x`'s release, with a waiter of `x` too, touches `x`'s queue alone.
    let plain = client.lock("x").acquire().await.unwrap();
    let plain_waiter = wait_then_release(&other, "x", Duration::from_secs(30));
    wait_queue_len(&server, "{x}:waiters", 1).await;
    plain.release().await.unwrap();
    plain_waiter.await.unwrap().unwrap();
    assert_eq!(
        queue_len(&server, "{x}::waiters").await,
        1,
        "`{{x}}`'s waiter"
    );
    braced.release().await.unwrap();
    waiting.await.unwrap().unwrap();

    let refused = client.lock("{x}:waiters").acquire().await.unwrap_err();
    assert!(
        matches!(refused, LockError::InvalidKey { .. }),
        "{refused:?}"
    );
    let mut raw = server.raw().await;
    let _: () = raw.set("{y}:waiters", "not a queue").await.unwrap();
    let guard = client.lock("y").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// With Redis killed, a waiting acquisition reports what went wrong (the backend), whatever
/// its budget: nobody holds the lock, so "busy" (HTTP 409, "try again") would be a lie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_not_a_busy_lock() {
    let server = RedisServer::start();
    let client = rlock_tests::locking::client_for(&server, Duration::from_millis(200)).await;
    server.kill();
    for budget in [0, 100, 300, 1000, 2500] {
        let error = client
            .lock("w:down")
            .wait(Duration::from_millis(budget))
            .acquire()
            .await
            .unwrap_err();
        assert!(
            error.is_backend() && !error.is_busy(),
            "wait {budget} ms: {error:?}"
        );
    }
}

/// How long the cancellation fuzz runs: 5 s in the suite; `RLOCK_FUZZ_SECS` sets it (a long
/// check is 20 runs of 20 s, all leaving nothing behind).
fn fuzz_duration() -> Duration {
    let secs = std::env::var("RLOCK_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    Duration::from_secs(secs)
}

/// Cancellation at random points of every step (waiting, the body, the release), by 24
/// tasks over 4 clients on 3 keys with 30 s leases: once every task has stopped, every lock
/// is released and every queue empty within a few seconds, not held for the rest of a
/// lease by a token nobody owns. (A cancelled check in still on its way on the caller's
/// connection can run after the withdrawal sent in the background on another: the
/// background withdrawal keeps trying until Redis has answered for a while.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_anywhere_leaves_no_orphan() {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(LockClient::connect(&server.url()).await.unwrap());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..24 {
        let (client, stop) = (clients[task % 4].clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::new();
            let mut cancelled = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("fuzz:{}", rng.u8(0..3));
                let mut request = client
                    .lock(key)
                    .wait(Duration::from_millis(rng.u64(0..300)));
                if rng.bool() {
                    request = request.fenced();
                }
                if rng.u8(0..4) == 0 {
                    request = request.fair();
                }
                let limit = Duration::from_millis(rng.u64(0..40));
                let Ok(acquired) = tokio::time::timeout(limit, request.acquire()).await else {
                    cancelled += 1;
                    continue;
                };
                let Ok(guard) = acquired else { continue };
                let body = tokio::time::sleep(Duration::from_millis(rng.u64(0..10)));
                let _ = tokio::time::timeout(Duration::from_millis(rng.u64(0..10)), body).await;
                match rng.u8(0..3) {
                    0 => drop(guard),
                    _ => {
                        let limit = Duration::from_millis(rng.u64(0..3));
                        if tokio::time::timeout(limit, guard.release()).await.is_err() {
                            cancelled += 1;
                        }
                    }
                }
            }
            cancelled
        }));
    }
    tokio::time::sleep(fuzz_duration()).await;
    stop.store(true, Ordering::Relaxed);
    let mut cancelled = 0;
    for task in tasks {
        cancelled += task.await.unwrap();
    }
    let mut raw = server.raw().await;
    let mut left: Vec<String> = Vec::new();
    for _ in 0..60 {
        left = redis::cmd("KEYS")
            .arg("*fuzz*")
            .query_async(&mut raw)
            .await
            .unwrap();
        // Fence records expire with their lease, by design.
        left.retain(|k| !k.ends_with(":fence"));
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut held = Vec::new();
    for key in &left {
        let ttl: i64 = raw.pttl(key).await.unwrap();
        held.push(format!("{key} ({ttl} ms left)"));
    }
    eprintln!("{cancelled} cancellations; left afterwards: {held:?}");
    assert!(left.is_empty(), "left behind: {held:?}");
}

/// An announcement is a grant: the waiter takes the lock on hearing it, without a command.
/// And Redis sends every announcement on to the master's replicas, whose subscribers hear it
/// too. So a release must never announce to a waiter it does not grant: here the waiter's
/// feed is left on a former master, now a replica (the roles switched under it), the new
/// master counts nobody on its channel and skips its entry, and the waiter must not come
/// away believing it holds the lock. (Announcing first and reading the count from the
/// announcement, which saves a command per hand-off, handed it a lock nobody had given it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_heard_through_a_replica_is_never_told_it_holds_the_lock() {
    let key = "w:moved";
    let a = RedisServer::start();
    let b = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &a.port().to_string()]);
    b.wait_linked().await;
    let holder = LockClient::connect(&a.url()).await.unwrap();
    let _held = holder
        .lock(key)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = LockClient::connect(&a.url()).await.unwrap();
    // Its budget outlasts the role switch below, whose replication sync may take seconds on
    // a busy machine: a waiter that gave up before it would leave nothing to check.
    let waiting = tokio::spawn(async move {
        waiter
            .lock(key)
            .wait(Duration::from_secs(15))
            .acquire()
            .await
            .map(|guard| guard.token().to_owned())
    });
    wait_queue_len(&a, "{w:moved}:waiters", 1).await;
    wait_listening(&a, key, 1).await;
    wait_queue_len(&b, "{w:moved}:waiters", 1).await;

    // B becomes the master and A its replica; the waiter's subscription stays on A.
    let mut raw_b = b.raw().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut raw_b)
        .await
        .unwrap();
    let mut raw_a = a.raw().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(b.port())
        .query_async(&mut raw_a)
        .await
        .unwrap();
    a.wait_linked().await;
    wait_listening(&a, key, 1).await;

    // The holder's lock, released on the new master: its queue's only waiter does not
    // listen there, so nobody is granted it.
    let admin = LockClient::connect(&b.url()).await.unwrap();
    assert!(admin.force_unlock(key).await.unwrap());
    let holder_now: Option<String> = raw_b.get(key).await.unwrap();
    match waiting.await.unwrap() {
        Ok(token) => panic!(
            "the waiter believes it holds `{key}` (token {token}); the master says {holder_now:?}"
        ),
        Err(e) => eprintln!("the waiter was not granted the lock: {e}"),
    }
}
