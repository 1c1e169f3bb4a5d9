//! Waiting in the lock's queue in Redis: a release hands the lock to the first live waiter and
//! names it, so one announcement wakes one waiter across all instances; fair mode grants in
//! arrival order across processes; a waiter that dies or gives up stops blocking the queue;
//! and no wake-up is lost when announcements cannot arrive.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use rlock_runtime::{LockClient, LockError};
use rlock_tests::history::Section;
use rlock_tests::locking::{wait_listening, wait_queue_len, wait_then_release};
use rlock_tests::worker::Contend;
use rlock_tests::workers::{Running, one_waiting_section};
use rlock_tests::{Counts, RedisServer};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");
/// Generous: each run below normally takes a second or two.
const DEADLINE: Duration = Duration::from_secs(90);
/// A waiter whose process died is skipped at once (Redis dropped its client's subscription
/// with its connection): the next waiter's budget is half a handoff lease, too short to wait
/// out a lock handed to the dead one.
const DEAD_WAITER_BOUND: Duration = Duration::from_secs(1);
/// How long a waiter whose process hangs (still connected) can block the queue at most
/// (documented on `LockRequest::fair`): a handoff lease (2 s), one check interval, slack.
const HUNG_WAITER_BOUND: Duration = Duration::from_secs(4);

/// The commands a lock spends in Redis, Lua-internal ones included (not connection set-up,
/// subscriptions or health checks).
const LOCK_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "set",
    "get",
    "del",
    "pttl",
    "pexpire",
    "time",
    "exists",
    "publish",
    "rpush",
    "rpushx",
    "rpop",
    "lpop",
    "lrem",
    "lpos",
    "lindex",
    "lpush",
    "pubsub|numsub",
];

fn lock_commands(counts: &Counts) -> u64 {
    LOCK_COMMANDS.iter().map(|c| counts.calls(c)).sum()
}

/// The queue of the lock `key` (a key without braces).
fn queue_of(key: &str) -> String {
    format!("{{{key}}}:waiters")
}

/// Waits (bounded) until `key`'s queue holds `n` entries.
async fn wait_queued(server: &RedisServer, key: &str, n: usize) {
    wait_queue_len(server, &queue_of(key), n).await;
}

/// `processes` workers, one task each, take `key` `iterations` times in turn, holding it 3 ms;
/// returns what that cost in Redis.
fn contend(server: &RedisServer, key: &str, processes: usize, iterations: usize) -> Counts {
    let before = server.counts();
    let args = Contend {
        iterations,
        hold_ms: 3,
        ..Contend::new(&server.url(), key, 10_000, 30_000)
    };
    Running::spawn(WORKER, processes, &args).finish(DEADLINE);
    server.counts().minus(&before)
}

/// A release names one waiter, and that waiter's client takes the lock without a command:
/// per acquisition one release script and one arrival (a plain `RPUSHX` once the client
/// waits for the key), whatever the number of processes. (Waking the first waiter of every
/// client instead would cost one losing attempt per other waiting process.)
#[test]
fn a_release_wakes_one_waiter_across_eight_processes() {
    let server = RedisServer::start();
    let mut per_acquisition = Vec::new();
    for processes in [2, 8] {
        let iterations = 25;
        let acquisitions = (processes * iterations) as u64;
        let counts = contend(
            &server,
            &format!("q:hot:{processes}"),
            processes,
            iterations,
        );
        let scripts = counts.calls("evalsha") + counts.calls("eval");
        let commands = lock_commands(&counts) as f64 / acquisitions as f64;
        eprintln!(
            "{processes} processes: {scripts} script calls and {commands:.1} commands per \
             acquisition over {acquisitions} acquisitions ({counts:?})"
        );
        // A release script per acquisition, and a few arrivals and checks-in (waking every
        // process's waiter would add up to `processes - 1` losing attempts per release; an
        // arrival through the script, one more per acquisition).
        assert!(
            processes == 2 || scripts as f64 <= 1.3 * acquisitions as f64,
            "{processes} processes: {scripts} script calls for {acquisitions} acquisitions"
        );
        assert!(counts.calls("publish") <= acquisitions, "{counts:?}");
        // Inside Redis, with several waiting: a release with its handoff (6 commands: the
        // script, `GET`, `LPOP`, `PUBSUB NUMSUB`, `PUBLISH`, `SET`), an arrival (`RPUSHX`),
        // the fence (3), and now and then a check in. (With two processes every handoff
        // empties the queue, and each arrival starts it again through the script.) The
        // queue with per-client marks took 13, the sorted set with entry keys about 17.
        assert!(
            processes == 2 || commands <= 10.5,
            "{processes} processes: {commands:.1} commands per acquisition"
        );
        per_acquisition.push(commands);
    }
    let (two, eight) = (per_acquisition[0], per_acquisition[1]);
    assert!(
        eight <= two * 1.25,
        "commands per acquisition grew with the processes: {two:.1} with 2, {eight:.1} with 8"
    );
}

/// In fair mode six processes, queued one after the other while the lock is held, are granted
/// it in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_granted_in_arrival_order_across_processes() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder
        .lock("q:fifo")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let args = Contend {
        hold_ms: 5,
        ..one_waiting_section(&url, "q:fifo", 10_000, 60_000, true)
    };
    let mut running = Running::spawn(WORKER, 0, &args);
    for i in 0..6 {
        running.add(&args);
        wait_queued(&server, "q:fifo", i + 1).await;
    }
    guard.release().await.unwrap();
    let reports = tokio::task::spawn_blocking(move || running.finish(DEADLINE))
        .await
        .unwrap();
    let mut sections: Vec<Section> = reports.into_iter().flat_map(|r| r.sections).collect();
    sections.sort_by_key(|s| s.start_us);
    let order: Vec<usize> = sections.iter().map(|s| s.owner).collect();
    assert_eq!(order, [0, 1, 2, 3, 4, 5], "granted out of arrival order");
}

/// A waiter process is killed (SIGKILL) while first in the queue, with another waiter behind
/// it: the release skips the dead one and hands the lock to the second at once, in both
/// modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_head_waiter_is_skipped() {
    head_waiter_fails(false).await;
}

/// A waiter process is stopped (SIGSTOP: a pause, a hung host) while first in the queue: it
/// still listens, so it is handed the lock, and blocks the queue only until its handoff lease
/// ends; the next waiter has the lock within the documented bound, in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_head_waiter_blocks_at_most_a_handoff_lease() {
    head_waiter_fails(true).await;
}

async fn head_waiter_fails(stopped: bool) {
    let server = RedisServer::start();
    let url = server.url();
    let bound = if stopped {
        HUNG_WAITER_BOUND
    } else {
        DEAD_WAITER_BOUND
    };
    for fair in [true, false] {
        let key = format!("q:dead:{fair}");
        let holder = LockClient::connect(&url).await.unwrap();
        let guard = holder.lock(key.as_str()).acquire().await.unwrap();
        let args = one_waiting_section(&url, &key, 10_000, 60_000, fair);
        let mut doomed = Running::spawn(WORKER, 1, &args);
        wait_queued(&server, &key, 1).await;
        wait_listening(&server, &key, 1).await;

        let next = LockClient::connect(&url).await.unwrap();
        let waiting = {
            let key = key.clone();
            tokio::spawn(async move {
                let request = next.lock(key.as_str()).wait(bound);
                let request = if fair { request.fair() } else { request };
                let guard = request.acquire().await?;
                guard.release().await
            })
        };
        wait_queued(&server, &key, 2).await;
        if stopped {
            doomed.signal(0, "STOP");
        } else {
            doomed.kill(0);
        }
        let released = Instant::now();
        guard.release().await.unwrap();
        let taken = waiting.await.unwrap();
        eprintln!(
            "fair={fair}: the next waiter had the lock {:?} after the release",
            released.elapsed()
        );
        taken.unwrap_or_else(|e| panic!("fair={fair}: the failed waiter blocked the queue: {e}"));
        if stopped {
            doomed.signal(0, "CONT");
            doomed.kill(0);
        }
        doomed.finish_except(DEADLINE, &[0]);
    }
}

/// A waiter that gives up (cancelled) leaves the queue at once: the next release goes to the
/// waiter behind it, not to the one that left (which would hold the lock unseen until its
/// handoff lease ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue_at_once() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = client.lock("q:gone").acquire().await.unwrap();
    let first = wait_then_release(&client, "q:gone", Duration::from_secs(30));
    wait_queued(&server, "q:gone", 1).await;
    let second = wait_then_release(&client, "q:gone", Duration::from_millis(1500));
    wait_queued(&server, "q:gone", 2).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    wait_queued(&server, "q:gone", 1).await;
    guard.release().await.unwrap();
    second.await.unwrap().unwrap();
}

/// A key with a hash tag keeps its queue beside it (`shop:{7}::waiters`, not wrapped again):
/// the release must be given this one. Right
/// after the release the lock is the waiter's, handed on in the same step, and the queue is
/// empty (a release that looked in the wrong queue would have deleted the lock instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_hash_tag_is_handed_on_like_any_other() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = LockClient::connect(&server.url()).await.unwrap();
    let (key, queue) = ("shop:{7}", "shop:{7}::waiters");
    let guard = holder.lock(key).acquire().await.unwrap();
    let (done, release) = tokio::sync::oneshot::channel::<()>();
    let waiter = tokio::spawn(async move {
        let guard = waiting
            .lock(key)
            .wait(Duration::from_secs(30))
            .acquire()
            .await?;
        let _ = release.await;
        guard.release().await
    });
    let mut raw = server.raw().await;
    for _ in 0..500 {
        if raw.llen::<_, usize>(queue).await.unwrap() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        raw.llen::<_, usize>(queue).await.unwrap(),
        1,
        "never queued"
    );
    // A waiter whose client is not heard yet is skipped by a release (see queue.lua).
    wait_listening(&server, key, 1).await;
    guard.release().await.unwrap();
    let owner: Option<String> = raw.get(key).await.unwrap();
    assert!(
        owner.is_some(),
        "the release deleted the lock instead of handing it on"
    );
    assert_eq!(raw.llen::<_, usize>(queue).await.unwrap(), 0);
    let _ = done.send(());
    waiter.await.unwrap().unwrap();
}

/// The release feed's connection is killed before every release, and an ACL user without
/// channel rights cannot hear announcements at all: every waiter still gets the lock, from
/// its own checks in (a handed lock is found there), within its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wake_up_is_lost_without_announcements() {
    let server = RedisServer::start();
    let deaf_url = server.user_without_channel_rights("deaf").await;
    let clients = [
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&deaf_url).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    ];
    let holder = clients[0].lock("q:quiet").acquire().await.unwrap();
    let waiters: Vec<_> = (0..6)
        .map(|i| {
            let client = clients[i % 3].clone();
            tokio::spawn(async move {
                let guard = client
                    .lock("q:quiet")
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await?;
                Ok::<_, LockError>(())
            })
        })
        .collect();
    wait_queued(&server, "q:quiet", 6).await;
    // Kills the subscribing connections now and every 15 ms while the handoffs go on.
    let killer = {
        let mut raw = server.raw().await;
        tokio::spawn(async move {
            for _ in 0..200 {
                let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
                    .arg(&["KILL", "TYPE", "pubsub"][..])
                    .query_async(&mut raw)
                    .await;
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        })
    };
    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
    killer.abort();
}

/// The lock's queue is gone (here deleted, as a Redis that lost it would have it): the
/// waiter finds out when its next check in refreshes the queue, and stands in it again, so
/// the next release can hand it the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_entry_was_lost_queues_again() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock("q:lost").acquire().await.unwrap();
    let waiting = wait_then_release(&client, "q:lost", Duration::from_secs(30));
    wait_queued(&server, "q:lost", 1).await;
    wait_listening(&server, "q:lost", 1).await;
    let mut raw = server.raw().await;
    let keys: Vec<String> = raw.keys("{q:lost}:waiters*").await.unwrap();
    assert_eq!(keys, ["{q:lost}:waiters"], "the queue, and no other key");
    let _: () = raw.del(&keys).await.unwrap();
    wait_queued(&server, "q:lost", 1).await;
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap();
}

/// The release feed's health `PING`s, one a second, are answered on a subscribed connection
/// (`["pong", ""]` in RESP2): a waiter that waits for seconds keeps its one subscription, and
/// its checks in are its own (a feed that reconnected would subscribe again and make every
/// waiter look again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_keeps_one_subscription() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock("q:long").acquire().await.unwrap();
    let before = server.counts();
    let waiting = wait_then_release(&waiter, "q:long", Duration::from_secs(30));
    wait_queued(&server, "q:long", 1).await;
    let pinged = |counts: &Counts| counts.minus(&before).calls("ping");
    for _ in 0..100 {
        if pinged(&server.counts()) >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    let counts = server.counts().minus(&before);
    assert!(counts.calls("ping") >= 3, "{counts:?}");
    assert_eq!(
        counts.calls("subscribe"),
        1,
        "the feed reconnected: {counts:?}"
    );
}
