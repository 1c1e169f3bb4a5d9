//! Acquisitions whose reply never came: their background release is not counted as a
//! release, one that runs in Redis after a long stop is released, and so is a waiter's
//! check in that runs after its withdrawal found the lock handed to it.

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::LockError;
use rlock_tests::RedisServer;
use rlock_tests::locking::{client, client_at, client_for, keys_left, queued_and_listening};
use rlock_tests::proxy::FaultProxy;

use crate::blocking;

/// The counters agree: the background release of an orphan acquisition (whose reply never
/// came) is not counted as a release, since nothing was counted as acquired. Redis is
/// paused, an acquire times out, Redis resumes; once the orphan release has removed the key,
/// `released <= acquired` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_releases_do_not_count_as_releases() {
    let server = RedisServer::start();
    let client = client_for(&server, Duration::from_millis(200)).await;

    blocking(|| server.pause());
    let result = client
        .lock("orphan:1")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await;
    blocking(|| server.resume());
    assert!(
        matches!(
            result,
            Err(LockError::Timeout { .. } | LockError::Unavailable { .. })
        ),
        "expected a timeout while Redis was paused: {result:?}"
    );

    // The acquisition went through once Redis resumed, and the orphan release removed it.
    let mut raw = server.raw().await;
    let mut gone = false;
    for _ in 0..100 {
        let exists: bool = raw.exists("orphan:1").await.unwrap();
        if !exists {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = client.metrics();
    eprintln!("orphan key gone: {gone}; {m:?}");
    assert!(
        m.released <= m.acquired,
        "more releases than acquisitions counted (orphan key gone: {gone}): {m:?}"
    );
}

/// An acquisition sent to a Redis stopped for longer than the orphan release's first tries
/// (3 s, a 200 ms command timeout) waits in Redis's input and runs when Redis resumes, with
/// a 30 s lease and nobody holding it. The background release keeps trying until Redis
/// answers, then once more after its `SET` could have run: the key is gone soon after the
/// resume, not 30 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_that_runs_after_a_long_stop_is_released() {
    let server = RedisServer::start();
    let client = client_for(&server, Duration::from_millis(200)).await;
    blocking(|| server.pause());
    let result = client
        .lock("orphan:late")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await;
    assert!(result.is_err(), "{result:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    blocking(|| server.resume());
    let mut raw = server.raw().await;
    let mut ran = false;
    for _ in 0..200 {
        let exists: bool = raw.exists("orphan:late").await.unwrap();
        ran |= exists;
        if !exists && ran {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exists: bool = raw.exists("orphan:late").await.unwrap();
    assert!(
        !exists,
        "the acquisition that ran on resume was left held (it ran: {ran})"
    );
}

/// A queued waiter is cut while its check in is on its way, and a release has just handed it
/// the lock. Its withdrawal finds the lock its own (the hand-off) and gives it on; the check
/// in, sent on the caller runtime's connection and held back by the network, runs after that
/// and finds the lock free: it takes it, for the full ttl, under a token nobody holds. The
/// withdrawal must go on until the check in has run or never will, so the key is released
/// soon, not 30 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_in_that_runs_after_its_withdrawal_is_released() {
    const KEY: &str = "orphan:check-in";
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = client(&server).await;
    // The waiter's client goes through the proxy: its caller connection and its background
    // one (which withdraws) alike.
    let waiter_client = client_at(&proxy.url(), Duration::from_secs(5)).await;
    let held = holder
        .lock(KEY)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock(KEY)
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    queued_and_listening(&server, KEY, 1, 1).await;
    // The check in that the confirmation of its subscription brings is answered by now; the
    // next comes a check interval (0.67 s) later, and the proxy holds it back.
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_delay(Duration::from_millis(600));
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The release hands the lock to the waiter (its announcement held back too), which is
    // cut while its check in is still on its way; its withdrawal is not held back.
    held.release().await.unwrap();
    proxy.set_delay(Duration::ZERO);
    waiter.abort();
    let _ = waiter.await;
    // Past the held-back check in.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut raw = server.raw().await;
    let left = keys_left(&mut raw, &[KEY]).await;
    let pttl: i64 = raw.pttl(KEY).await.unwrap();
    let token: Option<String> = raw.get(KEY).await.unwrap();
    assert_eq!(
        left, 0,
        "left held by {token:?} with {pttl} ms of its lease, nobody holding it"
    );
}

/// As above, with the check in held back longer than the withdrawal's resends go on: only the
/// order of the two on one connection keeps the lock from being taken again under a token
/// nobody holds. The withdrawal is sent on the waiter's own connection, behind its check in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_runs_after_a_check_in_held_back_past_its_resends() {
    const KEY: &str = "orphan:held-back";
    const HELD_BACK: Duration = Duration::from_secs(3);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = client(&server).await;
    let waiter_client = client_at(&proxy.url(), Duration::from_secs(10)).await;
    let held = holder
        .lock(KEY)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock(KEY)
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    queued_and_listening(&server, KEY, 1, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The next check in (a check interval later) is held back past every resend of the
    // withdrawal (ORPHAN_SETTLE after Redis first answers it).
    proxy.set_delay(HELD_BACK);
    tokio::time::sleep(Duration::from_millis(700)).await;
    held.release().await.unwrap();
    proxy.set_delay(Duration::ZERO);
    waiter.abort();
    let _ = waiter.await;
    // Past the held-back check in, and the withdrawal behind it.
    tokio::time::sleep(HELD_BACK + Duration::from_secs(2)).await;
    let mut raw = server.raw().await;
    let left = keys_left(&mut raw, &[KEY]).await;
    let pttl: i64 = raw.pttl(KEY).await.unwrap();
    let token: Option<String> = raw.get(KEY).await.unwrap();
    assert_eq!(
        left, 0,
        "left held by {token:?} with {pttl} ms of its lease, nobody holding it"
    );
}
