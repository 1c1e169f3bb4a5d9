//! Redis Cluster against a real local deployment (three masters, three replicas): the usual
//! semantics, keys spread over every shard, a watchdog renewing a thousand keys across slots
//! without a `CROSSSLOT`, releases announced on sharded channels, holds renewed while their
//! slot migrates, and a master failover after which every hold on its shard is renewed on the
//! promoted replica or reported lost.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rlock_runtime::{LockClient, LockGuard, LockOptions};
use rlock_tests::RedisServer;
use rlock_tests::deploy::ClusterDeployment;
use rlock_tests::locking::{
    KeysOn, client_at, handoff, hold_all, kept_or_lost, serving_again, stored, wait_then_release,
};

const TIMEOUT: Duration = Duration::from_millis(500);

async fn cluster_client(cluster: &ClusterDeployment) -> LockClient {
    client_at(&cluster.url(), TIMEOUT).await
}

async fn dbsize(node: &RedisServer) -> i64 {
    let mut raw = node.raw().await;
    redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap()
}

async fn slot_of(node: &RedisServer, key: &str) -> u16 {
    let mut raw = node.raw().await;
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semantics_hold_on_a_cluster_and_keys_spread_over_every_shard() {
    let cluster = ClusterDeployment::start();
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;

    // Thirty keys land on all three masters.
    let mut guards = Vec::new();
    for i in 0..30 {
        guards.push(
            a.lock(format!("order:{i}"))
                .fenced()
                .acquire()
                .await
                .unwrap(),
        );
    }
    for master in cluster.masters() {
        assert!(dbsize(master).await > 0, "a master holds none of 30 keys");
    }
    for guard in guards {
        assert!(guard.fence().is_some());
        assert!(
            b.lock(guard.key().clone())
                .acquire()
                .await
                .unwrap_err()
                .is_busy()
        );
        guard.extend(Duration::from_secs(20)).await.unwrap();
        guard.release().await.unwrap();
    }

    // Reentrancy, and a waiter woken by a release announced on its key's shard.
    let seen = a
        .with_lock("cart:7", LockOptions::new(), async {
            a.lock("cart:7").acquire().await.unwrap().is_reentrant()
        })
        .await
        .unwrap();
    assert!(seen);
    let held = a
        .lock("cart:8")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let slot = slot_of(cluster.masters()[0], "cart:8").await;
    let shard = cluster.master_of_slot(slot).unwrap();
    shard.reset_stats();
    handoff(held, &b, Duration::from_secs(10)).await;
    if cluster.has_sharded_pubsub() {
        let stats = shard.command_stats();
        assert!(
            stats.get("ssubscribe").copied().unwrap_or(0) >= 1,
            "the waiter subscribed on the key's shard: {stats:?}"
        );
    }
    // Without sharded pub/sub (Redis before 7.0) the waiter subscribed nothing and found the
    // lock handed to it at a check in: `handoff` saw it take the lock.
}

/// A holder's release declares the fence record only when a fenced waiter is next, on a
/// cluster as on one server: the release asks to be called again with it, and that call
/// hands the waiter the lock with a fence and tells it on its key's shard channel, not on a
/// plain one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_waiter_is_handed_the_lock_on_its_shard() {
    let cluster = ClusterDeployment::start();
    if !sharded_or_say_so(&cluster, "a_fenced_waiter_is_handed_the_lock_on_its_shard") {
        return;
    }
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;
    let key = "cart:9";
    let held = a
        .lock(key)
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        b.lock(key)
            .fenced()
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    KeysOn::Cluster(&cluster)
        .queued_and_listening(key, 1, 1)
        .await;
    for master in cluster.masters() {
        master.reset_stats();
    }
    held.release().await.unwrap();
    let granted = waiter.await.unwrap().unwrap();
    assert!(granted.fence().is_some(), "handed without a fence");
    let shard = cluster.master_of_key(key).unwrap().command_stats();
    assert!(
        shard.get("spublish").copied().unwrap_or(0) >= 1,
        "told on its shard: {shard:?}"
    );
    for master in cluster.masters() {
        let stats = master.command_stats();
        assert_eq!(stats.get("publish"), None, "{stats:?}");
    }
    granted.release().await.unwrap();
}

/// Whether `cluster` has sharded pub/sub, saying so when it has not: a test of what lives on
/// a key's shard (a subscription that follows its slot) has nothing to check on a cluster
/// where waiters listen on nothing (Redis before 7.0, where the semantics test checks that
/// they are handed the lock all the same).
fn sharded_or_say_so(cluster: &ClusterDeployment, test: &str) -> bool {
    let sharded = cluster.has_sharded_pubsub();
    if !sharded {
        eprintln!(
            "{test}: {} has no sharded pub/sub; its waiters check in on a timer instead of \
             listening on their key's shard",
            cluster.nodes[0].version()
        );
    }
    sharded
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_a_thousand_keys_across_slots() {
    let cluster = ClusterDeployment::start();
    let client = cluster_client(&cluster).await;
    let mut guards: Vec<LockGuard> = Vec::new();
    for i in 0..1000 {
        guards.push(
            client
                .lock(format!("job:{i}"))
                .ttl(Duration::from_millis(1500))
                .acquire()
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = client.metrics();
    assert_eq!(m.renew_failures, 0, "{m:?}");
    assert!(m.renewed >= 1000, "{m:?}");
    assert!(guards.iter().all(|g| !g.is_lost()), "{m:?}");
    // Every lock key is still there, on whichever master its slot lives (DBSIZE would count
    // the client's holder card too).
    let listed = client.list("job:*", 2000).await.unwrap();
    assert_eq!((listed.keys.len(), listed.complete), (1000, true));
    let mut total = 0;
    for master in cluster.masters() {
        total += dbsize(master).await;
    }
    assert!(total >= 1000, "{total} keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_master_fails_over_holds_are_renewed_on_the_replica_or_reported_lost() {
    let cluster = ClusterDeployment::start();
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;
    let keys = (0..30).map(|i| format!("held:{i}"));
    let held = hold_all(&a, keys, Duration::from_secs(3)).await;
    // Let replication carry them over, as it normally would before a crash.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let victim = cluster
        .master_of_slot(slot_of(cluster.masters()[0], "held:0").await)
        .unwrap();
    cluster.fail_over(victim);

    // The clients serve again, on every shard.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..30 {
        let guard = serving_again(&b, &format!("after:{i}"), deadline).await;
        guard.release().await.unwrap();
    }

    // A few renewal periods later, every hold is renewed where its slot lives now, or lost.
    tokio::time::sleep(Duration::from_secs(4)).await;
    kept_or_lost(&held, |key| cluster.master_of_key(key).unwrap()).await;
}

/// Sends one command to `node` and returns its reply.
async fn on(node: &RedisServer, args: &[&str]) -> redis::Value {
    let mut raw = node.raw().await;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut raw)
        .await
        .unwrap_or_else(|e| panic!("{args:?} on port {}: {e}", node.port()))
}

/// A slot's migration from `source` to `target`, by hand, as `redis-cli --cluster reshard`
/// does it: begun, its keys moved in batches, then finished on every master.
struct Migration<'a> {
    source: &'a RedisServer,
    target: &'a RedisServer,
    slot: String,
    target_id: String,
}

impl<'a> Migration<'a> {
    /// Marks `slot` importing on `target` and migrating on `source`.
    async fn begin(source: &'a RedisServer, target: &'a RedisServer, slot: u16) -> Self {
        let id = |v: redis::Value| -> String { redis::from_redis_value(v).unwrap() };
        let source_id = id(on(source, &["CLUSTER", "MYID"]).await);
        let target_id = id(on(target, &["CLUSTER", "MYID"]).await);
        let slot = slot.to_string();
        on(
            target,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
        )
        .await;
        on(
            source,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
        )
        .await;
        Self {
            source,
            target,
            slot,
            target_id,
        }
    }

    /// Moves `keys` to the target.
    async fn carry(&self, keys: &[String]) {
        let port = self.target.port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().map(String::as_str));
        on(self.source, &migrate).await;
    }

    /// The keys of the slot still on the source (at most 100).
    async fn left(&self) -> Vec<String> {
        let keys = on(
            self.source,
            &["CLUSTER", "GETKEYSINSLOT", &self.slot, "100"],
        )
        .await;
        redis::from_redis_value(keys).unwrap()
    }

    /// Gives the slot to the target on every master.
    async fn finish(self, masters: &[&RedisServer]) {
        for master in masters {
            on(
                master,
                &["CLUSTER", "SETSLOT", &self.slot, "NODE", &self.target_id],
            )
            .await;
        }
    }
}

/// Whether `e` is the redirect or refusal of a script whose keys a migrating slot splits
/// between its two nodes (`TRYAGAIN`, or `MOVED` redirected too many times), as rlock passes
/// the server's error on; or the call's time running out, which a loaded machine may reach
/// first.
fn split_by_the_migration(e: &rlock_runtime::LockError) -> bool {
    let refused = matches!(e, rlock_runtime::LockError::Unavailable { .. })
        && std::error::Error::source(e).is_some_and(|source| {
            let source = format!("{source:?}");
            source.starts_with("TryAgain") || source.starts_with("Moved")
        });
    refused
        || matches!(
            e,
            rlock_runtime::LockError::Timeout {
                operation: rlock_runtime::Operation::Acquire,
                ..
            }
        )
}

/// A slot migrated by hand, as `redis-cli --cluster reshard` does it, while holds in it live.
/// While the slot is half-moved, a renewal whose keys are split between the two nodes gets
/// `TRYAGAIN`; the keys then go one by one, each redirected (`ASK`) to the node that has it.
/// Every hold stays held and renewed through the migration and after it, on the new owner,
/// and no other client is granted any of the keys meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_stay_renewed_while_their_slot_migrates() {
    let cluster = ClusterDeployment::start();
    let a = cluster_client(&cluster).await;
    // A redirected command may be retried by the driver (and the slot map rebuilt) before
    // rlock re-sends it with `ASKING`: on a loaded machine that outlasts 500 ms, and once,
    // at the end of a whole CI run on Valkey, 2 s; so the contender gets room to hear its
    // `Busy`.
    let b = client_at(&cluster.url(), Duration::from_secs(5)).await;
    // Twenty holds in one slot (one hash tag), renewed every 300 ms.
    let keys: Vec<String> = (0..20).map(|i| format!("{{moving}}:{i}")).collect();
    let held = hold_all(&a, keys.clone(), Duration::from_millis(900)).await;
    let masters = cluster.masters();
    let slot = slot_of(masters[0], &keys[0]).await;
    let source = cluster.master_of_slot(slot).unwrap();
    let target = *masters.iter().find(|m| m.port() != source.port()).unwrap();
    // Half the keys move, then the other half, with pauses of several renewal periods in
    // which the watchdog and a contender meet the slot half-moved.
    let migration = Migration::begin(source, target, slot).await;
    // Before Redis 7.0 a contender's acquire is the acquire script (no `SET … NX … GET`),
    // whose keys a half-moved slot splits: Redis answers `TRYAGAIN` (or, at the importing
    // node, `MOVED`) instead of running it, and the contender is told Redis is unavailable
    // (or runs out of time on a loaded machine).
    // Nobody is granted the key and the holds stay renewed, which is what is checked there.
    let one_command_acquire = source.version().has_set_nx_get();
    // All twenty at once, so that redirected commands share the client's connections.
    let contend = || async {
        let mut attempts = tokio::task::JoinSet::new();
        for key in keys.clone() {
            let b = b.clone();
            attempts.spawn(async move { (b.lock(key.as_str()).acquire().await, key) });
        }
        while let Some(attempt) = attempts.join_next().await {
            match attempt.unwrap() {
                (Ok(_), key) => panic!("{key} granted to a second client during the migration"),
                (Err(e), key) => assert!(
                    e.is_busy() || (!one_command_acquire && split_by_the_migration(&e)),
                    "{key}: {e} ({:?})",
                    std::error::Error::source(&e)
                ),
            }
        }
        for guard in &held {
            assert!(!guard.is_lost(), "{} reported lost", guard.key());
        }
    };
    for half in keys.chunks(10) {
        migration.carry(half).await;
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            contend().await;
        }
    }
    migration.finish(&masters).await;

    // The slot has moved: the same holds are renewed on the new owner.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        contend().await;
    }
    for guard in &held {
        assert_eq!(
            stored(target, guard.key().as_str()).await.as_deref(),
            Some(guard.token())
        );
    }
    for guard in held {
        guard.release().await.unwrap();
    }
}

/// A waiter's sharded subscription lives on the node of its key's slot; when the slot moves,
/// Redis ends it (`sunsubscribe`). The feed subscribes it again on the new node at once, so
/// releases there find the waiter live. (It was noticed only by the health check, one
/// channel a second in turn: with twelve keys waited for, after up to twelve seconds, while
/// releases skipped the waiter.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_subscribed_again_when_its_slot_moves() {
    let cluster = ClusterDeployment::start();
    if !sharded_or_say_so(&cluster, "a_waiter_is_subscribed_again_when_its_slot_moves") {
        return;
    }
    let holder = cluster_client(&cluster).await;
    let waiter = cluster_client(&cluster).await;
    let moving = "{mv}:k";
    let keys: Vec<String> = std::iter::once(moving.to_owned())
        .chain((0..11).map(|i| format!("stay:{i}")))
        .collect();
    let held = hold_all(&holder, keys.clone(), Duration::from_secs(10)).await;
    let mut waiting = Vec::new();
    for key in &keys {
        let key: &'static str = Box::leak(key.clone().into_boxed_str());
        waiting.push(wait_then_release(&waiter, key, Duration::from_secs(60)));
    }
    let masters = cluster.masters();
    let slot = slot_of(masters[0], moving).await;
    let source = cluster.master_of_slot(slot).unwrap();
    let target = *masters.iter().find(|m| m.port() != source.port()).unwrap();
    let pattern = "rlock:released:{mv}:*";
    for _ in 0..500 {
        if source.channels(pattern, true).await.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        source.channels(pattern, true).await.len(),
        1,
        "never listening"
    );

    // The slot moves, keys and all.
    let migration = Migration::begin(source, target, slot).await;
    migration.carry(&migration.left().await).await;
    migration.finish(&masters).await;
    // Well within the health check's turn through twelve channels.
    let mut subscribed = false;
    for _ in 0..30 {
        if target.channels(pattern, true).await.len() == 1 {
            subscribed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        subscribed,
        "the waiter was not subscribed on the slot's new node within 3 s"
    );
    for guard in held {
        guard.release().await.unwrap();
    }
    for waiting in waiting {
        waiting.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_unlock_on_a_cluster() {
    let cluster = ClusterDeployment::start();
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;
    rlock_tests::locking::inspect_and_force_unlock(&a, &b, "admin:cluster").await;
}

/// Clients listening for `shard:1`'s handoffs on `node` (each on its own channel).
async fn listening(node: &RedisServer) -> usize {
    node.channels("rlock:released:{shard:1}:shard:1:*", true)
        .await
        .len()
}

async fn listening_on_each(cluster: &ClusterDeployment, down: u16) -> Vec<(u16, usize)> {
    let mut out = Vec::new();
    for n in cluster.nodes.iter().filter(|n| n.port() != down) {
        out.push((n.port(), listening(n).await));
    }
    out
}

/// A release skips a waiter whose client does not listen on the key's shard: after a master
/// fails over, the waiting client's sharded subscription is on the promoted replica, so the
/// release there still hands it the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_a_waiter_still_listens_on_its_shard() {
    let cluster = ClusterDeployment::start();
    if !sharded_or_say_so(
        &cluster,
        "after_a_failover_a_waiter_still_listens_on_its_shard",
    ) {
        return;
    }
    // The holder's commands may take 5 s, so that its replica has half of that to confirm
    // the grant on a loaded machine (with the suite's 500 ms, 250 ms).
    let holder = client_at(&cluster.url(), Duration::from_secs(5)).await;
    let waiter = cluster_client(&cluster).await;
    // Confirmed by the replica: a master killed right after the grant must not take the
    // lock with it (replication is asynchronous), or the holder's release finds it gone.
    let held = holder
        .lock("shard:1")
        .ttl(Duration::from_secs(30))
        .min_replicas(1)
        .acquire()
        .await
        .unwrap();
    let waiting = wait_then_release(&waiter, "shard:1", Duration::from_secs(40));
    let deadline = Instant::now() + Duration::from_secs(20);
    let master = cluster.master_of_key("shard:1").unwrap();
    while listening(master).await == 0 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old = master.port();
    cluster.fail_over(master);
    let promoted = cluster.master_of_key("shard:1").unwrap();
    assert_ne!(promoted.port(), old);
    let deadline = Instant::now() + Duration::from_secs(20);
    while listening(promoted).await == 0 {
        if Instant::now() >= deadline {
            let waiter = if waiting.is_finished() {
                "the waiter's acquisition ended"
            } else {
                "the waiter still waits"
            };
            panic!(
                "the waiter's client does not listen on the promoted master: {:?} ({waiter})",
                listening_on_each(&cluster, old).await,
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap();
}

/// A semaphore's permits and a read-write lock's readers, all in one slot, across a failover
/// of that slot's master: afterwards every lease is renewed on the promoted replica (its token
/// in the sorted set there) or reported lost, never kept without it; the new master never
/// counts more permits than the semaphore has; and both take new holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_read_leases_follow_a_master_failover() {
    let cluster = ClusterDeployment::start();
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;
    let (semaphore, read_write) = ("family:{f}:sem", "family:{f}:rw");
    let ttl = Duration::from_secs(3);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(a.semaphore(semaphore, 3).ttl(ttl).acquire().await.unwrap());
        held.push(a.read_lock(read_write).ttl(ttl).acquire().await.unwrap());
    }
    // Let replication carry them over, as it normally would before a crash.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let victim = cluster.master_of_key(semaphore).unwrap();
    cluster.fail_over(victim);

    // Both kinds take new holders again, on the promoted replica.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (permit, reader) = loop {
        let permit = b.semaphore(semaphore, 3).acquire().await;
        let reader = b.read_lock(read_write).acquire().await;
        match (permit, reader) {
            (Ok(permit), Ok(reader)) => break (permit, reader),
            (permit, reader) => {
                let failed = [permit.err(), reader.err()];
                assert!(Instant::now() < deadline, "not serving again: {failed:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    // A few renewal periods later, every lease is in the set on the new master, or lost.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let owner = cluster.master_of_key(semaphore).unwrap();
    let mut raw = owner.raw().await;
    for (key, holders) in [(semaphore, 3), (read_write, usize::MAX)] {
        let tokens: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(key)
            .arg(0)
            .arg("+inf")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(tokens.len() <= holders, "{key}: {tokens:?}");
        for guard in held.iter().chain([&permit, &reader]) {
            if guard.key().as_str() == key {
                assert!(
                    guard.is_lost() || tokens.iter().any(|t| t == guard.token()),
                    "{key}: a lease missing on the new master was kept"
                );
            }
        }
    }
    permit.release().await.unwrap();
    reader.release().await.unwrap();
}

/// A key with a `}` outside any hash tag (`a}b`, `{}x`) hashes whole, so its queue and fence
/// record could not share its slot: every kind refuses it with the reason before Redis is
/// asked, and a namespace of that shape is refused when the client is built. A key whose
/// tag is valid (`x}{y}`) waits, fences and hands on as any other. (Such keys' semaphore,
/// read-write and waiting calls failed with `CROSSSLOT`, reported as "Redis is unavailable".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_whose_companions_cannot_share_their_slot_are_refused() {
    use rlock_runtime::LockError;

    let cluster = ClusterDeployment::start();
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    for key in ["a}b", "{}x", "}"] {
        for refused in [
            a.lock(key).wait(Duration::from_secs(1)).acquire().await,
            a.semaphore(key, 2).acquire().await,
            a.read_lock(key).acquire().await,
            a.write_lock(key).fenced().acquire().await,
        ] {
            assert!(
                matches!(&refused, Err(LockError::InvalidKey { reason, .. }) if reason.contains("hash tag")),
                "{key}: {refused:?}"
            );
        }
    }
    let namespaced = LockClient::builder()
        .url(cluster.url())
        .namespace("shop}")
        .connect()
        .await;
    assert!(
        matches!(&namespaced, Err(LockError::InvalidConfig(m)) if m.contains("namespace")),
        "{namespaced:?}"
    );
    let key = "x}{y}";
    let held = a.write_lock(key).fenced().acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let reader = b
                .read_lock(key)
                .wait(Duration::from_secs(30))
                .acquire()
                .await?;
            reader.release().await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap();
    let permit = a.semaphore("p}{q}", 1).acquire().await.unwrap();
    permit.release().await.unwrap();
}

/// A master that stops answering (its clients paused, while the cluster bus keeps it a
/// member, so nothing fails over) costs only the calls on its slots: one there ends with a
/// timeout, not a hang, while the other masters' keys are taken and released as before; once
/// it answers again, so do its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_master_stalls_only_its_own_slots() {
    let cluster = ClusterDeployment::start();
    let client = client_at(&cluster.url(), Duration::from_secs(1)).await;
    let silent_key = "silent:1";
    let silent = cluster.master_of_key(silent_key).unwrap();
    let other_key = (0..100)
        .map(|i| format!("other:{i}"))
        .find(|key| cluster.master_of_key(key).unwrap().port() != silent.port())
        .unwrap();
    // Both masters' connections open.
    for key in [silent_key, other_key.as_str()] {
        let guard = client.lock(key).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let mut raw = silent.raw().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5000)
        .query_async(&mut raw)
        .await
        .unwrap();
    let stalled = tokio::spawn({
        let client = client.clone();
        async move { client.lock(silent_key).acquire().await.map(drop) }
    });
    for _ in 0..5 {
        let guard = client.lock(other_key.as_str()).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let err = stalled.await.unwrap().unwrap_err();
    assert!(
        matches!(err, rlock_runtime::LockError::Timeout { .. }),
        "{err}"
    );
    let guard = serving_again(
        &client,
        silent_key,
        Instant::now() + Duration::from_secs(30),
    )
    .await;
    guard.release().await.unwrap();
}
