//! Handing a hold to another process (`hand_over`, `take_over`) against a real
//! `redis-server`: the taker renews the same lease under a token of its own and is told when
//! it is lost; a token is taken over once; a hold nobody takes over ends with its lease; every
//! kind, a hold of several permits and a fence carry over; tokens that are not a live hold's
//! are refused; the process that handed a hold over, or the one that took it, killed (the
//! taker in the test's process or in a worker process of its own); the taker stopped past
//! the lease; a take-over cut short; and a cluster.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::{HoldToken, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::child::LineChild;
use rlock_tests::deploy::ClusterDeployment;
use rlock_tests::locking::{PATIENCE, client};
use rlock_tests::protocol::{Command, Line, Outcome};
use rlock_tests::worker::{Hold, HoldKind};

/// `giver` takes the lock `key` with a short lease and hands it over; `taker` (another
/// client, as another process would be) takes it over through the token's text and holds it
/// across several leases, renewed by its own watchdog, under a token of its own with the
/// grant's fence; the token is taken over once only; `third` sees it held, not by itself,
/// and cannot take it; the taker's release frees it.
async fn the_taker_renews_the_lease_and_releases_it(
    giver: &LockClient,
    taker: &LockClient,
    third: &LockClient,
    key: &str,
) {
    let guard = giver
        .lock(key)
        .ttl(Duration::from_secs(1))
        .fenced()
        .acquire()
        .await
        .unwrap();
    let (token, fence) = (guard.token().to_owned(), guard.fence());
    // Through text, as it would go through a queue.
    let text = guard.hand_over().unwrap().to_string();
    let taken = taker
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap();
    // The taker owns it under a token of its own; the fence is the grant's.
    assert_ne!(taken.token(), token);
    assert_eq!(taken.fence(), fence);
    // One token, one holder: taking it over again finds the old token owning nothing.
    let again = third
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap_err();
    assert!(again.is_lost(), "{again:?}");
    // Past three of its leases.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        !taken.is_lost(),
        "renewed by the taker past its first lease"
    );
    let info = third.inspect(key).await.unwrap();
    assert!(info.held && !info.held_here, "{info:?}");
    assert!(third.lock(key).acquire().await.unwrap_err().is_busy());
    taken.release().await.unwrap();
    assert!(!third.inspect(key).await.unwrap().held);
    let next = third.lock(key).acquire().await.unwrap();
    next.release().await.unwrap();
}

/// A lock handed over and taken over on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_taker_renews_the_same_lease_and_releases_it() {
    let server = RedisServer::start();
    let handler = client(&server).await;
    the_taker_renews_the_lease_and_releases_it(
        &handler,
        &handler.sibling(),
        &handler.sibling(),
        "order:42",
    )
    .await;
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

/// Every kind hands over on one server: a read lock, a write lock, and a semaphore's hold of
/// two permits, which stay two.
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
    two_permits_hand_over(&a, &b, "export:z").await;
}

/// `giver` takes 2 permits of the semaphore of 3 `key` and hands them over; `taker` takes
/// them over once (a second take-over is lost) and renews them past several leases: 2 stay
/// in use, none of them the giver's client's, and 2 more do not fit; the taker's release
/// gives both back.
async fn two_permits_hand_over(giver: &LockClient, taker: &LockClient, key: &str) {
    let two = giver
        .semaphore(key, 3)
        .permits(2)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let token = two.hand_over().unwrap();
    let text = token.to_string();
    let taken = taker.take_over(token).await.unwrap();
    assert!(taken.token().ends_with("*2"), "{}", taken.token());
    let again = giver
        .sibling()
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap_err();
    assert!(again.is_lost(), "{again:?}");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!taken.is_lost());
    let info = giver.inspect_semaphore(key).await.unwrap();
    assert_eq!((info.in_use, info.held_here), (2, 0), "{info:?}");
    assert!(
        giver
            .semaphore(key, 3)
            .permits(2)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    taken.release().await.unwrap();
    assert_eq!(giver.inspect_semaphore(key).await.unwrap().in_use, 0);
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

/// A worker process of its own that holds `key` (a fenced lock of 600 ms leases, renewed),
/// or, given `take_over`, the hold that token's text names.
fn worker_holding(server: &RedisServer, key: &str, take_over: Option<String>) -> LineChild {
    let hold = Hold {
        redis: server.url(),
        key: key.to_owned(),
        ttl_ms: 600,
        renew: true,
        kind: HoldKind::Lock,
        permits: 1,
        take_over,
    };
    let mut worker = LineChild::start(env!("CARGO_BIN_EXE_worker"), &hold.args());
    match worker.line() {
        Some(Line::Acquired { .. }) => worker,
        other => panic!("the worker did not hold {key}: {other:?}"),
    }
}

/// The process that handed a hold over is killed (SIGKILL) once it is taken over: the
/// taker holds on, renewing by its own watchdog across many leases, and nobody else gets
/// the key until it releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_giver_killed_after_the_hand_over_takes_nothing_with_it() {
    let server = RedisServer::start();
    let key = "export:giver";
    let mut giver = worker_holding(&server, key, None);
    let Some(Line::Handed(text)) = giver.ask(Command::HandOver) else {
        panic!("the worker did not hand its hold over");
    };
    let taker = client(&server).await;
    let taken = taker
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap();
    giver.signal("-KILL");
    drop(giver);
    // Three of its 600 ms leases.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(!taken.is_lost(), "renewed by the taker alone");
    let other = client(&server).await;
    let info = other.inspect(key).await.unwrap();
    assert!(info.held && !info.held_here, "{info:?}");
    assert!(other.lock(key).acquire().await.unwrap_err().is_busy());
    taken.release().await.unwrap();
    other
        .lock(key)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A hold passes between two worker processes, neither of them the test's: one hands it
/// over and prints the token, the other takes it over with it; the giver is killed
/// (SIGKILL), and the taker, renewing by its own watchdog, still holds it past several
/// leases (others find it busy) until told to release, which frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_passed_between_two_processes_outlives_the_giver() {
    let server = RedisServer::start();
    let key = "export:between";
    let mut giver = worker_holding(&server, key, None);
    let Some(Line::Handed(text)) = giver.ask(Command::HandOver) else {
        panic!("the worker did not hand its hold over");
    };
    let mut taker = worker_holding(&server, key, Some(text));
    giver.signal("-KILL");
    drop(giver);
    // Three of its 600 ms leases.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(taker.ask(Command::IsLost), Some(Line::Lost(false)));
    let other = client(&server).await;
    assert!(other.lock(key).acquire().await.unwrap_err().is_busy());
    assert_eq!(
        taker.ask(Command::Release),
        Some(Line::Released(Outcome::Ok))
    );
    other
        .lock(key)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The process that took a hold over is killed (SIGKILL): nothing renews the lease any more,
/// so it ends by itself within its ttl, and a client waiting for the key gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_taker_killed_leaves_a_lease_that_ends_by_itself() {
    let server = RedisServer::start();
    let key = "export:taker";
    let giver = client(&server).await;
    let guard = giver
        .lock(key)
        .ttl(Duration::from_millis(600))
        .fenced()
        .acquire()
        .await
        .unwrap();
    let text = guard.hand_over().unwrap().to_string();
    let taker = worker_holding(&server, key, Some(text));
    let waiter = client(&server).await;
    assert!(waiter.lock(key).acquire().await.unwrap_err().is_busy());
    taker.signal("-KILL");
    drop(taker);
    let next = waiter
        .lock(key)
        .wait(PATIENCE)
        .fenced()
        .acquire()
        .await
        .unwrap();
    next.release().await.unwrap();
}

/// The process that took a hold over is stopped (SIGSTOP) past its lease: the lease ends, a
/// waiter is granted the key with a higher fence, and the taker, let run again, is told it
/// lost the hold (`lost()`) and its release answers `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_taker_stopped_past_the_lease_is_told_it_lost_it() {
    let server = RedisServer::start();
    let key = "export:stopped";
    let giver = client(&server).await;
    let guard = giver
        .lock(key)
        .ttl(Duration::from_millis(600))
        .fenced()
        .acquire()
        .await
        .unwrap();
    let fence = guard.fence().unwrap();
    let text = guard.hand_over().unwrap().to_string();
    let mut taker = worker_holding(&server, key, Some(text));
    taker.signal("-STOP");
    let waiter = client(&server).await;
    let next = waiter
        .lock(key)
        .wait(PATIENCE)
        .fenced()
        .acquire()
        .await
        .unwrap();
    assert!(
        next.fence().unwrap() > fence,
        "the next holder's fence is higher"
    );
    taker.signal("-CONT");
    assert_eq!(taker.ask(Command::WaitLost), Some(Line::Lost(true)));
    assert_eq!(
        taker.ask(Command::Release),
        Some(Line::Released(Outcome::Lost))
    );
    next.release().await.unwrap();
}

/// A take-over cut at random moments (its future dropped, as a cancelled request's would
/// be), round after round: the hold is then either taken over and not renewed by anyone, or
/// still the giver's token's (which nobody renews either); either way its lease ends by
/// itself, and the key is free for the next caller within the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_take_over_leaves_nothing_held_past_its_lease() {
    let server = RedisServer::start();
    let (giver, taker) = (client(&server).await, client(&server).await);
    for round in 0..8u64 {
        let key = format!("export:cut:{round}");
        let guard = giver
            .lock(key.as_str())
            .ttl(Duration::from_millis(400))
            .acquire()
            .await
            .unwrap();
        let token = guard.hand_over().unwrap();
        let cut = Duration::from_micros(round * 300);
        let _ = tokio::time::timeout(cut, taker.take_over(token)).await;
        let next = giver
            .lock(key.as_str())
            .wait(PATIENCE)
            .acquire()
            .await
            .unwrap();
        next.release().await.unwrap();
    }
}

/// On a cluster, with a key on each of its three masters: a lock handed over by one client
/// is taken over once by a second, renewed there past several leases, seen held by a third
/// and freed by the taker's release; and so is a hold of 2 permits of a semaphore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_handed_over_on_a_cluster() {
    let cluster = ClusterDeployment::start();
    let keys = ["order:c1", "order:c2", "order:c3"];
    assert_eq!(cluster.masters_serving(&keys), 3);
    let url = cluster.url();
    let a = LockClient::connect(&url).await.unwrap();
    let b = LockClient::connect(&url).await.unwrap();
    let c = LockClient::connect(&url).await.unwrap();
    for key in keys {
        the_taker_renews_the_lease_and_releases_it(&a, &b, &c, key).await;
    }
    two_permits_hand_over(&a, &b, "export:c").await;
}
