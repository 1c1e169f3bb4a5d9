//! Acquisitions whose reply never came: their background release is not counted as a
//! release, and one that runs in Redis after a long stop is released.

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::LockError;
use rlock_tests::RedisServer;
use rlock_tests::locking::client_for;

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
