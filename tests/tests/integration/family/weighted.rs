//! Several permits of a semaphore at once (`permits(n)`) against a real `redis-server`: held,
//! renewed, given back and lost together, handed to a queued waiter only when they all fit,
//! waited for in arrival order (a stream of single permits never starves a hold of several),
//! counted by `inspect_semaphore`, a cancelled waiter and a restart, and the requests that
//! are refused; on a cluster too, with keys on each of its masters.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::deploy::ClusterDeployment;
use rlock_tests::locking::{KeysOn, PATIENCE, client, keys_left, queued_and_listening};

/// Permits of `key` (a semaphore of 10) in use, as Redis counts its members.
async fn members_in_use(server: &RedisServer, key: &str) -> u32 {
    let mut raw = server.raw().await;
    redis::cmd("ZCOUNT")
        .arg(key)
        .arg(0)
        .arg("+inf")
        .query_async(&mut raw)
        .await
        .unwrap()
}

/// 3 of 10 and 7 of 10 fill the semaphore `key`; a third request is busy; the hold of 3
/// gives all three back at once, and the last release leaves nothing behind.
async fn several_permits_are_taken_and_given_back_together(a: &LockClient, key: &str) {
    let export = a.semaphore(key, 10).permits(3).acquire().await.unwrap();
    assert!(export.token().ends_with("*3"), "{}", export.token());
    let other = a.sibling();
    let rest = other.semaphore(key, 10).permits(7).acquire().await.unwrap();
    let info = a.inspect_semaphore(key).await.unwrap();
    assert_eq!((info.permits, info.in_use, info.held_here), (10, 10, 3));
    assert!(
        other
            .semaphore(key, 10)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    export.release().await.unwrap();
    assert_eq!(a.inspect_semaphore(key).await.unwrap().in_use, 7);
    let three = other.semaphore(key, 10).permits(3).acquire().await.unwrap();
    assert!(a.semaphore(key, 10).acquire().await.unwrap_err().is_busy());
    three.release().await.unwrap();
    rest.release().await.unwrap();
    assert_eq!(a.inspect_semaphore(key).await.unwrap().in_use, 0);
}

/// Several permits taken and given back together on one server, leaving no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_are_taken_and_given_back_together_on_redis() {
    let server = RedisServer::start();
    several_permits_are_taken_and_given_back_together(&client(&server).await, "export:acme").await;
    let mut raw = server.raw().await;
    assert_eq!(keys_left(&mut raw, &["export:acme"]).await, 0);
}

/// Several permits taken and given back together by the in-process backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_are_taken_and_given_back_together_in_memory() {
    several_permits_are_taken_and_given_back_together(&LockClient::in_memory(), "export:acme")
        .await;
}

/// A hold of several permits waits at the queue's head while single permits are taken and
/// given back all around it: six tasks on other clients take one of four permits again and
/// again (held 3 to 8 ms), so that a permit given back is soon taken again and the four
/// are never free together. The permits that come free are kept for the hold of three,
/// which is granted; nobody holds more than four at any moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_of_several_permits_is_not_starved_by_single_ones() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (inside, most, grants) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut singles = Vec::new();
    for n in 0..6 {
        let c = a.sibling();
        let (stop, inside, most, grants) =
            (stop.clone(), inside.clone(), most.clone(), grants.clone());
        singles.push(tokio::spawn(async move {
            for _ in 0..100_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let permit = c
                    .semaphore("batch:t1", 4)
                    .wait(PATIENCE)
                    .acquire()
                    .await
                    .unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3 + n)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    // The singles are under way before the large request comes.
    for _ in 0..3000 {
        if grants.load(Ordering::SeqCst) >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let heavy = a
        .semaphore("batch:t1", 4)
        .permits(3)
        .wait(PATIENCE)
        .acquire()
        .await;
    let heavy = match heavy {
        Ok(heavy) => heavy,
        Err(e) => panic!(
            "the hold of 3 was starved ({e}) while singles were granted {} times",
            grants.load(Ordering::SeqCst)
        ),
    };
    let now = inside.fetch_add(3, Ordering::SeqCst) + 3;
    most.fetch_max(now, Ordering::SeqCst);
    assert!(members_in_use(&server, "batch:t1").await <= 4);
    inside.fetch_sub(3, Ordering::SeqCst);
    heavy.release().await.unwrap();
    // The singles go on after it.
    let after = grants.load(Ordering::SeqCst);
    for _ in 0..3000 {
        if grants.load(Ordering::SeqCst) > after + 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        grants.load(Ordering::SeqCst) > after + 4,
        "the singles stopped"
    );
    stop.store(true, Ordering::SeqCst);
    for task in singles {
        task.await.unwrap();
    }
    assert!(
        most.load(Ordering::SeqCst) <= 4,
        "{most:?} permits held at once"
    );
}

/// Waiting is in arrival order behind a hold of several permits: with 9 of 10 of `key`
/// held, a request for 3 queues first, then one for 1, which does not take the free permit
/// past it, nor does a request arriving later. The release of the 9 hands 3 to the first and
/// 1 to the second in its own step (no waiter races for them: they are counted in Redis
/// before either waiter hears of it), and tells each.
async fn a_release_hands_several_permits_only_when_they_all_fit(
    a: &LockClient,
    on: KeysOn<'_>,
    key: &str,
) {
    let node = on.node(key);
    let nine = a
        .semaphore(key, 10)
        .permits(9)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (n, take) in [(1, 3), (2, 1)] {
        let (c, granted_tx, name) = (a.sibling(), granted_tx.clone(), key.to_owned());
        waiters.push(tokio::spawn(async move {
            let permit = c
                .semaphore(&name, 10)
                .permits(take)
                .wait(PATIENCE)
                .acquire()
                .await
                .unwrap();
            granted_tx.send(take).unwrap();
            std::future::pending::<()>().await;
            drop(permit);
        }));
        // The first stands in the queue before the second comes.
        on.queued_and_listening(key, n, n).await;
    }
    // The free permit stays free: the single request stands behind the hold of three.
    assert_eq!(members_in_use(node, key).await, 9);
    assert!(
        a.sibling()
            .semaphore(key, 10)
            .acquire()
            .await
            .unwrap_err()
            .is_busy(),
        "a request arriving later takes no permit kept for the queue's head"
    );
    nine.release().await.unwrap();
    assert_eq!(
        members_in_use(node, key).await,
        4,
        "the release itself hands the permits to both waiters"
    );
    // Both told (their tasks may wake in either order).
    let mut takes = Vec::new();
    for _ in 0..2 {
        takes.push(
            tokio::time::timeout(PATIENCE, granted.recv())
                .await
                .unwrap(),
        );
    }
    takes.sort();
    assert_eq!(takes, [Some(1), Some(3)]);
    assert_eq!(members_in_use(node, key).await, 4);
    for waiter in waiters {
        waiter.abort();
    }
}

/// The hand-off of several permits, on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_several_permits_only_when_they_all_fit_on_redis() {
    let server = RedisServer::start();
    let a = client(&server).await;
    a_release_hands_several_permits_only_when_they_all_fit(&a, KeysOn::Server(&server), "render:y")
        .await;
}

/// The watchdog renews every permit of a hold: held over several leases, the hold still
/// counts three, and only seven more fit. A hold that stops renewing (a crash) gives all
/// three back when its one lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_are_renewed_and_lost_together() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let other = a.sibling();
    let renewed = a
        .semaphore("job:z", 10)
        .permits(3)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!renewed.is_lost());
    assert_eq!(members_in_use(&server, "job:z").await, 3);
    assert!(
        other
            .semaphore("job:z", 10)
            .permits(8)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    renewed.release().await.unwrap();

    let crashed = a
        .semaphore("job:z", 10)
        .permits(3)
        .ttl(Duration::from_millis(300))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed);
    let all = other
        .semaphore("job:z", 10)
        .permits(10)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    assert_eq!(members_in_use(&server, "job:z").await, 10);
    all.release().await.unwrap();
}

/// `force_unlock_semaphore` gives a hold's permits back together, and counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_gives_every_permit_of_a_hold_back() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let stuck = a.sibling();
    let hold = stuck
        .semaphore("export:b", 5)
        .permits(3)
        .acquire()
        .await
        .unwrap();
    let single = stuck.semaphore("export:b", 5).acquire().await.unwrap();
    assert_eq!(a.force_unlock_semaphore("export:b").await.unwrap(), 4);
    assert_eq!(members_in_use(&server, "export:b").await, 0);
    assert!(hold.release().await.unwrap_err().is_lost());
    assert!(single.release().await.unwrap_err().is_lost());
}

/// A number of permits that cannot be taken, or `permits` on another kind, is refused before
/// anything is sent, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_numbers_of_permits_are_refused() {
    let server = RedisServer::start();
    let a = client(&server).await;
    for (permits, take) in [(10, 0), (10, 11), (5000, 1001)] {
        let e = a
            .semaphore("export:c", permits)
            .permits(take)
            .acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, LockError::InvalidConfig(why) if why.contains(&format!("permits({take})"))),
            "{permits}, {take}: {e}"
        );
    }
    for request in [
        a.lock("export:c").permits(2),
        a.read_lock("export:c").permits(2),
    ] {
        let e = request.acquire().await.unwrap_err();
        assert!(
            matches!(&e, LockError::InvalidConfig(why) if why.contains("only a semaphore")),
            "{e}"
        );
    }
    assert_eq!(members_in_use(&server, "export:c").await, 0);
}

/// On a cluster, with a key on each of its three masters: on each, several permits are
/// taken and given back together and leave nothing behind, and a hold of several permits
/// waits at the queue's head, is passed by no single permit, and is handed its permits by
/// the release that frees enough, as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_on_a_cluster() {
    let cluster = ClusterDeployment::start();
    let keys = [
        ["export:c1", "render:c1"],
        ["export:c2", "render:c2"],
        ["export:c3", "render:c4"],
    ];
    assert_eq!(cluster.masters_serving(&keys.map(|[_, key]| key)), 3);
    assert_eq!(cluster.masters_serving(&keys.map(|[key, _]| key)), 3);
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    for [given_back, handed] in keys {
        several_permits_are_taken_and_given_back_together(&a, given_back).await;
        let mut raw = cluster.master_of_key(given_back).unwrap().raw().await;
        assert_eq!(keys_left(&mut raw, &[given_back]).await, 0);
        a_release_hands_several_permits_only_when_they_all_fit(
            &a,
            KeysOn::Cluster(&cluster),
            handed,
        )
        .await;
    }
}

/// A waiter for several permits cancelled around the release it waits for, in several
/// rounds: whatever it was granted is given back in the background, its entry keeps no
/// permits for nobody, and every permit is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_for_several_permits_leaves_nothing_behind() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = a.sibling();
    for round in 0..8 {
        let held = a
            .semaphore("render:cancel", 4)
            .permits(3)
            .acquire()
            .await
            .unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                let three = b.semaphore("render:cancel", 4).permits(3).wait(PATIENCE);
                three.acquire().await.map(drop)
            }
        });
        queued_and_listening(&server, "render:cancel", 1, 1).await;
        rlock_tests::locking::cancel_around_release(round, held, waiter).await;
        // All four are free again within the waiter's background release.
        let all = a
            .semaphore("render:cancel", 4)
            .permits(4)
            .wait(PATIENCE)
            .acquire()
            .await
            .unwrap();
        all.release().await.unwrap();
    }
    let mut raw = server.raw().await;
    let keys = ["render:cancel", "{render:cancel}:waiters"];
    assert_eq!(keys_left(&mut raw, &keys).await, 0);
}

/// A restart that loses the data set takes a hold of several permits, a hold taken over by
/// another client and a count set at run time with it: both holds are lost, and the count
/// is the callers' again (it lived only in Redis; keep persistence on for a count that must
/// outlive a restart). Everything can be taken afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_holds_of_several_permits_and_a_count_set() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let ttl = Duration::from_millis(600);
    a.set_permits("render:restart", 5).await.unwrap();
    let two = a
        .semaphore("render:restart", 3)
        .permits(2)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let handed = a.lock("order:restart").ttl(ttl).acquire().await.unwrap();
    let taken = a
        .sibling()
        .take_over(handed.hand_over().unwrap())
        .await
        .unwrap();
    server.restart();
    for guard in [&two, &taken] {
        tokio::time::timeout(PATIENCE, guard.lost()).await.unwrap();
    }
    assert!(two.release().await.unwrap_err().is_lost());
    assert!(taken.release().await.unwrap_err().is_lost());
    let info = a.inspect_semaphore("render:restart").await.unwrap();
    assert_eq!(
        (info.permits, info.in_use),
        (0, 0),
        "the count set went with the data"
    );
    let three = a
        .semaphore("render:restart", 3)
        .permits(3)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    three.release().await.unwrap();
    a.lock("order:restart")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
