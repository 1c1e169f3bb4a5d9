//! The upgradeable read lock against a real `redis-server` (and the in-process backend where
//! it keeps the same rules; DistributedLock's `UpgradeableReadLock` cases transcribed): one
//! upgradeable reader beside any readers and no writer; an upgrade that waits for the readers
//! already in, first in the queue, with no writer between and no new reader let in; its
//! write fenced, and the read still held after it; an upgrade inside the read's scope; a
//! read lost while its upgrade waits, a forged upgrade entry and a cancelled upgrade, none of
//! which holds the queue back; a crashed upgradeable reader; a hold handed over; an
//! operator's force-unlock; a restart; and a cluster.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands as _;
use rlock_runtime::{HoldToken, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::{
    PATIENCE, cancel_around_release, client, keys_left, queued_and_listening, wait_queue_len,
};

/// A lease long enough to outlast any step of a test on a loaded machine.
const LONG: Duration = Duration::from_secs(20);

/// The upgradeable reader shares the lock with readers, and excludes writers and a second
/// upgradeable reader; the write it upgrades to is fenced, and once released the read still
/// holds (and may upgrade again); its release frees the right for another.
async fn one_upgradeable_reader_beside_readers(a: &LockClient, b: &LockClient) {
    let key = "config:u1";
    let upgradeable = a.upgradeable_read_lock(key).acquire().await.unwrap();
    let reader = b.read_lock(key).acquire().await.unwrap();
    let second = b.upgradeable_read_lock(key).acquire().await.unwrap_err();
    assert!(second.is_busy(), "{second:?}");
    let writer = b.write_lock(key).acquire().await.unwrap_err();
    assert!(writer.is_busy(), "{writer:?}");
    let info = b.inspect_read_write(key).await.unwrap();
    assert!(
        info.upgradeable && !info.writer && info.readers == 2,
        "{info:?}"
    );
    // Not while the other reader reads: busy at once, the read kept.
    let early = upgradeable
        .upgrade_within(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(early.is_busy(), "{early:?}");
    reader.release().await.unwrap();
    let write = upgradeable.upgrade_within(PATIENCE).await.unwrap();
    let first_fence = write.fence().expect("an upgrade is fenced");
    let info = b.inspect_read_write(key).await.unwrap();
    assert!(info.writer && info.upgradeable, "{info:?}");
    assert!(b.read_lock(key).acquire().await.unwrap_err().is_busy());
    write.release().await.unwrap();
    // Reading again: readers come in, no writer.
    let info = b.inspect_read_write(key).await.unwrap();
    assert!(
        !info.writer && info.upgradeable && info.readers == 1,
        "{info:?}"
    );
    let reader = b.read_lock(key).acquire().await.unwrap();
    assert!(b.write_lock(key).acquire().await.unwrap_err().is_busy());
    reader.release().await.unwrap();
    let again = upgradeable.upgrade_within(PATIENCE).await.unwrap();
    assert!(again.fence().unwrap() > first_fence, "fences grow");
    again.release().await.unwrap();
    upgradeable.release().await.unwrap();
    let next = b.upgradeable_read_lock(key).acquire().await.unwrap();
    next.release().await.unwrap();
    // Only an upgradeable read guard upgrades.
    let plain = a.read_lock(key).acquire().await.unwrap();
    assert!(matches!(
        plain.upgrade().await,
        Err(LockError::InvalidConfig(_))
    ));
    plain.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upgradeable_reader_beside_readers_on_redis() {
    let server = RedisServer::start();
    one_upgradeable_reader_beside_readers(&client(&server).await, &client(&server).await).await;
    let mut raw = server.raw().await;
    assert_eq!(keys_left(&mut raw, &["config:u1"]).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upgradeable_reader_beside_readers_in_process() {
    let a = LockClient::in_memory();
    one_upgradeable_reader_beside_readers(&a, &a.sibling()).await;
}

/// A reader holds beside the upgradeable reader, and a writer waits. The upgrade waits for
/// the reader, first in the queue; a reader arriving meanwhile does not pass it. The
/// reader's release grants the upgrade, not the writer queued before it; the upgrade's
/// release leaves the read held, so the writer still waits, and the late reader behind it;
/// the upgradeable read's release admits the writer, then the late reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_the_readers_and_no_writer_comes_between() {
    let server = RedisServer::start();
    let key = "config:u2";
    let a = client(&server).await;
    let upgradeable = Arc::new(
        a.upgradeable_read_lock(key)
            .ttl(LONG)
            .acquire()
            .await
            .unwrap(),
    );
    let reader = a
        .sibling()
        .read_lock(key)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn({
        let (c, granted_tx) = (a.sibling(), granted_tx.clone());
        async move {
            let w = c.write_lock(key).wait(PATIENCE).acquire().await?;
            granted_tx.send("writer").unwrap();
            w.release().await
        }
    });
    queued_and_listening(&server, key, 1, 1).await;
    let upgrade = tokio::spawn({
        let (upgradeable, granted_tx) = (upgradeable.clone(), granted_tx.clone());
        async move {
            let w = upgradeable.upgrade().await?;
            granted_tx.send("upgrade").unwrap();
            Ok::<_, LockError>(w)
        }
    });
    queued_and_listening(&server, key, 2, 2).await;
    let mut raw = server.raw().await;
    let head: String = raw.lindex(format!("{{{key}}}:waiters"), 0).await.unwrap();
    assert!(head.contains('^'), "the upgrade stands first: {head}");
    let late = tokio::spawn({
        let (c, granted_tx) = (a.sibling(), granted_tx.clone());
        async move {
            let r = c.read_lock(key).wait(PATIENCE).acquire().await?;
            granted_tx.send("late reader").unwrap();
            r.release().await
        }
    });
    queued_and_listening(&server, key, 3, 3).await;
    reader.release().await.unwrap();
    let write = upgrade.await.unwrap().unwrap();
    assert_eq!(granted.recv().await, Some("upgrade"));
    let info = a.inspect_read_write(key).await.unwrap();
    assert!(
        info.writer && info.upgradeable && info.readers == 1,
        "{info:?}"
    );
    assert_eq!(
        info.waiters,
        Some(2),
        "the writer and the late reader still wait"
    );
    write.release().await.unwrap();
    let info = a.inspect_read_write(key).await.unwrap();
    assert!(!info.writer && info.readers == 1, "{info:?}");
    assert_eq!(
        info.waiters,
        Some(2),
        "the writer and the late reader still wait"
    );
    assert!(granted.try_recv().is_err());
    Arc::into_inner(upgradeable)
        .unwrap()
        .release()
        .await
        .unwrap();
    writer.await.unwrap().unwrap();
    late.await.unwrap().unwrap();
    assert_eq!(granted.recv().await, Some("writer"));
    assert_eq!(granted.recv().await, Some("late reader"));
    assert_eq!(keys_left(&mut raw, &[key]).await, 0);
}

/// Inside the upgradeable read's scope, a read re-enters it (a read of its own beside it
/// would hold its upgrade back for ever), and the write lock is its upgrade; after the
/// write's release the scope still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_its_scope_a_read_re_enters_and_a_write_upgrades() {
    let server = RedisServer::start();
    let key = "config:u3";
    let a = client(&server).await;
    let b = a.sibling();
    let fence = a
        .upgradeable_read_lock(key)
        .run(async {
            let read = a.read_lock(key).acquire().await?;
            assert!(read.is_reentrant());
            drop(read);
            let write = a.write_lock(key).fenced().acquire().await?;
            assert!(!write.is_reentrant());
            let info = b.inspect_read_write(key).await?;
            assert!(
                info.writer && info.upgradeable && info.readers == 1,
                "{info:?}"
            );
            let fence = write.fence();
            write.release().await?;
            assert!(b.write_lock(key).acquire().await.unwrap_err().is_busy());
            Ok::<_, LockError>(fence)
        })
        .await
        .unwrap()
        .unwrap();
    assert!(fence.is_some());
    let mut raw = server.raw().await;
    assert_eq!(keys_left(&mut raw, &[key]).await, 0);
}

/// The upgradeable read's lease ends while its upgrade waits for a reader: the upgrade is
/// lost, and the writer queued behind it is admitted by the reader's release. And an
/// upgrade entry that names no live upgradeable reader (forged, its client listening) is
/// dropped by a release, never granted, and never holds the queue back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_of_a_lost_read_is_lost_and_holds_nobody_back() {
    let server = RedisServer::start();
    let key = "config:u4";
    let a = client(&server).await;
    let upgradeable = a
        .upgradeable_read_lock(key)
        .ttl(Duration::from_millis(600))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let reader = a
        .sibling()
        .read_lock(key)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let lost = upgradeable.upgrade().await.unwrap_err();
    assert!(lost.is_lost(), "{lost:?}");
    // A forged upgrade entry at the head, whose client listens.
    let mut listener = server.redis_client().get_async_pubsub().await.unwrap();
    listener
        .subscribe(format!("rlock:released:{key}:intruder"))
        .await
        .unwrap();
    let mut raw = server.raw().await;
    let queue = format!("{{{key}}}:waiters");
    let writer = tokio::spawn({
        let c = a.sibling();
        async move {
            let w = c.write_lock(key).wait(PATIENCE).acquire().await?;
            let token = w.token().to_owned();
            w.release().await?;
            Ok::<_, LockError>(token)
        }
    });
    wait_queue_len(&server, &queue, 1).await;
    let _: () = raw.lpush(&queue, "intruder:5^3 2000 1 w").await.unwrap();
    reader.release().await.unwrap();
    let token = writer.await.unwrap().unwrap();
    assert!(!token.starts_with("intruder"));
    let left: Vec<String> = raw.lrange(&queue, 0, -1).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(keys_left(&mut raw, &[key]).await, 0);
    drop(upgradeable);
}

/// An upgrade cancelled around the release of the reader it waits for, in several rounds:
/// whatever it was granted is given back, no entry of it holds the queue, and the read it
/// builds on upgrades again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_upgrade_leaves_nothing_behind() {
    let server = RedisServer::start();
    let key = "config:u5";
    let a = client(&server).await;
    let b = a.sibling();
    let upgradeable = Arc::new(a.upgradeable_read_lock(key).acquire().await.unwrap());
    for round in 0..8 {
        let reader = b.read_lock(key).acquire().await.unwrap();
        let upgrade = tokio::spawn({
            let upgradeable = upgradeable.clone();
            async move { upgradeable.upgrade().await.map(drop) }
        });
        queued_and_listening(&server, key, 1, 1).await;
        cancel_around_release(round, reader, upgrade).await;
        // Another reader gets in within its budget, and the read upgrades again.
        let reader = b.read_lock(key).wait(PATIENCE).acquire().await.unwrap();
        reader.release().await.unwrap();
        let write = upgradeable.upgrade_within(PATIENCE).await.unwrap();
        write.release().await.unwrap();
    }
    Arc::into_inner(upgradeable)
        .unwrap()
        .release()
        .await
        .unwrap();
    let mut raw = server.raw().await;
    assert_eq!(
        keys_left(&mut raw, &[key, &format!("{{{key}}}:waiters")]).await,
        0
    );
}

/// An upgradeable reader that crashes (its guard never released, no renewal) keeps the
/// right only until its lease ends: another client's upgradeable read waits, then gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_upgradeable_readers_right_ends_with_its_lease() {
    let server = RedisServer::start();
    let key = "config:u6";
    let a = client(&server).await;
    let crashed = a
        .upgradeable_read_lock(key)
        .ttl(Duration::from_millis(500))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed);
    upgrade_once(&a.sibling(), key).await;
}

/// Takes `key`'s upgradeable read (waiting for it), upgrades it, and releases both: proof
/// that the right is free.
async fn upgrade_once(client: &LockClient, key: &str) {
    let upgradeable = client
        .upgradeable_read_lock(key)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    let write = upgradeable.upgrade_within(PATIENCE).await.unwrap();
    write.release().await.unwrap();
    upgradeable.release().await.unwrap();
}

/// An upgradeable read handed to another client keeps its right: the taker upgrades, and
/// nobody else is the upgradeable reader meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_upgradeable_read_upgrades() {
    let server = RedisServer::start();
    let key = "config:u7";
    let a = client(&server).await;
    let taker = a.sibling();
    let held = a.upgradeable_read_lock(key).acquire().await.unwrap();
    let text = held.hand_over().unwrap().to_string();
    let taken = taker
        .take_over(text.parse::<HoldToken>().unwrap())
        .await
        .unwrap();
    assert!(
        a.upgradeable_read_lock(key)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    let info = a.inspect_read_write(key).await.unwrap();
    assert!(info.upgradeable && info.readers == 1, "{info:?}");
    let write = taken.upgrade_within(PATIENCE).await.unwrap();
    write.release().await.unwrap();
    taken.release().await.unwrap();
    let mut raw = server.raw().await;
    assert_eq!(keys_left(&mut raw, &[key]).await, 0);
}

/// An operator's force-unlock ends the upgradeable reader's lease and its right: another
/// client becomes the upgradeable reader, and the old guard's upgrade is refused, which
/// marks the old guard lost at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_ends_the_upgradeable_right() {
    let server = RedisServer::start();
    let key = "config:u8";
    let (a, ops) = (client(&server).await, client(&server).await);
    let held = a.upgradeable_read_lock(key).acquire().await.unwrap();
    assert_eq!(ops.force_unlock_read_write(key).await.unwrap(), 1);
    let next = ops.upgradeable_read_lock(key).acquire().await.unwrap();
    let lost = held.upgrade_within(PATIENCE).await.unwrap_err();
    assert!(lost.is_lost(), "{lost:?}");
    assert!(
        held.is_lost(),
        "the refused upgrade tells its read it was lost"
    );
    next.release().await.unwrap();
}

/// A restart that loses the data set takes the upgradeable read with it while its upgrade
/// waits for a reader: the read is lost, the upgrade with it (never granted on the empty
/// server), and the name is free for a new upgradeable read, which upgrades.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_the_read_and_its_waiting_upgrade() {
    let server = RedisServer::start();
    let key = "config:u9";
    let a = client(&server).await;
    let ttl = Duration::from_millis(600);
    let upgradeable = Arc::new(
        a.upgradeable_read_lock(key)
            .ttl(ttl)
            .acquire()
            .await
            .unwrap(),
    );
    let reader = a.sibling().read_lock(key).ttl(ttl).acquire().await.unwrap();
    let upgrade = tokio::spawn({
        let upgradeable = upgradeable.clone();
        async move { upgradeable.upgrade().await.map(drop) }
    });
    queued_and_listening(&server, key, 1, 1).await;
    server.restart();
    let lost = tokio::time::timeout(PATIENCE, upgrade)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(lost.is_lost(), "{lost:?}");
    assert!(upgradeable.is_lost());
    assert!(reader.release().await.unwrap_err().is_lost());
    upgrade_once(&a, key).await;
}

/// On a cluster: the upgradeable reader beside a reader, its upgrade waiting for it while a
/// writer of another client waits too, granted first; the writer after both are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_on_a_cluster() {
    let cluster = rlock_tests::deploy::ClusterDeployment::start();
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    let b = LockClient::connect(&cluster.url()).await.unwrap();
    for key in ["config:c1", "config:c2", "config:c3"] {
        let upgradeable = Arc::new(a.upgradeable_read_lock(key).acquire().await.unwrap());
        let reader = b.read_lock(key).acquire().await.unwrap();
        let writer = tokio::spawn({
            let b = b.clone();
            async move {
                let w = b.write_lock(key).wait(PATIENCE).acquire().await?;
                w.release().await
            }
        });
        let upgrade = tokio::spawn({
            let upgradeable = upgradeable.clone();
            async move { upgradeable.upgrade_within(PATIENCE).await }
        });
        reader.release().await.unwrap();
        let write = upgrade.await.unwrap().unwrap();
        assert!(!writer.is_finished());
        write.release().await.unwrap();
        Arc::into_inner(upgradeable)
            .unwrap()
            .release()
            .await
            .unwrap();
        writer.await.unwrap().unwrap();
    }
}
