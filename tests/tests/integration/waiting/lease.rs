//! Lease management against a real `redis-server`: the watchdog keeps long bodies safe, a
//! lost lease aborts the body, waiters are woken by release announcements rather than
//! polling, and a failed or cancelled body frees its lock at once.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use rlock_runtime::{LockClient, LockError, LockOptions};
use rlock_tests::RedisServer;
use rlock_tests::locking::{client_for, lock_and_release, queued_and_listening, spawn_contender};

use rlock_tests::child::{self, LineChild, start_holder};
use rlock_tests::protocol::{Command, Line, Outcome};
use rlock_tests::worker::{Body, OnLost};

const SHORT: Duration = Duration::from_millis(300);
const WORKER: &str = env!("CARGO_BIN_EXE_worker");

/// A `#[distributed_lock]` body running in its own process (a `body` worker), once it has
/// started.
fn start_body(url: &str, id: u64, body_ms: u64, renew: bool, on_lost: OnLost) -> LineChild {
    let body = Body {
        redis: url.to_owned(),
        id,
        body_ms,
        renew,
        on_lost,
    };
    child::start_body(WORKER, &body)
}

/// What a body worker writes from now to its `RESULT`.
fn rest(body: &mut LineChild) -> Vec<Line> {
    body.lines_until(Line::is_result)
}

const FINISHED_OK: [Line; 2] = [Line::Finished, Line::Result(Outcome::Ok)];
const LOST: [Line; 1] = [Line::Result(Outcome::Lost)];

/// Tries to take `key` every 100 ms for `span`; returns how many tries succeeded.
async fn steal_attempts(client: &LockClient, key: &str, span: Duration) -> usize {
    let until = Instant::now() + span;
    let mut stolen = 0;
    while Instant::now() < until {
        if let Ok(guard) = client
            .lock(key)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
        {
            stolen += 1;
            std::mem::forget(guard);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stolen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_a_long_body_exclusive() {
    let server = RedisServer::start();
    let other = client_for(&server, SHORT).await;

    // ttl 1 s, body 3.5 s, renewal on: nobody else gets in during the body.
    let mut body = start_body(&server.url(), 1, 3500, true, OnLost::Abort);
    assert_eq!(
        steal_attempts(&other, "job:1", Duration::from_millis(3000)).await,
        0
    );
    assert_eq!(rest(&mut body), FINISHED_OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_renewal_the_lease_ends_and_the_late_release_reports_it() {
    let server = RedisServer::start();
    let other = client_for(&server, SHORT).await;

    // ttl 1 s, renewal off, work of ~3.5 s: another process gets in after about 1 s, and
    // the first holder's release reports the loss and deletes nothing.
    let (mut holder, _) = start_holder(WORKER, &server.url(), "job:2", 1000);
    assert_eq!(
        steal_attempts(&other, "job:2", Duration::from_millis(3500)).await,
        1
    );
    assert_eq!(
        holder.ask(Command::Release),
        Some(Line::Released(Outcome::Lost))
    );
    let mut raw = server.raw().await;
    let exists: bool = raw.exists("job:2").await.unwrap();
    assert!(exists, "the late release deleted the new holder's lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_lease_aborts_the_body_or_lets_it_continue_as_asked() {
    let server = RedisServer::start();

    // `abort` (the default): the body is dropped when its 1 s lease ends.
    let mut aborted = start_body(&server.url(), 20, 3000, false, OnLost::Abort);
    assert_eq!(rest(&mut aborted), LOST);

    // `continue`: the body runs to its end and its result stands.
    let mut continued = start_body(&server.url(), 21, 1500, false, OnLost::Continue);
    assert_eq!(rest(&mut continued), FINISHED_OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_aborted_and_deletes_nothing() {
    let server = RedisServer::start();
    let mut body = start_body(&server.url(), 3, 10_000, true, OnLost::Abort);

    // The holder's process stops past its lease (a GC pause, a VM migration).
    body.signal("-STOP");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let other = client_for(&server, SHORT).await;
    let guard = other
        .lock("job:3")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();

    body.signal("-CONT");
    // The body never reaches its end: it is dropped when the loss is noticed.
    assert_eq!(rest(&mut body), LOST);
    let mut raw = server.raw().await;
    let stored: String = raw.get("job:3").await.unwrap();
    assert_eq!(
        stored,
        guard.token(),
        "the aborted holder deleted the new lock"
    );
    guard.release().await.unwrap();
}

/// A holder stopped past its lease while its body's own timer comes due: on resume the loss
/// wins, before the watchdog has run, and the body takes no further step. (Found by the soak
/// run: the body finished its wait and went on as if it still held the lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_lease_takes_no_further_step_on_resume() {
    let server = RedisServer::start();
    // ttl 1 s, a body that waits 1.2 s and then prints FINISHED.
    let mut body = start_body(&server.url(), 4, 1200, true, OnLost::Abort);
    body.signal("-STOP");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    body.signal("-CONT");
    assert_eq!(rest(&mut body), LOST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_while_held_fires_lost_and_restart_needs_no_new_client() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let guard = client
        .lock("held:1")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();

    server.kill();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() must fire once the lease must have expired");
    assert!(client.metrics().lost >= 1);
    assert!(client.metrics().renew_failures >= 1);

    server.restart();
    let mut last = None;
    for _ in 0..50 {
        match client.lock("held:2").acquire().await {
            Ok(g) => {
                g.release().await.unwrap();
                drop(guard);
                return;
            }
            Err(e) => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("no lock after the restart: {last:?}");
}

/// Round trips the lock made: script calls and subscription changes. (Commands run inside a
/// script are counted by Redis too, but they cost no round trip.)
fn round_trips(counts: &rlock_tests::Counts) -> u64 {
    ["evalsha", "eval", "script|load", "subscribe", "unsubscribe"]
        .iter()
        .map(|c| counts.calls(c))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_turn_by_announcements_not_polling() {
    let server = RedisServer::start();
    // A command limit that a busy machine does not reach: a call cut short is retried, and
    // its round trips would be load's, not the protocol's.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client_for(&server, Duration::from_secs(5)).await);
    }
    clients[0]
        .lock("warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let holder = clients[0]
        .lock("hot")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();

    // Arrival: every waiter tries once, queues, and its client subscribes to the key. Until
    // its client's subscription is confirmed a waiter re-checks every 50 ms, and once it is
    // it looks once more (a release just before would have gone unheard): on a busy machine
    // a slow confirmation costs a few such looks, which the arrival allows.
    let arrived = Instant::now();
    let (waiters, arrival) = server
        .commands_during(async {
            // A hold long enough that a waiter polling every few tens of ms would show.
            let waiters: Vec<_> = (0..8)
                .map(|i| {
                    spawn_contender(
                        clients[i % 4].clone(),
                        "hot",
                        Duration::from_secs(20),
                        Duration::from_millis(100),
                    )
                })
                .collect();
            queued_and_listening(&server, "hot", 8, 4).await;
            waiters
        })
        .await;
    let unconfirmed_looks = u64::try_from(arrived.elapsed().as_millis() / 50).unwrap_or(u64::MAX);
    assert!(
        round_trips(&arrival) <= (8 * 3 + 4) + unconfirmed_looks.saturating_mul(8),
        "arrival, {:?}: {arrival:?}",
        arrived.elapsed()
    );
    // Then, every subscription confirmed, nobody polls: a queued waiter checks in every
    // 666 ms (WAITING.md), so a window slowed by a busy machine may count one check in per
    // waiter per such period; a waiter polling every few tens of ms would still show. The
    // server lists a subscription before its client has read the confirmation, and until
    // then that client's waiters look every 50 ms: on a busy machine that takes a while, so
    // the window starts after a stretch of 150 ms without a call (or after 6 s of looking
    // for one, when a waiter that polls for ever fails the window as before).
    for _ in 0..40 {
        let ((), stretch) = server
            .commands_during(tokio::time::sleep(Duration::from_millis(150)))
            .await;
        if round_trips(&stretch) == 0 {
            break;
        }
    }
    let quiet = Instant::now();
    let ((), waiting) = server
        .commands_during(tokio::time::sleep(Duration::from_millis(300)))
        .await;
    let periods = u64::try_from(quiet.elapsed().as_millis() / 666).unwrap_or(u64::MAX);
    assert!(
        round_trips(&waiting) <= (periods + 1).saturating_mul(8),
        "waiting, {:?}: {waiting:?}",
        quiet.elapsed()
    );

    // Handoffs: the first release, then each waiter in turn.
    let (served, handoffs) = server
        .commands_during(async {
            holder.release().await.unwrap();
            let mut served = 0;
            for w in waiters {
                w.await.unwrap().unwrap();
                served += 1;
            }
            served
        })
        .await;
    assert_eq!(served, 8);

    // Per handoff: one release, one winning attempt, at most one losing attempt per other
    // client that waits. The leases are 10 s, so no timer fired either.
    let per_handoff = round_trips(&handoffs) as f64 / 8.0;
    eprintln!("round trips per handoff: {per_handoff:.2} ({handoffs:?})");
    assert!(
        per_handoff <= 6.0,
        "{per_handoff:.2} round trips per handoff: {handoffs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_are_renewed_in_batches() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .url(server.url())
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let ttl = Duration::from_secs(3);
    let mut acquiring = tokio::task::JoinSet::new();
    for i in 0..10_000 {
        let client = client.clone();
        acquiring.spawn(async move { client.lock(format!("bulk:{i}")).ttl(ttl).acquire().await });
    }
    let mut guards = Vec::new();
    while let Some(g) = acquiring.join_next().await {
        guards.push(g.unwrap().unwrap());
    }

    // Four periods of ttl/3 under observation.
    let window = ttl * 4 / 3;
    let renewed_before = client.metrics().renewed;
    let (_, counts) = server.commands_during(tokio::time::sleep(window)).await;
    let renewed = client.metrics().renewed - renewed_before;
    tokio::time::sleep(ttl).await;

    let lost = guards.iter().filter(|g| g.is_lost()).count();
    assert_eq!(lost, 0, "{:?} {counts:?}", client.metrics());
    let mut raw = server.raw().await;
    let keys: usize = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert!(keys >= 10_000, "only {keys} keys survived");
    let periods = 4;
    let calls = round_trips(&counts);
    eprintln!("renewal round trips in {periods} periods: {calls} ({counts:?})");
    // At most one call per 200 held keys per period (the watchdog's batches are larger,
    // and a round's last one takes what is left).
    assert!(
        calls <= periods * 10_000 / 200,
        "{calls} renewal calls in {periods} periods: {counts:?}"
    );
    assert!(client.metrics().renewed >= 10_000);
    // What Redis runs per renewed key: its token read, and its expiry lengthened in one
    // command where PEXPIRE takes GT (7.0 and later); before, read first. (The holder
    // card's keeper lengthens its card once a pass: a few more at most.)
    let per_key = if server.version().redis_at_least(7, 0) {
        2
    } else {
        3
    };
    let commands = ["get", "pttl", "pexpire"]
        .iter()
        .map(|c| counts.calls(c))
        .sum::<u64>();
    eprintln!("{commands} commands for {renewed} renewed keys");
    assert!(renewed > 0, "nothing renewed in the window: {counts:?}");
    assert!(
        commands <= per_key * renewed + 10,
        "{commands} commands for {renewed} renewed keys: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_or_cancelled_bodies_release_at_once() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let other = client_for(&server, SHORT).await;
    let long = LockOptions::new().ttl(Duration::from_secs(60));

    let panicking = {
        let client = client.clone();
        let long = long.clone();
        tokio::spawn(async move {
            client
                .with_lock("fragile:1", long, async {
                    panic!("the body failed");
                })
                .await
        })
    };
    assert!(panicking.await.unwrap_err().is_panic());
    // Well before the 60 s lease: within a 5 s wait budget.
    lock_and_release(&other, "fragile:1", Duration::from_secs(5)).await;

    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        client.with_lock(
            "fragile:2",
            long,
            tokio::time::sleep(Duration::from_secs(30)),
        ),
    )
    .await;
    assert!(cancelled.is_err());
    lock_and_release(&other, "fragile:2", Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_ends_the_hold_even_with_renewal() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    // The body would run a minute; the 900 ms cap must end it, long before the outer bound.
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        client.with_lock(
            "capped:1",
            LockOptions::new()
                .ttl(Duration::from_millis(300))
                .max_hold(Duration::from_millis(900)),
            tokio::time::sleep(Duration::from_secs(60)),
        ),
    )
    .await
    .expect("max_hold did not end the hold");
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    let other = client_for(&server, SHORT).await;
    lock_and_release(&other, "capped:1", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_no_subscription_behind() {
    let server = RedisServer::start();
    let holder = client_for(&server, SHORT).await;
    let waiter = client_for(&server, SHORT).await;
    let _held = holder.lock("busy:1").acquire().await.unwrap();

    let subscribers = || async {
        // The client's own channel for the key (the key's, then `:` and the client).
        server
            .channels("rlock:released:busy:1:*", false)
            .await
            .len()
    };

    // While it waits, its client is subscribed to the key's release channel.
    // (A clone: the client itself stays alive, so its feed connection stays open.)
    let waiting_client = waiter.clone();
    let waiting = tokio::spawn(async move {
        waiting_client
            .lock("busy:1")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    let mut seen = 0;
    for _ in 0..50 {
        seen = subscribers().await;
        if seen == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, 1, "the waiter never subscribed");

    // Cancelled (the caller's request was dropped): the subscription goes with it.
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    for _ in 0..50 {
        seen = subscribers().await;
        if seen == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, 0, "a cancelled waiter left its subscription behind");
    drop(waiter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter_per_client_not_all() {
    let server = RedisServer::start();
    let a = client_for(&server, SHORT).await;
    let b = client_for(&server, SHORT).await;
    lock_and_release(&a, "warm", Duration::ZERO).await;
    let holder = a
        .lock("herd")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();

    let waiters: Vec<_> = (0..16)
        .map(|i| {
            let client = if i % 2 == 0 { a.clone() } else { b.clone() };
            spawn_contender(
                client,
                "herd",
                Duration::from_secs(30),
                Duration::from_millis(10),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (_, handoffs) = server
        .commands_during(async {
            holder.release().await.unwrap();
            for w in waiters {
                w.await.unwrap().unwrap();
            }
        })
        .await;
    // The script calls PTTL only when it finds the lock busy: each is a losing attempt. One
    // waiter per client tries per release, so at most one loses per release; waking every
    // waiter would cost about 15 + 14 + … losing attempts.
    let losing = handoffs.calls("pttl");
    assert!(
        losing <= 16 + 4,
        "{losing} losing attempts for 16 handoffs: {handoffs:?}"
    );
}
