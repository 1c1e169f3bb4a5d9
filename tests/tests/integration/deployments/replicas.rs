//! Replica acknowledgement (`min_replicas`, Redisson's `syncSlaves`) against a real master and
//! replica: a grant counts only once `WAIT` confirms enough replicas have it; otherwise the
//! lock is taken back and `NotReplicated` returned.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockError, LockOptions};
use rlock_tests::RedisServer;
use rlock_tests::deploy::redlock_url;
use rlock_tests::locking::{client_for, stored};

async fn exists(server: &RedisServer, key: &str) -> bool {
    stored(server, key).await.is_some()
}

/// A master and one replica in sync.
async fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    replica.wait_linked().await;
    (master, replica)
}

/// Asks for `key` with `needed` replicas, which must be refused after `acked` confirmed.
async fn refused(client: &LockClient, key: &str, needed: u32, acked: u32) {
    let err = client
        .lock(key)
        .min_replicas(needed)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::NotReplicated { acked: a, needed: n, .. } if a == acked && n == needed),
        "{err}"
    );
    assert!(err.is_backend());
}

/// The refused grant of `key` is not left behind on `master`.
async fn taken_back(master: &RedisServer, key: &str) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !exists(master, key).await,
        "the unconfirmed grant of {key} was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_counts_once_replicas_confirm_it_and_is_taken_back_otherwise() {
    let (master, replica) = master_and_replica().await;
    let client = client_for(&master, Duration::from_millis(400)).await;

    // Confirmed by the replica: held, and the replica has it.
    let guard = client
        .lock("order:1")
        .min_replicas(1)
        .acquire()
        .await
        .unwrap();
    assert!(exists(&replica, "order:1").await);
    guard.release().await.unwrap();

    // More replicas than there are: refused, and nothing left behind.
    refused(&client, "order:2", 2, 1).await;
    taken_back(&master, "order:2").await;

    // The replica stops answering: no confirmation within the timeout.
    replica.pause();
    refused(&client, "order:3", 1, 0).await;
    replica.resume();
    taken_back(&master, "order:3").await;

    // A client-wide default applies to locks that do not say, and a lock can opt out.
    let strict = LockClient::builder()
        .url(master.url())
        .min_replicas(2)
        .command_timeout(Duration::from_millis(400))
        .connect()
        .await
        .unwrap();
    assert!(
        strict
            .lock("order:4")
            .acquire()
            .await
            .unwrap_err()
            .is_backend()
    );
    let relaxed = LockOptions::new().min_replicas(0);
    strict
        .with_lock("order:4", relaxed, async {})
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_replica_acknowledgement() {
    let masters = RedisServer::start_many(3);
    let client = LockClient::connect(&redlock_url(&masters)).await.unwrap();
    let err = client
        .lock("k")
        .min_replicas(1)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(why) if why.contains("Redlock")),
        "{err}"
    );
}

/// The wait budget is a deadline for the replicas' confirmation too: on a server with no
/// replica, `WAIT` takes half the command timeout (1 s) to answer none, but a caller with a
/// 100 ms budget has its answer (an error: nothing is known) by then, and the unconfirmed
/// grant is taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_confirmation_stays_within_the_wait_budget() {
    let lone = RedisServer::start();
    let client = LockClient::connect(&lone.url()).await.unwrap();
    let budget = Duration::from_millis(100);
    let started = Instant::now();
    let err = client
        .lock("budget")
        .min_replicas(1)
        .wait(budget)
        .acquire()
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(err.is_backend(), "{err:?}");
    assert!(
        took < budget + Duration::from_millis(250),
        "a {budget:?} budget returned after {took:?} ({err:?})"
    );
    taken_back(&lone, "budget").await;
}
