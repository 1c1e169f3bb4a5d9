//! Handing a hold to another process (`hand_over`, `take_over`) against a real
//! `redis-server`: the taker renews the same lease under a token of its own and is told when
//! it is lost; a token is taken over once; a hold nobody takes over ends with its lease; every kind, a hold of several permits and a fence carry
//! over; and tokens that are not a live hold's are refused.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::{HoldToken, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::client;

/// A handler takes the lock with a short lease and hands it over; a worker (another client,
/// as another process would) takes it over and holds it across many leases, renewed by its
/// own watchdog; nobody else gets it meanwhile, and the worker's release frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_taker_renews_the_same_lease_and_releases_it() {
    let server = RedisServer::start();
    let handler = client(&server).await;
    let worker = handler.sibling();
    let guard = handler
        .lock("order:42")
        .ttl(Duration::from_millis(400))
        .fenced()
        .acquire()
        .await
        .unwrap();
    let (token, fence) = (guard.token().to_owned(), guard.fence());
    // Through text, as it would go through a queue.
    let text = guard.hand_over().unwrap().to_string();
    let taken = worker
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap();
    // The worker owns it under a token of its own; the fence is the grant's.
    assert_ne!(taken.token(), token);
    assert_eq!(taken.fence(), fence);
    // One token, one holder: taking it over again finds the old token owning nothing.
    let again = handler
        .sibling()
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap_err();
    assert!(again.is_lost(), "{again:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !taken.is_lost(),
        "renewed by the taker past its first lease"
    );
    let info = handler.inspect("order:42").await.unwrap();
    assert!(info.held && !info.held_here, "{info:?}");
    assert!(
        handler
            .lock("order:42")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    taken.release().await.unwrap();
    assert!(!handler.inspect("order:42").await.unwrap().held);
}

/// A hold handed over and never taken over is no longer renewed: it ends with its lease, and
/// a late take-over is told it is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_nobody_takes_over_ends_with_its_lease() {
    let server = RedisServer::start();
    let handler = client(&server).await;
    let guard = handler
        .lock("order:43")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let token = guard.hand_over().unwrap();
    let other = handler.sibling();
    let next = other
        .lock("order:43")
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let err = handler.sibling().take_over(token).await.unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    next.release().await.unwrap();
}

/// The taker is told when the lease is lost (here forced away by an operator), as any
/// holder is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_taker_is_told_when_the_lease_is_lost() {
    let server = RedisServer::start();
    let handler = client(&server).await;
    let guard = handler
        .lock("order:44")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let taken = handler
        .sibling()
        .take_over(guard.hand_over().unwrap())
        .await
        .unwrap();
    assert!(handler.force_unlock("order:44").await.unwrap());
    tokio::time::timeout(Duration::from_secs(30), taken.lost())
        .await
        .expect("lost() fires at the taker's next renewal");
    assert!(taken.release().await.unwrap_err().is_lost());
}

/// Every kind hands over: a read lock, a write lock, and a semaphore's hold of two permits,
/// which stay two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_hands_over() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = a.sibling();
    for request in [a.read_lock("config:1"), a.write_lock("config:2").fenced()] {
        let guard = request
            .ttl(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        let taken = b.take_over(guard.hand_over().unwrap()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(!taken.is_lost());
        taken.release().await.unwrap();
    }
    let two = a
        .semaphore("export:z", 3)
        .permits(2)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let taken = b.take_over(two.hand_over().unwrap()).await.unwrap();
    assert!(taken.token().ends_with("*2"), "{}", taken.token());
    tokio::time::sleep(Duration::from_millis(900)).await;
    let info = a.inspect_semaphore("export:z").await.unwrap();
    assert_eq!((info.in_use, info.held_here), (2, 0), "{info:?}");
    assert!(
        a.semaphore("export:z", 3)
            .permits(2)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    taken.release().await.unwrap();
    assert_eq!(a.inspect_semaphore("export:z").await.unwrap().in_use, 0);
}

/// What cannot be handed over or taken over is refused: a reentrant guard, a lost hold, text
/// that is not a token, and a token that names nobody's lease (a guess).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_live_hold_is_refused() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let refused = a
        .lock("job:r")
        .run(async {
            let inner = a.lock("job:r").acquire().await.unwrap();
            inner.hand_over().unwrap_err()
        })
        .await
        .unwrap();
    assert!(
        matches!(refused, LockError::InvalidConfig(_)),
        "{refused:?}"
    );

    let lapsed = a
        .lock("job:s")
        .ttl(Duration::from_millis(50))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    lapsed.lost().await;
    assert!(lapsed.hand_over().unwrap_err().is_lost());

    for text in [
        "",
        "order:1",
        "rlock-hold/1 lock x - t:1 k",
        "rlock-hold/1 bolt 10 - t:1 k",
    ] {
        let err = text.parse::<HoldToken>().unwrap_err();
        assert!(
            matches!(err, LockError::InvalidConfig(_)),
            "{text:?}: {err:?}"
        );
    }
    let held = a.lock("order:45").acquire().await.unwrap();
    let guess: HoldToken = format!(
        "rlock-hold/1 lock 30000 - {}:1 order:45",
        "0123456789abcdef0123456789abcdef"
    )
    .parse()
    .unwrap();
    let err = LockClient::connect(&server.url())
        .await
        .unwrap()
        .take_over(guess)
        .await
        .unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    assert!(!held.is_lost());
    held.release().await.unwrap();
}
