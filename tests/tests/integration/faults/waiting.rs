//! Waiters under faults: a waiter without a confirmed subscription still sees releases, an
//! expired lock is taken soon after its expiry, transient errors are retried within the
//! budget, and the budget is a deadline even when Redis stops answering.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::{client_at, client_for};

use super::{SHORT, blocking, spawn_timed_waiter};

/// Every waiter of a key whose subscription was never confirmed re-checks on a short timer.
/// With an ACL user made the usual way (`+@all` but no channel rights, Redis 7's default
/// `resetchannels`), SUBSCRIBE fails with NOPERM. A second waiter of the same client must
/// not believe the key subscribed and sleep on the lease it last saw (20 s): the key is
/// released, taken by one waiter for 100 ms, released again, then left free for 1.5 s, and
/// the other waiter gets it in that window. (With channel rights granted, `&*`, the same
/// steps pass through announcements.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_a_confirmed_subscription_still_sees_releases() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let _: () = redis::cmd("ACL")
        // `resetchannels`: Redis before 7.0 opens every channel to a new user by default.
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            ">pw",
            "~*",
            "+@all",
            "resetchannels",
        ])
        .query_async(&mut raw)
        .await
        .unwrap();
    let url = format!("redis://locker:pw@127.0.0.1:{}/", server.port());

    // The user really has no channel rights: SUBSCRIBE is refused.
    let mut pubsub = redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(2), pubsub.subscribe("rlock:x"))
        .await
        .expect("SUBSCRIBE got no answer");
    let err = refused.expect_err("SUBSCRIBE must be refused for this user");
    assert!(
        err.to_string().to_ascii_uppercase().contains("NOPERM"),
        "expected NOPERM: {err}"
    );
    drop(pubsub);

    let locker = client_at(&url, SHORT).await;
    let holder = client_for(&server, SHORT).await;
    let held = holder
        .lock("acl:k")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();

    // Two waiters of the same client, both arriving while the key is held: the one holding
    // the (refused) subscription knows and re-checks on a short timer; the other is told
    // the key is subscribed. Each takes the lock, holds it 100 ms and releases it.
    let budget = Duration::from_secs(5);
    let waiter = |client: LockClient| {
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = client
                .lock("acl:k")
                .ttl(Duration::from_secs(20))
                .wait(budget)
                .acquire()
                .await;
            let waited = started.elapsed();
            let guard = guard.map_err(|e| (e, waited))?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.release().await.map_err(|e| (e, waited))?;
            Ok::<Duration, (LockError, Duration)>(waited)
        })
    };
    let mut a = waiter(locker.clone());
    let mut b = waiter(locker.clone());

    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let (first, second) = tokio::select! {
        done = &mut a => (done, b),
        done = &mut b => (done, a),
    };
    first
        .unwrap()
        .expect("one waiter (the one that re-checks on a timer) must get the lock");
    // The key is free now; after this window the holder takes it again for good.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let retaken = holder
        .lock("acl:k")
        .ttl(Duration::from_secs(20))
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let result = second.await.unwrap();
    assert!(
        result.is_ok(),
        "the other waiter slept through 1.5 s of a free lock (its client's subscription \
         was never confirmed) and gave up: {result:?}; {:?}",
        locker.metrics()
    );
    drop(retaken);
}

/// A waiter takes an expired lock soon after its expiry. A "crashed" holder (a raw
/// `SET key x PX 2000`; no release will come) leaves the waiters only their fallback timers,
/// which fire at the holder's expiry plus a small bounded jitter. Each of four keys must be
/// taken no later than its expiry + 250 ms (a jitter of up to 50 % of a 2 s lease would let
/// all four make it with a chance of about 0.4 %).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_an_expired_lock_soon_after_its_expiry() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let mut raw = server.raw().await;
    let keys: Vec<String> = (0..4).map(|i| format!("crashed:{i}")).collect();
    let mut expiries = Vec::new();
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("x")
            .arg("PX")
            .arg(2000)
            .query_async(&mut raw)
            .await
            .unwrap();
        let pttl: i64 = raw.pttl(key).await.unwrap();
        // Read after the reply: the latest the key can expire.
        expiries.push(Instant::now() + Duration::from_millis(u64::try_from(pttl).unwrap()));
    }
    let waiters: Vec<_> = keys
        .iter()
        .map(|key| {
            let (client, key) = (client.clone(), key.clone());
            tokio::spawn(async move {
                let guard = client
                    .lock(key.as_str())
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await;
                let at = Instant::now();
                (guard.map(drop), at)
            })
        })
        .collect();
    let mut late = Vec::new();
    for ((key, expiry), waiter) in keys.iter().zip(expiries).zip(waiters) {
        let (result, at) = waiter.await.unwrap();
        result.unwrap_or_else(|e| panic!("`{key}` never acquired: {e}"));
        let after = at.saturating_duration_since(expiry);
        eprintln!("`{key}` taken {after:?} after its expiry");
        if after > Duration::from_millis(250) {
            late.push(format!("`{key}` {after:?} late"));
        }
    }
    assert!(
        late.is_empty(),
        "waiters took expired locks more than 250 ms after the expiry: {late:?}"
    );
}

/// A waiter retries transient errors within its budget. It waits (15 s budget) for a key
/// held with a 20 s lease; Redis is restarted (the data, and so the key, is gone). The first
/// command on the reconnecting connection may fail; the waiter retries and gets the now
/// free lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_retries_transient_errors_within_its_budget() {
    let server = RedisServer::start();
    let holder = client_for(&server, SHORT).await;
    let waiter = client_for(&server, Duration::from_millis(500)).await;
    let held = holder
        .lock("restart:k")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let waiting = spawn_timed_waiter(&waiter, "restart:k", Duration::from_secs(15));
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocking(|| server.restart());
    let (result, waited) = tokio::time::timeout(Duration::from_secs(25), waiting)
        .await
        .expect("the waiter outlived its budget by far")
        .unwrap();
    assert!(
        result.is_ok(),
        "the waiter gave up after {waited:?} of its 15 s budget on a transient error: \
         {result:?}"
    );
    drop(held);
}

/// The wait budget is a deadline. A waiter (800 ms budget, 500 ms command timeout) waits for
/// a busy key; Redis then stops answering (paused). The call returns by its deadline (an
/// error is fine), within 800 ms + 250 ms, rather than sending one more attempt at the end
/// of its budget and waiting a whole command timeout for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_budget_is_a_deadline_even_when_redis_stops_answering() {
    let server = RedisServer::start();
    let holder = client_for(&server, SHORT).await;
    let waiter = client_for(&server, Duration::from_millis(500)).await;
    let _held = holder
        .lock("budget:k")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let budget = Duration::from_millis(800);
    let waiting = spawn_timed_waiter(&waiter, "budget:k", budget);
    // A `lock_all` of that key and a free one waits the same way.
    let all = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let started = std::time::Instant::now();
            let all = waiter
                .lock_all(["budget:a", "budget:k"])
                .wait(budget)
                .acquire();
            (all.await.map(drop), started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    blocking(|| server.pause());
    let outcome = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    let all = tokio::time::timeout(Duration::from_secs(10), all).await;
    server.resume();
    for (what, outcome) in [("a waiter", outcome), ("a lock_all", all)] {
        let (result, took) = outcome
            .unwrap_or_else(|_| panic!("{what} did not return within 10 s"))
            .unwrap();
        eprintln!("{what} returned {result:?} after {took:?}");
        assert!(
            took < budget + Duration::from_millis(250),
            "{what} with an {budget:?} budget returned only after {took:?} ({result:?})"
        );
    }
}
