//! A master managed by Redis Sentinel, against a real deployment (master, two replicas, three
//! sentinels on loopback): the usual semantics through the sentinels, and a failover after
//! which the client serves again and every hold taken before it is either renewed on the new
//! master or reported lost, never silently kept.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::deploy::SentinelDeployment;
use rlock_tests::locking::{client_at, handoff, hold_all, kept_or_lost, serving_again, stored};

const TIMEOUT: Duration = Duration::from_millis(300);

async fn sentinel_client(deployment: &SentinelDeployment) -> LockClient {
    client_at(&deployment.url(), TIMEOUT).await
}

/// Takes `key` through `client` and checks that `master` stores it; releases it.
async fn locks_on(client: &LockClient, master: &RedisServer, key: &str) {
    let guard = client.lock(key).acquire().await.unwrap();
    assert_eq!(stored(master, key).await.as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}

/// Switches the master over (`SENTINEL FAILOVER`), waits until `client` has heard of it, and
/// checks that its next acquisition goes straight to the new master.
async fn follows_a_switch(deployment: &SentinelDeployment, client: &LockClient) {
    let new_master = deployment.switch_over();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.metrics().master_switches == 0 {
        assert!(Instant::now() < deadline, "the switch was never heard");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    locks_on(client, new_master, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_through_the_sentinels_and_follow_a_failover() {
    let deployment = SentinelDeployment::start();
    let a = sentinel_client(&deployment).await;
    let b = sentinel_client(&deployment).await;
    let master = deployment.master().unwrap();

    // The usual semantics, on the master the sentinels name.
    let guard = a
        .lock("order:1")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        stored(master, "order:1").await.as_deref(),
        Some(guard.token())
    );
    assert!(b.lock("order:1").acquire().await.unwrap_err().is_busy());
    handoff(guard, &b, Duration::from_secs(5)).await;

    // Holds taken before the failover, renewed by the watchdog (ttl 2 s).
    let keys = (0..20).map(|i| format!("held:{i}"));
    let held = hold_all(&a, keys, Duration::from_secs(2)).await;
    // Let replication carry them over, as it normally would before a crash.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let new_master = deployment.fail_over();

    // Both clients serve again within a few seconds, on the new master.
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = serving_again(&a, "after", deadline).await;
    assert_eq!(
        stored(new_master, "after").await.as_deref(),
        Some(after.token())
    );
    serving_again(&b, "after:b", deadline)
        .await
        .release()
        .await
        .unwrap();

    // One lock did not make it to the new master (asynchronous replication loses the last
    // writes before a crash): its holder must learn it.
    let mut raw = new_master.raw().await;
    let () = redis::cmd("DEL")
        .arg("held:0")
        .query_async(&mut raw)
        .await
        .unwrap();

    // Give every hold a few renewal periods on the new master, then check each: renewed there,
    // or reported lost; never kept without the key.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        held[0].is_lost(),
        "a hold missing on the new master was kept"
    );
    for guard in kept_or_lost(&held, |_| new_master).await {
        let busy = b.lock(guard.key().clone()).acquire().await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
    }
    after.release().await.unwrap();
    // The client heard the switch. (A loaded machine may see a second failover: a promoted
    // replica slow to answer the sentinels is judged down in turn, and its successor
    // announced too; how many failovers Redis makes is not the client's doing.)
    assert!(a.metrics().master_switches >= 1, "{:?}", a.metrics());
}

/// An operator's failover (`SENTINEL FAILOVER`): the old master stays up, demoted to a replica.
/// The client hears the sentinels announce the new master (`+switch-master`) and moves there
/// before any command of its own meets the old one, so the first acquisition afterwards goes
/// straight to the new master instead of failing with `READONLY` on the old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_announced_by_the_sentinels_moves_the_client_at_once() {
    let deployment = SentinelDeployment::start();
    let a = sentinel_client(&deployment).await;
    locks_on(&a, deployment.master().unwrap(), "before").await;
    follows_a_switch(&deployment, &a).await;
    assert_eq!(
        a.metrics().master_switches,
        1,
        "one switch, heard from three sentinels"
    );
}

/// The watcher of the sentinels' switch announcements checks its subscribed connections with
/// `PING`, whose reply there is `["pong", ""]`: it keeps one subscription per sentinel for as
/// long as the client lives. (It read the reply as a string, failed, and reconnected every
/// second, each time a window in which a `+switch-master` went unheard.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switch_watcher_keeps_its_subscriptions() {
    let deployment = SentinelDeployment::start();
    let a = sentinel_client(&deployment).await;
    locks_on(&a, deployment.master().unwrap(), "watched").await;
    // Four health checks of each watcher's connection.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let ages: Vec<Vec<u64>> = deployment
        .sentinels
        .iter()
        .map(|s| s.subscriber_ages())
        .collect();
    eprintln!("ages of the subscribed connections, per sentinel: {ages:?}");
    assert!(
        ages.iter().all(|on_one| !on_one.is_empty()),
        "a sentinel is not watched: {ages:?}"
    );
    assert!(
        ages.iter().flatten().all(|&age| age >= 3),
        "a watcher reconnected within the last 3 s: {ages:?}"
    );
    drop(a);
}

/// `rediss+sentinel://`: the sentinels and the servers are reached over TLS, trusting a
/// private authority; the client locks on the master, and its switch watchers (TLS too) move
/// it to the new master after a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_through_sentinels_over_tls_and_follows_a_switch() {
    let deployment = SentinelDeployment::start_tls();
    let ca = deployment.ca().unwrap();
    let a = LockClient::builder()
        .url(deployment.url())
        .tls_root_certificate(ca)
        .command_timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    locks_on(&a, deployment.master().unwrap(), "before").await;

    // Without the authority, the sentinels' certificates are not trusted.
    let untrusted = LockClient::builder()
        .url(deployment.url())
        .command_timeout(TIMEOUT)
        .connect()
        .await;
    assert!(untrusted.is_err());

    follows_a_switch(&deployment, &a).await;
}
