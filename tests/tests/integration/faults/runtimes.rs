//! The watchdog and the runtimes that use one client: a lease outlives the runtime that
//! took it, and a runtime that ends takes only its own connection with it.

use std::time::{Duration, Instant};

use rlock_tests::RedisServer;
use rlock_tests::locking::{client_for, lock_and_release};

use super::SHORT;

/// The watchdog outlives the runtime that started it. One client is shared by two runtimes:
/// a short-lived current-thread runtime takes `a` and is dropped while the guard lives on;
/// the test's runtime then takes `b`. Neither lease may end unnoticed: a contender never
/// gets a key whose guard is not `is_lost()`: the engine keeps renewing both, whichever
/// runtime took them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_outlives_the_runtime_that_started_it() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let contender = client_for(&server, SHORT).await;
    let ttl = Duration::from_millis(500);

    let (tx, rx) = tokio::sync::oneshot::channel();
    let shared = client.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let guard = runtime.block_on(shared.lock("rt:a").ttl(ttl).acquire());
        drop(runtime);
        let _ = tx.send(guard);
    });
    let guard_a = rx.await.unwrap().unwrap();
    let guard_b = client.lock("rt:b").ttl(ttl).acquire().await.unwrap();

    let mut violations = Vec::new();
    let mut granted_lost = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        for (key, guard) in [("rt:a", &guard_a), ("rt:b", &guard_b)] {
            if let Ok(grant) = contender
                .lock(key)
                .ttl(Duration::from_secs(30))
                .renew(false)
                .acquire()
                .await
            {
                if guard.is_lost() {
                    granted_lost += 1;
                } else {
                    violations.push(format!(
                        "`{key}` granted to the contender {:?} into the test while its guard \
                         was not lost",
                        started.elapsed()
                    ));
                }
                // Kept: the key stays the contender's, so each key is reported once.
                std::mem::forget(grant);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let metrics = client.metrics();
    eprintln!(
        "watchdog across runtimes: a lost {}, b lost {}, contender grants on lost keys \
         {granted_lost}, {metrics:?}",
        guard_a.is_lost(),
        guard_b.is_lost()
    );
    assert!(
        violations.is_empty(),
        "leases ended unnoticed after the runtime that started the watchdog was dropped: \
         {violations:?}; {metrics:?}"
    );
}

/// A multi-thread runtime's commands go over a connection opened on it, so that no reply
/// hops to the driver's threads (a thread wake-up per command); and that connection ends
/// with its runtime, under nobody else. Runtimes come and go while the test's runtime,
/// sharing the client, keeps locking without an error, and the watchdog keeps renewing the
/// leases of both: those the test's runtime holds, and those each ended runtime took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_ends_takes_only_its_own_connection_with_it() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let ttl = Duration::from_millis(600);
    let contender = client_for(&server, SHORT).await;
    let held = client.lock("rt:held").ttl(ttl).acquire().await.unwrap();
    let mut kept = Vec::new();
    for round in 0..3 {
        let shared = client.clone();
        let (before, after, guard) = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let before = runtime.metrics().num_alive_tasks();
            runtime.block_on(lock_and_release(&shared, "rt:theirs", SHORT));
            let after = runtime.metrics().num_alive_tasks();
            // A hold taken on this runtime outlives it.
            let key = format!("rt:kept:{round}");
            let guard = runtime.block_on(shared.lock(key).ttl(ttl).acquire());
            drop(runtime);
            (before, after, guard.unwrap())
        })
        .join()
        .unwrap();
        kept.push(guard);
        assert!(
            after > before,
            "round {round}: the runtime that locked runs no task of its connection \
             ({before} tasks before, {after} after): its replies hop to the driver"
        );
        lock_and_release(&client, "rt:mine", SHORT).await;
    }
    tokio::time::sleep(ttl * 2).await;
    assert!(!held.is_lost(), "the lease of `rt:held` was lost");
    held.release().await.unwrap();
    for (round, guard) in kept.into_iter().enumerate() {
        let key = format!("rt:kept:{round}");
        assert!(
            !guard.is_lost(),
            "`{key}` was lost with the runtime that took it"
        );
        assert!(
            contender.lock(key.as_str()).acquire().await.is_err(),
            "`{key}` was free while its guard was not lost"
        );
        guard.release().await.unwrap();
    }
    lock_and_release(&client, "rt:mine", SHORT).await;
}
