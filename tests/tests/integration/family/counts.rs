//! A semaphore's count changed at run time (`set_permits`, `add_permits`, `clear_permits`)
//! against a real `redis-server`, on a cluster, and in process where it keeps the same rules:
//! holders keep their permits; a lowered count admits nobody until enough are given back; a
//! raised one admits the queued waiters that now fit at once; a count set is every caller's
//! count until it is cleared; and the requests that are refused.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{KeyKind, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::{PATIENCE, client, queued_and_listening};

/// In use and free permits of `key`, as `client` inspects them.
async fn in_use(client: &LockClient, key: &str) -> (u32, u32) {
    let info = client.inspect_semaphore(key).await.unwrap();
    (info.in_use, info.available)
}

/// Three holders of a semaphore of 3; its count lowered to 1: they keep their permits, and
/// a waiter is admitted only once all three are given back (each release is inspected
/// right after it: a release that admitted the waiter early would show its permit).
async fn a_lowered_count_admits_nobody_until_enough_leave(a: &LockClient, b: &LockClient) {
    let key = "counts:lowered";
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(a.semaphore(key, 3).acquire().await.unwrap());
    }
    a.set_permits(key, 1).await.unwrap();
    assert_eq!(in_use(a, key).await, (3, 0));
    assert!(held.iter().all(|permit| !permit.is_lost()));
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore(key, 3).wait(PATIENCE).acquire().await }
    });
    for left in [2, 1] {
        held.pop().unwrap().release().await.unwrap();
        assert_eq!(
            in_use(a, key).await,
            (left, 0),
            "admitted past the lowered count"
        );
    }
    held.pop().unwrap().release().await.unwrap();
    let admitted = waiter.await.unwrap().unwrap();
    assert_eq!(in_use(a, key).await, (1, 0));
    admitted.release().await.unwrap();
    a.clear_permits(key).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_count_admits_nobody_until_enough_leave_on_redis() {
    let server = RedisServer::start();
    a_lowered_count_admits_nobody_until_enough_leave(
        &client(&server).await,
        &client(&server).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_count_admits_nobody_until_enough_leave_in_process() {
    let a = LockClient::in_memory();
    a_lowered_count_admits_nobody_until_enough_leave(&a, &a.sibling()).await;
}

/// A count set to 2 (callers name 3), both its permits held and two waiters queued (one
/// for 2 permits, behind one for 1): raising the count to 5 admits both in the same call,
/// in arrival order, with no release.
async fn a_raised_count_admits_the_waiters(
    a: &LockClient,
    b: &LockClient,
    server: Option<&RedisServer>,
) {
    let key = "counts:raised";
    a.set_permits(key, 2).await.unwrap();
    let holder = a.semaphore(key, 3).permits(2).acquire().await.unwrap();
    let mut waiters = Vec::new();
    for (c, take) in [(b.clone(), 1), (b.sibling(), 2)] {
        waiters.push(tokio::spawn(async move {
            c.semaphore(key, 3)
                .permits(take)
                .wait(PATIENCE)
                .acquire()
                .await
        }));
        if let Some(server) = server {
            queued_and_listening(server, key, waiters.len(), waiters.len()).await;
        }
    }
    assert_eq!(a.add_permits(key, 3).await.unwrap(), 5);
    if server.is_some() {
        // Granted by the call itself: both hold before any release.
        assert_eq!(in_use(a, key).await, (5, 0));
    }
    for waiter in waiters {
        waiter.await.unwrap().unwrap().release().await.unwrap();
    }
    holder.release().await.unwrap();
    a.clear_permits(key).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_count_admits_the_waiters_on_redis() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    a_raised_count_admits_the_waiters(&a, &b, Some(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_count_admits_the_waiters_in_process() {
    let a = LockClient::in_memory();
    a_raised_count_admits_the_waiters(&a, &a.sibling(), None).await;
}

/// A count set on a free name is every caller's, whatever count it names, and inspected as
/// the semaphore's; cleared, a caller's own count applies again once the permits taken
/// under the set one are given back (meanwhile another count is refused as ever).
async fn a_set_count_is_every_callers_count(a: &LockClient) {
    let key = "counts:set";
    a.set_permits(key, 5).await.unwrap();
    assert_eq!(a.inspect_semaphore(key).await.unwrap().permits, 5);
    let five = a.semaphore(key, 2).permits(2).acquire().await.unwrap();
    let more = a.semaphore(key, 7).permits(3).acquire().await.unwrap();
    assert!(a.semaphore(key, 2).acquire().await.unwrap_err().is_busy());
    a.clear_permits(key).await.unwrap();
    let refused = a.semaphore(key, 2).acquire().await.unwrap_err();
    assert!(
        matches!(refused, LockError::InvalidConfig(_)),
        "{refused:?}"
    );
    five.release().await.unwrap();
    more.release().await.unwrap();
    let own = a.semaphore(key, 2).permits(2).acquire().await.unwrap();
    assert_eq!(a.inspect_semaphore(key).await.unwrap().permits, 2);
    own.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_count_is_every_callers_count_on_redis() {
    let server = RedisServer::start();
    a_set_count_is_every_callers_count(&client(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_count_is_every_callers_count_in_process() {
    a_set_count_is_every_callers_count(&LockClient::in_memory()).await;
}

/// Adding to no count, changing the count of another kind's name, a hold of more permits
/// than the count set, and a Redlock client are refused, saying why; a count lowered below
/// zero stops at zero, which pauses the semaphore (its callers are busy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_count_change_refuses() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let nothing = a.add_permits("counts:none", 1).await.unwrap_err();
    assert!(
        matches!(nothing, LockError::InvalidConfig(_)),
        "{nothing:?}"
    );
    let lock = a.lock("counts:lock").acquire().await.unwrap();
    let other = a.set_permits("counts:lock", 2).await.unwrap_err();
    assert!(
        matches!(
            other,
            LockError::WrongKind {
                found: KeyKind::Lock,
                ..
            }
        ),
        "{other:?}"
    );
    assert!(!lock.is_lost());
    lock.release().await.unwrap();
    a.set_permits("counts:zero", 1).await.unwrap();
    assert_eq!(a.add_permits("counts:zero", -5).await.unwrap(), 0);
    let none = a.semaphore("counts:zero", 1).acquire().await.unwrap_err();
    assert!(
        none.is_busy(),
        "a count of 0 pauses the semaphore: {none:?}"
    );
    // A hold of more permits than the count set could never be granted: refused.
    a.set_permits("counts:one", 1).await.unwrap();
    let more = a
        .semaphore("counts:one", 3)
        .permits(2)
        .wait(PATIENCE)
        .acquire()
        .await;
    assert!(matches!(more, Err(LockError::InvalidConfig(_))), "{more:?}");
    let redlock = LockClient::connect(&rlock_tests::deploy::redlock_url(std::slice::from_ref(
        &server,
    )))
    .await
    .unwrap();
    let refused = redlock.set_permits("counts:zero", 1).await.unwrap_err();
    assert!(
        matches!(refused, LockError::InvalidConfig(_)),
        "{refused:?}"
    );
}

/// On a cluster, keys spread over the masters: a lowered count, and a raised one admitting
/// a waiter at once, each key's count record in its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_change_on_a_cluster() {
    let cluster = rlock_tests::deploy::ClusterDeployment::start();
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    let b = LockClient::connect(&cluster.url()).await.unwrap();
    for key in ["counts:c1", "counts:c2", "counts:c3"] {
        let held = [
            a.semaphore(key, 2).acquire().await.unwrap(),
            a.semaphore(key, 2).acquire().await.unwrap(),
        ];
        a.set_permits(key, 1).await.unwrap();
        let waiter = tokio::spawn({
            let (b, key) = (b.clone(), key.to_owned());
            async move { b.semaphore(key, 2).wait(PATIENCE).acquire().await }
        });
        let [first, second] = held;
        first.release().await.unwrap();
        assert_eq!(in_use(&a, key).await, (1, 0));
        assert_eq!(a.add_permits(key, 1).await.unwrap(), 2);
        let admitted = tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(in_use(&a, key).await, (2, 0));
        admitted.release().await.unwrap();
        second.release().await.unwrap();
        a.clear_permits(key).await.unwrap();
    }
}
