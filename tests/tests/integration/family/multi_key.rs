//! `lock_all`: all of several keys or none, against a real `redis-server` (and Redis
//! Cluster, where the keys live on different masters): callers naming the keys in different
//! orders never deadlock and never overlap, a caller never keeps some of the keys, and the
//! loss of any key is the guard's loss.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::PATIENCE;

/// Tasks of 3 clients transfer between two accounts, half naming them one way and half the
/// other: every transfer completes (no deadlock), and no two run at once on an account.
async fn transfers_in_both_orders_never_deadlock_nor_overlap(first: LockClient) {
    let clients = [first.clone(), first.sibling(), first.sibling()];
    let busy = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..12 {
        let (client, busy, overlaps) = (clients[t % 3].clone(), busy.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let keys = if t % 2 == 0 {
                ["account:1", "account:2"]
            } else {
                ["account:2", "account:1"]
            };
            for _ in 0..10 {
                let both = client.lock_all(keys).wait(PATIENCE).acquire().await?;
                for account in busy.iter() {
                    if account.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                for account in busy.iter() {
                    account.store(false, Ordering::SeqCst);
                }
                both.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_both_orders_on_redis() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    transfers_in_both_orders_never_deadlock_nor_overlap(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_both_orders_in_memory() {
    transfers_in_both_orders_never_deadlock_nor_overlap(LockClient::in_memory()).await;
}

/// On a cluster the keys spread over the masters; each is its own lock there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_both_orders_on_a_cluster() {
    let cluster = rlock_tests::deploy::ClusterDeployment::start();
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    transfers_in_both_orders_never_deadlock_nor_overlap(client).await;
}

/// One key held elsewhere: the caller gets `Busy` for it and keeps none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_cannot_have_every_key_keeps_none() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = a.sibling();
    let held = b.lock("acct:3").acquire().await.unwrap();
    let err = a
        .lock_all(["acct:1", "acct:2", "acct:3"])
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Busy { key, .. } if key == "acct:3"),
        "{err:?}"
    );
    for key in ["acct:1", "acct:2"] {
        let info = b.inspect(key).await.unwrap();
        assert!(!info.held, "{key} was kept: {info:?}");
    }
    held.release().await.unwrap();
}

/// A waiting `lock_all` holds none of its keys: with `y` held elsewhere, `lock_all([x, y])`
/// waits, and meanwhile `x` is free for anyone (no convoy behind a transfer that is not
/// running); once `y` is released, the waiter has both. On one server, on a cluster (where
/// the keys may live on two masters), and in process.
async fn a_waiting_lock_all_holds_nothing(a: LockClient, b: LockClient) {
    for round in 0..3 {
        let (x, y) = (format!("convoy:{round}:x"), format!("convoy:{round}:y"));
        let held = b.lock(&y).acquire().await.unwrap();
        let waiting = tokio::spawn({
            let (a, x, y) = (a.clone(), x.clone(), y.clone());
            async move {
                let both = a.lock_all([x, y]).wait(PATIENCE).acquire().await?;
                let keys: Vec<String> = both.keys().map(|k| k.as_str().to_owned()).collect();
                both.release().await?;
                Ok::<_, LockError>(keys)
            }
        });
        // While it waits, `x` is others' to take, again and again (a `lock_all` that kept it
        // while waiting for `y`, released only after this loop, would keep these waiting).
        for _ in 0..20 {
            let other = b.lock(&x).wait(PATIENCE).acquire().await.unwrap();
            other.release().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!waiting.is_finished(), "the transfer ran with y held");
        held.release().await.unwrap();
        let keys = waiting.await.unwrap().unwrap();
        assert_eq!(keys.len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_all_holds_nothing_on_redis() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    a_waiting_lock_all_holds_nothing(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_all_holds_nothing_on_a_cluster() {
    let cluster = rlock_tests::deploy::ClusterDeployment::start();
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    let b = LockClient::connect(&cluster.url()).await.unwrap();
    a_waiting_lock_all_holds_nothing(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_all_holds_nothing_in_memory() {
    let a = LockClient::in_memory();
    a_waiting_lock_all_holds_nothing(a.sibling(), a).await;
}

/// The keys of one server are taken in one script call, all or none: 2,000 free keys cost
/// one call and one round trip, and with one of them held, none is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_one_server_are_taken_in_one_call() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let keys: Vec<String> = (0..2000).map(|i| format!("many:{i}")).collect();
    // The script in the server's cache first (a server that lacks it gets it whole).
    let warm = a.lock_all(["warm:1", "warm:2"]).acquire().await.unwrap();
    warm.release().await.unwrap();
    let (all, counts) = server
        .commands_during(a.lock_all(&keys).wait(PATIENCE).acquire())
        .await;
    let all = all.unwrap();
    assert_eq!(
        counts.calls("evalsha") + counts.calls("eval"),
        1,
        "{counts:?}"
    );
    assert_eq!(all.keys().count(), 2000);
    all.release().await.unwrap();
    let held = a.sibling().lock("many:1999").acquire().await.unwrap();
    let refused = a.lock_all(&keys).acquire().await;
    assert!(refused.is_err_and(|e| e.is_busy()));
    let mut raw = server.raw().await;
    let left: u32 = redis::cmd("EXISTS")
        .arg(&keys[..1999])
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(left, 0, "a refused lock_all kept keys");
    held.release().await.unwrap();
}

/// Each key is an ordinary lock key, seen held by `inspect` and `lock`; the loss of any one
/// is the guard's loss, and its release reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_of_any_key_is_the_guards() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let ops = a.sibling();
    let both = a.lock_all(["acct:7", "acct:8"]).acquire().await.unwrap();
    let keys: Vec<&str> = both.keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["acct:7", "acct:8"]);
    for key in ["acct:7", "acct:8"] {
        assert!(ops.inspect(key).await.unwrap().held);
        assert!(ops.lock(key).acquire().await.unwrap_err().is_busy());
    }
    assert!(a.force_unlock("acct:8").await.unwrap());
    tokio::time::timeout(PATIENCE, both.lost()).await.unwrap();
    assert!(both.is_lost());
    assert!(both.release().await.unwrap_err().is_lost());
    // The key that was not broken was given back all the same.
    assert!(!ops.inspect("acct:7").await.unwrap().held);
}

/// Inside a `lock_all` scope, locking one of its keys re-enters it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_lock_of_one_key_re_enters_it() {
    let client = LockClient::in_memory();
    let reentered = client
        .lock_all(["acct:1", "acct:2"])
        .run(async {
            let inner = client.lock("acct:2").acquire().await.unwrap();
            let reentrant = inner.is_reentrant();
            inner.release().await.unwrap();
            reentrant
        })
        .await
        .unwrap();
    assert!(reentered);
    assert!(!client.inspect("acct:2").await.unwrap().held);
}

/// A `lock_all` inside a locked scope of one of its keys sets that key's lease anew under the
/// scope's token, only while the key still holds it: once another client broke the scope's
/// lock, the scope's hold is lost, and the `lock_all` answers so and takes nothing (it took
/// the broken key again before, under a token whose hold was lost, and the other key with it).
async fn a_lock_all_does_not_take_back_its_scopes_broken_key(client: LockClient) {
    let ops = client.sibling();
    let (told, answer) = std::sync::mpsc::channel();
    let _ = client
        .lock("acct:5")
        .run(async {
            assert!(ops.force_unlock("acct:5").await.unwrap());
            let both = client.lock_all(["acct:5", "acct:6"]).acquire().await;
            told.send(both.map(drop)).unwrap();
        })
        .await;
    let err = answer.recv().unwrap().unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key } if key == "acct:5"),
        "{err:?}"
    );
    for key in ["acct:5", "acct:6"] {
        assert!(!ops.inspect(key).await.unwrap().held, "{key} left held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_does_not_take_back_its_scopes_broken_key_on_redis() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    a_lock_all_does_not_take_back_its_scopes_broken_key(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_does_not_take_back_its_scopes_broken_key_in_memory() {
    a_lock_all_does_not_take_back_its_scopes_broken_key(LockClient::in_memory()).await;
}

/// Refused before anything is sent.
#[tokio::test]
async fn requests_that_make_no_sense_are_refused() {
    let client = LockClient::in_memory();
    for request in [
        client.lock_all(["a", "b", "a"]),
        client.lock_all(Vec::<&str>::new()),
        client.lock_all(["a", "b"]).fenced(),
    ] {
        let err = request.acquire().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
}

#[rlock_runtime::distributed_lock(keys = ["acct:<from>", "acct:<to>"], client = client, wait = "30s")]
async fn transfer(client: &LockClient, from: u64, to: u64) -> Result<(u64, u64), LockError> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok((from, to))
}

/// The attribute's `keys`, on a real server: transfers named both ways complete, and while
/// one runs both accounts are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_takes_every_key() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let client = client.sibling();
        tasks.push(tokio::spawn(async move {
            let (from, to) = if t % 2 == 0 { (5, 6) } else { (6, 5) };
            for _ in 0..5 {
                transfer(&client, from, to).await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let held = client
        .lock_all(["acct:5", "acct:6"])
        .run(async {
            client
                .sibling()
                .lock("acct:6")
                .acquire()
                .await
                .unwrap_err()
                .is_busy()
        })
        .await
        .unwrap();
    assert!(held);
}

/// A `lock_all` guard's release cut short (its caller cancelled right after it began) gives
/// every key back: each key's release goes on in the background once begun. (Released one
/// after the other, a cut between two left the later keys held by nobody for their lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_short_gives_every_key_back() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let keys = ["cut:1", "cut:2", "cut:3"];
    let mut cut = 0;
    for _ in 0..5 {
        let all = a
            .lock_all(keys)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let mut release = Box::pin(all.release());
        // One poll: the release begins, then its caller goes away. (On a loaded machine the
        // replies may all come within that poll: then nothing was cut, and every key is
        // given back all the same.)
        let polled = release
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        cut += u32::from(matches!(polled, Poll::Pending));
        drop(release);
        let mut raw = server.raw().await;
        let left = rlock_tests::locking::keys_left(&mut raw, &keys).await;
        assert_eq!(left, 0, "a cut release left keys held by nobody");
    }
    eprintln!("{cut} of 5 releases cut before their replies came");
}
