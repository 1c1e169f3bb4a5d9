//! Redisson's own `RSemaphore` cases (`RedissonSemaphoreTest`), transcribed for a semaphore
//! whose permits are leases, against a real `redis-server` and in process.
//!
//! Where Redisson's counter and rlock's leases differ, the transcription keeps the case and
//! states the difference:
//! - Redisson's `release()` of a permit nobody took adds one to the counter; here a release
//!   gives back the hold it is called on, so "release singles" means holders of one permit.
//! - Redisson's `availablePermits` goes negative when the count is lowered below the permits
//!   in use; `available` stops at 0 and `in_use` says how far over the count they are.
//! - `acquire(n)` with n over the count waits in Redisson until permits are added; here it is
//!   refused with `InvalidConfig` (`counts::what_a_count_change_refuses`).
//! - `drainPermits` has no counterpart (README, "Semaphores"); `tryAcquire(0)` is refused.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rlock_runtime::{LockClient, LockGuard};
use rlock_tests::RedisServer;
use rlock_tests::locking::{PATIENCE, client, queued_and_listening};

/// Permits free of `key`, as `client` inspects them (Redisson's `availablePermits`).
async fn available(client: &LockClient, key: &str) -> u32 {
    client.inspect_semaphore(key).await.unwrap().available
}

/// Holders of one permit each, taken by `client`.
async fn singles(client: &LockClient, key: &str, n: usize) -> Vec<LockGuard> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(client.semaphore(key, 1).acquire().await.unwrap());
    }
    held
}

/// `testReleaseAcquire`: a count of 10; one taken and given back, then five at once.
async fn release_acquire(a: &LockClient) {
    let key = "redisson:release-acquire";
    a.set_permits(key, 10).await.unwrap();
    let one = a.semaphore(key, 10).acquire().await.unwrap();
    assert_eq!(available(a, key).await, 9);
    one.release().await.unwrap();
    assert_eq!(available(a, key).await, 10);
    let five = a.semaphore(key, 10).permits(5).acquire().await.unwrap();
    assert_eq!(available(a, key).await, 5);
    five.release().await.unwrap();
    assert_eq!(available(a, key).await, 10);
    a.clear_permits(key).await.unwrap();
}

/// `testAddPermits`: all 10 taken, 4 added while they are held, the 10 given back, 5 taken.
async fn add_permits(a: &LockClient) {
    let key = "redisson:add";
    a.set_permits(key, 10).await.unwrap();
    let ten = a.semaphore(key, 10).permits(10).acquire().await.unwrap();
    assert_eq!(available(a, key).await, 0);
    assert_eq!(a.add_permits(key, 4).await.unwrap(), 14);
    assert_eq!(available(a, key).await, 4);
    ten.release().await.unwrap();
    assert_eq!(available(a, key).await, 14);
    let five = a.semaphore(key, 10).permits(5).acquire().await.unwrap();
    assert_eq!(available(a, key).await, 9);
    five.release().await.unwrap();
    a.clear_permits(key).await.unwrap();
}

/// `testReducePermits`: all 10 taken and the count lowered by 5: the holder keeps all 10
/// (Redisson's counter reads -5; here 0 are free with 10 in use of 5), and once they are
/// given back 5 are free, and 5 can be taken.
async fn reduce_permits(a: &LockClient) {
    let key = "redisson:reduce";
    a.set_permits(key, 10).await.unwrap();
    let ten = a.semaphore(key, 10).permits(10).acquire().await.unwrap();
    assert_eq!(a.add_permits(key, -5).await.unwrap(), 5);
    let info = a.inspect_semaphore(key).await.unwrap();
    assert_eq!((info.permits, info.in_use, info.available), (5, 10, 0));
    assert!(!ten.is_lost(), "a lowered count takes no holder's permits");
    ten.release().await.unwrap();
    assert_eq!(available(a, key).await, 5);
    let five = a.semaphore(key, 10).permits(5).acquire().await.unwrap();
    assert_eq!(available(a, key).await, 0);
    five.release().await.unwrap();
    a.clear_permits(key).await.unwrap();
}

/// `testTryNAcquire` and `testBlockingNAcquire`: a count of 5 with 3 taken; 4 more cannot be
/// taken at once; a caller waiting for 4 is granted only when the second of two released
/// permits comes back (the release before it leaves it waiting, with nothing taken), and
/// then none are free. `server` lets the test see the waiter queued before the releases.
async fn blocking_n_acquire(a: &LockClient, b: &LockClient, server: Option<&RedisServer>) {
    let key = "redisson:blocking-n";
    a.set_permits(key, 5).await.unwrap();
    let mut held = singles(a, key, 3).await;
    assert_eq!(available(a, key).await, 2);
    let busy = b.semaphore(key, 5).permits(4).acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.semaphore(key, 5)
                .permits(4)
                .wait(PATIENCE)
                .acquire()
                .await
        }
    });
    if let Some(server) = server {
        queued_and_listening(server, key, 1, 1).await;
    }
    held.pop().unwrap().release().await.unwrap();
    let info = a.inspect_semaphore(key).await.unwrap();
    assert_eq!(
        (info.in_use, info.available),
        (2, 3),
        "4 granted with 3 free"
    );
    held.pop().unwrap().release().await.unwrap();
    let four = waiter.await.unwrap().unwrap();
    assert_eq!(available(a, key).await, 0);
    four.release().await.unwrap();
    held.pop().unwrap().release().await.unwrap();
    a.clear_permits(key).await.unwrap();
}

/// `testConcurrencyLoop_MultiInstance`: instances share a count of 1 and each increments a
/// counter by reading it, yielding and writing it back while it holds the permit; no
/// increment is lost, so no two held the permit at once.
async fn concurrency_loop(clients: &[LockClient]) {
    const ITERATIONS: u32 = 20;
    let key = "redisson:loop";
    clients[0].set_permits(key, 1).await.unwrap();
    let counter = Arc::new(AtomicU32::new(0));
    let mut instances = Vec::new();
    for client in clients {
        let (client, counter) = (client.clone(), Arc::clone(&counter));
        instances.push(tokio::spawn(async move {
            for _ in 0..ITERATIONS {
                let permit = client
                    .semaphore(key, 1)
                    .wait(PATIENCE)
                    .acquire()
                    .await
                    .unwrap();
                let value = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(value + 1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for instance in instances {
        instance.await.unwrap();
    }
    let expected = ITERATIONS * u32::try_from(clients.len()).unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), expected);
    clients[0].clear_permits(key).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redissons_cases_on_redis() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    release_acquire(&a).await;
    add_permits(&a).await;
    reduce_permits(&a).await;
    blocking_n_acquire(&a, &b, Some(&server)).await;
    let mut instances = vec![a, b];
    for _ in 0..2 {
        instances.push(client(&server).await);
    }
    concurrency_loop(&instances).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redissons_cases_in_process() {
    let a = LockClient::in_memory();
    release_acquire(&a).await;
    add_permits(&a).await;
    reduce_permits(&a).await;
    blocking_n_acquire(&a, &a.sibling(), None).await;
    concurrency_loop(&[a.clone(), a.sibling(), a.sibling(), a.sibling()]).await;
}
