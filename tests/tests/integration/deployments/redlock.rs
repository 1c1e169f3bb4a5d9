//! Redlock over independent masters, against real `redis-server` processes: the same
//! semantics as one Redis, a majority decides, a minority of dead or paused masters changes
//! nothing, a dead majority gives `QuorumNotReached` in bounded time, fencing is refused.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockError, LockOptions};
use rlock_tests::RedisServer;
use rlock_tests::deploy::redlock_url;
use rlock_tests::locking::{client_at, handoff, stored};

const TIMEOUT: Duration = Duration::from_millis(300);

async fn redlock_client(masters: &[RedisServer]) -> LockClient {
    client_at(&redlock_url(masters), TIMEOUT).await
}

/// How many masters hold `key`.
async fn holding(masters: &[RedisServer], key: &str) -> usize {
    let mut n = 0;
    for m in masters {
        if m.pid().is_none() {
            continue;
        }
        n += usize::from(stored(m, key).await.is_some());
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semantics_of_one_redis_hold_on_redlock() {
    let masters = RedisServer::start_many(3);
    let a = redlock_client(&masters).await;
    let b = redlock_client(&masters).await;

    // Acquire on every master, busy for another client, release everywhere.
    let guard = a
        .lock("order:1")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert_eq!(holding(&masters, "order:1").await, 3);
    assert!(b.lock("order:1").acquire().await.unwrap_err().is_busy());
    guard.extend(Duration::from_secs(20)).await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(holding(&masters, "order:1").await, 0);

    // Reentrancy within a body costs nothing and keeps the hold.
    let inner = a
        .with_lock("order:2", LockOptions::new(), async {
            let again = a.lock("order:2").acquire().await.unwrap();
            assert!(again.is_reentrant());
            again.release().await.unwrap();
            holding(&masters, "order:2").await
        })
        .await
        .unwrap();
    assert_eq!(inner, 3);

    // A waiter is woken by the release, from any master's announcement.
    let held = a
        .lock("order:3")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    handoff(held, &b, Duration::from_secs(10)).await;

    // Without renewal the lease ends, lost() fires, and the late release reports it.
    let short = a
        .lock("order:4")
        .ttl(Duration::from_millis(200))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), short.lost())
        .await
        .unwrap();
    // (lost() fires a margin before the masters expire the key.)
    let next = b
        .lock("order:4")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    assert!(short.release().await.unwrap_err().is_lost());
    next.release().await.unwrap();

    // Fencing tokens are refused, with the reason.
    let fenced = a.lock("order:5").fenced().acquire().await.unwrap_err();
    assert!(
        matches!(&fenced, LockError::InvalidConfig(why) if why.contains("not safe on Redlock")),
        "{fenced}"
    );

    // So is fair waiting: the masters keep no common queue.
    let fair = a
        .lock("order:6")
        .wait(Duration::from_secs(1))
        .fair()
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&fair, LockError::InvalidConfig(why) if why.contains("no common queue")),
        "{fair}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_on_a_majority_while_a_master_is_down_or_paused() {
    let masters = RedisServer::start_many(3);
    let a = redlock_client(&masters).await;
    let b = redlock_client(&masters).await;
    let guard = a
        .lock("job")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();

    // One master dies: the other two keep renewing.
    masters[0].kill();
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(b.lock("job").acquire().await.unwrap_err().is_busy() || guard.is_lost());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!guard.is_lost(), "two of three masters renew the lease");

    guard.release().await.unwrap();

    // It comes back empty (no persistence), so take a fresh hold on all three; then one
    // master is paused past the lease: the other two keep renewing, and nobody else gets in.
    masters[0].restart();
    let guard = a
        .lock("job")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    masters[1].pause();
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        match b.lock("job").acquire().await {
            Ok(_) => assert!(guard.is_lost(), "granted twice while one master was paused"),
            Err(e) => assert!(e.is_busy() || e.is_backend(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    masters[1].resume();
    assert!(!guard.is_lost(), "two of three masters renew the lease");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_of_dead_masters_is_survived_and_a_majority_is_reported() {
    let masters = RedisServer::start_many(5);
    let client = redlock_client(&masters).await;
    masters[0].kill();
    masters[1].kill();
    let guard = client.lock("two-down").acquire().await.unwrap();
    assert_eq!(holding(&masters, "two-down").await, 3);
    guard.release().await.unwrap();

    masters[2].kill();
    let started = Instant::now();
    let err = client.lock("three-down").acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::QuorumNotReached {
                granted: 2,
                needed: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the per-node timeout"
    );
    // The two grants are taken back (in the background): nothing is left to block others.
    for _ in 0..100 {
        if holding(&masters, "three-down").await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(holding(&masters, "three-down").await, 0);

    // Connecting needs a majority too.
    let refused = LockClient::builder()
        .url(redlock_url(&masters))
        .command_timeout(TIMEOUT)
        .connect()
        .await
        .unwrap_err();
    assert!(refused.is_backend(), "{refused}");
}

/// A zero-wait attempt that finds the lock busy while a master is stopped answers `Busy`
/// within one per-master timeout: taking back what the attempt may have been granted is
/// done in the background, not awaited from the stopped master for another timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_answer_does_not_wait_for_a_stopped_master() {
    let masters = RedisServer::start_many(3);
    let timeout = Duration::from_millis(500);
    let holder = client_at(&redlock_url(&masters), timeout).await;
    let asker = client_at(&redlock_url(&masters), timeout).await;
    let _held = holder.lock("stopped").acquire().await.unwrap();
    masters[2].pause();
    let started = Instant::now();
    let err = asker.lock("stopped").acquire().await.unwrap_err();
    let took = started.elapsed();
    masters[2].resume();
    assert!(err.is_busy(), "{err}");
    assert!(
        took < timeout + Duration::from_millis(300),
        "a zero-wait `Busy` took {took:?} under a {timeout:?} command timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_on_a_minority_does_not_stop_the_majority_and_bad_urls_say_the_form() {
    let masters = RedisServer::start_many(3);
    // Another library's lock on one master only: two of three still grant.
    let mut raw = masters[0].raw().await;
    let () = redis::cmd("SET")
        .arg("split")
        .arg("someone-else")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    let client = redlock_client(&masters).await;
    let guard = client.lock("split").acquire().await.unwrap();
    guard.release().await.unwrap();
    let other: Option<String> = redis::cmd("GET")
        .arg("split")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        other.as_deref(),
        Some("someone-else"),
        "not ours: left alone"
    );

    // Held on two of three by someone else: busy.
    for m in &masters[1..] {
        let mut raw = m.raw().await;
        let () = redis::cmd("SET")
            .arg("taken")
            .arg("x")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    assert!(client.lock("taken").acquire().await.unwrap_err().is_busy());

    let bad = LockClient::connect("redlock://127.0.0.1:1,,127.0.0.1:2")
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("expected redlock://"), "{bad}");
}

/// The lease's validity is counted from before the fan-out, so a slow master shortens it: with
/// one of three masters 60 ms away (each way), a lease without renewal is reported lost at
/// least that round trip before a full ttl after `acquire` returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_master_shortens_the_validity() {
    let masters = RedisServer::start_many(3);
    let slow = rlock_tests::proxy::FaultProxy::start(masters[0].port());
    slow.set_delay(Duration::from_millis(60));
    let url = format!(
        "redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
        slow.port(),
        masters[1].port(),
        masters[2].port()
    );
    let client = LockClient::builder()
        .url(url)
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let ttl = Duration::from_secs(2);
    let guard = client
        .lock("slow")
        .ttl(ttl)
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let returned = Instant::now();
    assert_eq!(
        holding(&masters, "slow").await,
        3,
        "the slow master granted it too"
    );
    tokio::time::timeout(ttl * 2, guard.lost()).await.unwrap();
    let valid_for = returned.elapsed();
    assert!(
        valid_for <= ttl - Duration::from_millis(100),
        "counted valid for {valid_for:?} after acquire returned, though acquiring took a \
         120 ms round trip to the slow master"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_unlock_on_redlock() {
    let masters = RedisServer::start_many(3);
    let a = redlock_client(&masters).await;
    let b = redlock_client(&masters).await;
    rlock_tests::locking::inspect_and_force_unlock(&a, &b, "admin:redlock").await;
}

/// What independent masters cannot keep is refused at once, saying why: a leader's term (a
/// fencing token), once-only work's shared result, an idempotent request's kept answer.
#[tokio::test]
async fn leadership_and_shared_results_are_refused_on_redlock() {
    let masters = RedisServer::start_many(3);
    let client = redlock_client(&masters).await;
    let leader = client.leader("billing").campaign().await.unwrap_err();
    assert!(
        matches!(&leader, LockError::InvalidConfig(why) if why.contains("fenc")),
        "{leader}"
    );
    let once = client
        .once("report:1")
        .run(|| async { Ok::<_, LockError>(1u64) })
        .await
        .unwrap_err();
    assert!(matches!(&once, LockError::InvalidConfig(_)), "{once}");
}
