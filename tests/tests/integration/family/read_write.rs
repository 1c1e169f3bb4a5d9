//! Read-write locks against a real `redis-server` (and the in-process backend where it keeps
//! the same rules): never a writer beside anyone, a writer's release admitting the queued
//! readers together, a waiting writer holding back new readers, a crashed reader's share
//! ending with its own lease, no upgrade (an error at once) but a downgrade, cancelled
//! waiters, a restart, a cluster, and the requests that are refused.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rlock_runtime::{KeyKind, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::deploy::redlock_url;
use rlock_tests::locking::{
    Of, PATIENCE, cancel_around_release, client, keys_left, queued_and_listening,
    take_and_give_back,
};

/// 3 clients × 4 tasks take the lock 12 times each, a third of the takes as the writer:
/// a writer's body never runs beside another body, readers' bodies only beside readers'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_a_writer_beside_anyone() {
    let server = RedisServer::start();
    let first = client(&server).await;
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in (0..3).map(|_| first.sibling()) {
        for t in 0..4usize {
            let (c, readers, writers) = (c.clone(), readers.clone(), writers.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..12usize {
                    if (t + i) % 3 == 0 {
                        let w = c
                            .write_lock("cfg:1")
                            .wait(PATIENCE)
                            .acquire()
                            .await
                            .unwrap();
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a reader beside");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        w.release().await.unwrap();
                    } else {
                        let r = c.read_lock("cfg:1").wait(PATIENCE).acquire().await.unwrap();
                        readers.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "a writer beside");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                        r.release().await.unwrap();
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut raw = server.raw().await;
    let left = keys_left(&mut raw, &["cfg:1"]).await;
    assert_eq!(left, 0, "nothing is left behind");
}

/// A writer holds; two readers, then a writer, then a reader queue in that order. The
/// writer's release admits the two readers together (both hold at once) and nobody else:
/// the queued writer keeps the head, and the reader behind it does not pass it. Once the
/// readers are done the writer is admitted, and after it the last reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_admits_the_queued_readers_together() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let holder = a.write_lock("doc:7").acquire().await.unwrap();
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    // Each waiter holds until told, by a channel of its own.
    let (mut releases, mut waiters) = (Vec::new(), Vec::new());
    for (n, writing) in [false, false, true, false].into_iter().enumerate() {
        let (c, granted_tx) = (a.sibling(), granted_tx.clone());
        let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
        releases.push(Some(release_tx));
        waiters.push(tokio::spawn(async move {
            let request = if writing {
                c.write_lock("doc:7")
            } else {
                c.read_lock("doc:7")
            };
            let guard = request.wait(PATIENCE).acquire().await.unwrap();
            granted_tx.send(n).unwrap();
            let _ = release.await;
            guard.release().await.unwrap();
        }));
        let n = n + 1;
        queued_and_listening(&server, "doc:7", n, n).await;
    }
    holder.release().await.unwrap();
    let mut first = [
        tokio::time::timeout(PATIENCE, granted.recv())
            .await
            .unwrap()
            .unwrap(),
        tokio::time::timeout(PATIENCE, granted.recv())
            .await
            .unwrap()
            .unwrap(),
    ];
    first.sort_unstable();
    assert_eq!(first, [0, 1], "the two readers at the head, together");
    let info = a.inspect_read_write("doc:7").await.unwrap();
    assert_eq!((info.writer, info.readers), (false, 2));
    assert_eq!(
        info.waiters,
        Some(2),
        "the writer and the reader behind it wait"
    );
    // Both readers release: the writer is next, then the reader behind it.
    let mut release = |n: usize| {
        if let Some(tx) = releases[n].take() {
            let _ = tx.send(());
        }
    };
    release(0);
    release(1);
    let third = tokio::time::timeout(PATIENCE, granted.recv())
        .await
        .unwrap();
    assert_eq!(
        third,
        Some(2),
        "the writer before the reader that queued after it"
    );
    release(2);
    let fourth = tokio::time::timeout(PATIENCE, granted.recv())
        .await
        .unwrap();
    assert_eq!(fourth, Some(3));
    release(3);
    for waiter in waiters {
        tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap();
    }
}

/// What a writer's release does in Redis, seen without any client waiting: waiters stand in
/// the queue as rlock's would (an entry each with its role, a subscriber on their client's
/// channel). The release grants the readers at the head, up to the first writer, and tells
/// each of them; the writer and the reader behind it keep their places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_script_admits_readers_up_to_the_first_writer() {
    use futures_util::StreamExt as _;

    let server = RedisServer::start();
    let a = client(&server).await;
    let writer = a.write_lock("doc:8").acquire().await.unwrap();
    let mut listener = server.redis_client().get_async_pubsub().await.unwrap();
    let waiters = [("r1", 'r'), ("r2", 'r'), ("w3", 'w'), ("r4", 'r')];
    for (client, _) in waiters {
        listener
            .subscribe(format!("rlock:released:doc:8:{client}"))
            .await
            .unwrap();
    }
    let mut raw = server.raw().await;
    for (client, role) in waiters {
        let _: () = redis::cmd("RPUSH")
            .arg("{doc:8}:waiters")
            .arg(format!("{client}:1 5000 0 {role}"))
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    writer.release().await.unwrap();

    let score = |member: &str| redis::cmd("ZSCORE").arg("doc:8").arg(member).to_owned();
    for (member, holds) in [
        ("r1:1", true),
        ("r2:1", true),
        ("w3:1", false),
        ("r4:1", false),
    ] {
        let s: Option<f64> = score(member).query_async(&mut raw).await.unwrap();
        assert_eq!(s.is_some(), holds, "{member}");
        assert!(s.is_none_or(|s| s > 0.0), "{member} holds as a reader");
    }
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg("{doc:8}:waiters")
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(queue, ["w3:1 5000 0 w", "r4:1 5000 0 r"]);
    let mut told = Vec::new();
    for _ in 0..2 {
        let message = tokio::time::timeout(PATIENCE, listener.on_message().next())
            .await
            .unwrap()
            .unwrap();
        told.push(message.get_payload::<String>().unwrap());
    }
    told.sort();
    assert_eq!(told, ["r1:1 0", "r2:1 0"]);
}

/// A reader holds and a writer waits: a new reader does not pass the writer (refused at
/// once without a wait, queued behind it with one). When the reader is done, the writer
/// is admitted first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_back_new_readers() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let reader = a.read_lock("doc:9").acquire().await.unwrap();
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let spawn = |writing: bool, name: &'static str| {
        let (c, granted_tx) = (a.sibling(), granted_tx.clone());
        tokio::spawn(async move {
            let request = if writing {
                c.write_lock("doc:9")
            } else {
                c.read_lock("doc:9")
            };
            let guard = request.wait(PATIENCE).acquire().await.unwrap();
            granted_tx.send(name).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        })
    };
    let writer = spawn(true, "writer");
    queued_and_listening(&server, "doc:9", 1, 1).await;
    let err = a.sibling().read_lock("doc:9").acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    let late_reader = spawn(false, "late reader");
    queued_and_listening(&server, "doc:9", 2, 2).await;
    reader.release().await.unwrap();
    for expected in ["writer", "late reader"] {
        let name = tokio::time::timeout(PATIENCE, granted.recv())
            .await
            .unwrap();
        assert_eq!(name, Some(expected));
    }
    writer.await.unwrap();
    late_reader.await.unwrap();
}

/// A reader that stops without releasing (a crash) keeps its share only until its own lease
/// ends, by Redis's clock, while the other reader's share stays: a writer is admitted once
/// both are gone, not when the first reader's lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_readers_share_ends_with_its_own_lease() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let crashed = a
        .read_lock("doc:10")
        .ttl(Duration::from_millis(400))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let kept = a
        .sibling()
        .read_lock("doc:10")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed);
    let writer = a.sibling();
    tokio::time::sleep(Duration::from_millis(450)).await;
    // The crashed share ended; the kept one still holds the writer off.
    let info = a.inspect_read_write("doc:10").await.unwrap();
    assert_eq!(info.readers, 1);
    assert!(
        writer
            .write_lock("doc:10")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    kept.release().await.unwrap();
    let w = writer.write_lock("doc:10").acquire().await.unwrap();
    w.release().await.unwrap();
}

/// In a locked read scope, asking for the write lock is refused at once (it would wait for
/// itself); a write guard may read beside its write (a downgrade), by its `downgrade` or
/// in its write scope, and keeps reading after the write is released. A read asked
/// outside any scope is an ordinary reader: it waits for a write guard, even one of its own
/// task's.
async fn no_upgrade_but_a_downgrade(a: &LockClient) {
    let in_scope = a
        .read_lock("doc:11")
        .run(async { a.write_lock("doc:11").acquire().await.map(drop) })
        .await
        .unwrap();
    assert!(matches!(in_scope, Err(LockError::WouldDeadlock { .. })));
    // Outside a scope, a read guard is held like anyone's: a write waits.
    let read = a.read_lock("doc:11").acquire().await.unwrap();
    assert!(
        a.write_lock("doc:11")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    read.release().await.unwrap();

    let write = a.write_lock("doc:11").acquire().await.unwrap();
    assert!(a.read_lock("doc:11").acquire().await.unwrap_err().is_busy());
    let downgraded = write.downgrade().await.unwrap();
    write.release().await.unwrap();
    let info = a.inspect_read_write("doc:11").await.unwrap();
    assert_eq!((info.writer, info.readers), (false, 1));
    // Still a reader: another writer waits, another reader shares.
    let b = a.sibling();
    assert!(
        b.write_lock("doc:11")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    take_and_give_back(&b, Of::Read, "doc:11", Duration::ZERO).await;
    downgraded.release().await.unwrap();
    // In a write scope, the read is a downgrade too.
    let read_in_scope = a
        .write_lock("doc:11")
        .run(async {
            let reader = a.read_lock("doc:11").acquire().await?;
            reader.release().await
        })
        .await
        .unwrap();
    read_in_scope.unwrap();
    take_and_give_back(&b, Of::Write, "doc:11", Duration::ZERO).await;
}

/// The right to downgrade follows the write guard, not the task that took it: a guard moved
/// into another task downgrades there, while the task that gave it away is an ordinary
/// reader, refused beside the live write. (It was granted a read beside another task's
/// write, as its own task's write.)
async fn the_downgrade_follows_the_guard(a: &LockClient) {
    let write = a.write_lock("doc:13").acquire().await.unwrap();
    let (moved, keep_writing) = tokio::sync::oneshot::channel::<()>();
    let writer_task = tokio::spawn(async move {
        let _ = keep_writing.await;
        let reader = write.downgrade().await?;
        write.release().await?;
        Ok::<_, LockError>(reader)
    });
    let beside = a.read_lock("doc:13").acquire().await;
    assert!(
        beside.as_ref().is_err_and(LockError::is_busy),
        "a read beside another task's write: {beside:?}"
    );
    assert!(a.inspect_read_write("doc:13").await.unwrap().writer);
    moved.send(()).unwrap();
    let reader = writer_task.await.unwrap().unwrap();
    let info = a.inspect_read_write("doc:13").await.unwrap();
    assert_eq!((info.writer, info.readers), (false, 1));
    reader.release().await.unwrap();
    // A read guard given away: its first task may take the write lock once it is gone.
    let read = a.read_lock("doc:13").acquire().await.unwrap();
    tokio::spawn(async move { read.release().await })
        .await
        .unwrap()
        .unwrap();
    take_and_give_back(a, Of::Write, "doc:13", Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_downgrade_follows_the_guard_on_redis() {
    let server = RedisServer::start();
    the_downgrade_follows_the_guard(&client(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_downgrade_follows_the_guard_in_memory() {
    the_downgrade_follows_the_guard(&LockClient::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_upgrade_but_a_downgrade_on_redis() {
    let server = RedisServer::start();
    no_upgrade_but_a_downgrade(&client(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_upgrade_but_a_downgrade_in_memory() {
    no_upgrade_but_a_downgrade(&LockClient::in_memory()).await;
}

/// Readers share and a writer excludes in process too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_in_memory() {
    let a = LockClient::in_memory();
    let b = a.sibling();
    let r1 = a.read_lock("m:1").acquire().await.unwrap();
    let r2 = b.read_lock("m:1").acquire().await.unwrap();
    assert!(
        a.sibling()
            .write_lock("m:1")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = a.write_lock("m:1").acquire().await.unwrap();
    assert!(b.read_lock("m:1").acquire().await.unwrap_err().is_busy());
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.read_lock("m:1").wait(PATIENCE).acquire().await })
    };
    w.release().await.unwrap();
    let reader = tokio::time::timeout(PATIENCE, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    reader.release().await.unwrap();
}

/// A lease renewed by the watchdog outlives its first lease, a reader's and a writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_leases_outlive_their_first_lease() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let ttl = Duration::from_millis(300);
    let reader = a.read_lock("doc:12").ttl(ttl).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!reader.is_lost());
    assert_eq!(a.inspect_read_write("doc:12").await.unwrap().readers, 1);
    reader.release().await.unwrap();
    let writer = a.write_lock("doc:12").ttl(ttl).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!writer.is_lost());
    assert!(a.inspect_read_write("doc:12").await.unwrap().writer);
    writer.release().await.unwrap();
}

/// What cannot be kept is refused with the reason; a name is one kind of thing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_that_cannot_be_kept_are_refused() {
    let memory = LockClient::in_memory();
    let err = memory.read_lock("d").fenced().acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(m) if m.contains("fencing")),
        "{err:?}"
    );

    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("named").acquire().await.unwrap();
    for err in [
        a.sibling().read_lock("named").acquire().await.unwrap_err(),
        a.sibling().write_lock("named").acquire().await.unwrap_err(),
    ] {
        assert!(
            matches!(
                &err,
                LockError::WrongKind {
                    asked: KeyKind::ReadWriteLock,
                    found: KeyKind::Lock,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    lock.release().await.unwrap();
    let reader = a.read_lock("named").acquire().await.unwrap();
    for err in [
        a.semaphore("named", 2).acquire().await.unwrap_err(),
        a.sibling().lock("named").acquire().await.unwrap_err(),
    ] {
        assert!(
            matches!(
                &err,
                LockError::WrongKind {
                    found: KeyKind::ReadWriteLock,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    reader.release().await.unwrap();
    let permit = a.semaphore("named", 2).acquire().await.unwrap();
    let err = a.read_lock("named").acquire().await.unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::WrongKind {
                asked: KeyKind::ReadWriteLock,
                found: KeyKind::Semaphore,
                ..
            }
        ),
        "{err:?}"
    );
    permit.release().await.unwrap();

    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = LockClient::connect(&redlock_url(&masters)).await.unwrap();
    let err = redlock.write_lock("d").acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(m) if m.contains("not available on Redlock")),
        "{err:?}"
    );
}

/// A waiter cancelled at different moments around a writer's release is never left
/// holding: the lock and its queue are gone once everyone is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_is_never_left_holding() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let long = Duration::from_secs(60);
    for round in 0..24u64 {
        let held = a
            .write_lock("doc:13")
            .ttl(long)
            .wait(PATIENCE)
            .acquire()
            .await
            .unwrap();
        let waiter = {
            let c = a.sibling();
            tokio::spawn(async move {
                let request = if round % 3 == 0 {
                    c.write_lock("doc:13")
                } else {
                    c.read_lock("doc:13")
                };
                request
                    .ttl(long)
                    .wait(PATIENCE)
                    .acquire()
                    .await?
                    .release()
                    .await
            })
        };
        cancel_around_release(round, held, waiter).await;
    }
    let mut raw = server.raw().await;
    let left = keys_left(&mut raw, &["doc:13", "{doc:13}:waiters"]).await;
    assert_eq!(left, 0, "a lease or an entry was left behind");
}

/// A restart that loses the data set takes every lease with it: each holder's next renewal
/// finds its lease gone and `lost()` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_loses_the_leases_is_a_lost_lease() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let ttl = Duration::from_millis(600);
    let reader = a.read_lock("doc:14").ttl(ttl).acquire().await.unwrap();
    let writer = a.write_lock("doc:15").ttl(ttl).acquire().await.unwrap();
    server.restart();
    for guard in [&reader, &writer] {
        tokio::time::timeout(PATIENCE, guard.lost()).await.unwrap();
    }
    assert!(reader.release().await.unwrap_err().is_lost());
    assert!(writer.release().await.unwrap_err().is_lost());
    let fresh = a
        .write_lock("doc:14")
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    fresh.release().await.unwrap();
}

/// On Redis Cluster a read-write lock's set and its queue share a slot: readers share, a
/// writer waits and is admitted on the last reader's release, announced on the key's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_on_a_cluster() {
    let cluster = rlock_tests::deploy::ClusterDeployment::start();
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    let b = LockClient::connect(&cluster.url()).await.unwrap();
    let r1 = a.read_lock("cfg:c1").acquire().await.unwrap();
    let r2 = b.read_lock("cfg:c1").acquire().await.unwrap();
    let writer = {
        let c = LockClient::connect(&cluster.url()).await.unwrap();
        tokio::spawn(async move {
            let w = c
                .write_lock("cfg:c1")
                .wait(PATIENCE)
                .acquire()
                .await
                .unwrap();
            w.release().await.unwrap();
        })
    };
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    tokio::time::timeout(PATIENCE, writer)
        .await
        .unwrap()
        .unwrap();
    let node = cluster.master_of_key("cfg:c1").unwrap();
    let mut raw = node.raw().await;
    let left = keys_left(&mut raw, &["cfg:c1", "{cfg:c1}:waiters"]).await;
    assert_eq!(left, 0, "nothing is left behind");
}

/// An operator's view of a read-write lock, then every lease ended by force: holders here
/// are told at once, and the queued writer is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_unlock_a_read_write_lock() {
    let server = RedisServer::start();
    let ops = client(&server).await;
    let r1 = ops.read_lock("ops:rw").acquire().await.unwrap();
    let r2 = ops.sibling().read_lock("ops:rw").acquire().await.unwrap();
    let waiter = {
        let c = ops.sibling();
        tokio::spawn(async move {
            let w = c.write_lock("ops:rw").wait(PATIENCE).acquire().await?;
            w.release().await
        })
    };
    queued_and_listening(&server, "ops:rw", 1, 1).await;
    let info = ops.inspect_read_write("ops:rw").await.unwrap();
    assert_eq!((info.writer, info.readers, info.held_here), (false, 2, 1));
    assert_eq!(info.waiters, Some(1));
    assert!(info.remaining.is_some());
    assert_eq!(ops.force_unlock_read_write("ops:rw").await.unwrap(), 2);
    assert!(r1.is_lost());
    tokio::time::timeout(PATIENCE, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(r2.release().await.unwrap_err().is_lost());
}

/// Behind Sentinel, a failover moves the read-write lock with the master: afterwards a
/// writer is granted on the new master once the readers held before are renewed there and
/// released, or reported lost; no reader is kept without its lease in the set there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_follow_a_sentinel_failover() {
    let deployment = rlock_tests::deploy::SentinelDeployment::start();
    let connect = || async {
        LockClient::builder()
            .url(deployment.url().as_str())
            .command_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let mut held = Vec::new();
    for _ in 0..2 {
        let request = a.read_lock("cfg:s").ttl(Duration::from_secs(2));
        held.push(request.acquire().await.unwrap());
    }
    // Let replication carry them over, as it normally would before a crash.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let new_master = deployment.fail_over();

    // Waiting retries failed attempts within its budget: it serves again on the new master.
    let reader = b
        .read_lock("cfg:s")
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    // A few renewal periods on the new master.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut raw = new_master.raw().await;
    let readers: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("cfg:s")
        .arg(0)
        .arg("+inf")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(readers.iter().any(|t| t == reader.token()), "{readers:?}");
    for guard in &held {
        assert!(
            guard.is_lost() || readers.iter().any(|t| t == guard.token()),
            "a read lease missing on the new master was kept"
        );
    }
    reader.release().await.unwrap();
    for guard in held {
        let _ = guard.release().await;
    }
    let writer = b
        .write_lock("cfg:s")
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    writer.release().await.unwrap();
}

/// A reader or the writer whose process is stopped past its lease (a GC pause, a VM
/// migration): the lock goes to a waiter of the other role at the lease's end, by Redis's
/// clock, and on resuming the stopped holder is told it lost its lease; its late release
/// gives back nothing of the new holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_lease_is_told_it_lost_it() {
    use rlock_tests::child::LineChild;
    use rlock_tests::protocol::{Command, Line, Outcome};
    use rlock_tests::worker::{Hold, HoldKind};

    let server = RedisServer::start();
    let other = client(&server).await;
    for (stopped, key) in [
        (HoldKind::Read, "doc:stopped-r"),
        (HoldKind::Write, "doc:stopped-w"),
    ] {
        let hold = Hold {
            redis: server.url(),
            key: key.into(),
            ttl_ms: 600,
            renew: true,
            kind: stopped,
            permits: 1,
            take_over: None,
        };
        let mut holder = LineChild::start(env!("CARGO_BIN_EXE_worker"), &hold.args());
        assert!(matches!(holder.line(), Some(Line::Acquired { .. })));
        holder.signal("-STOP");
        // The other role: it can hold only once the stopped holder's lease has ended.
        let request = if stopped == HoldKind::Read {
            other.write_lock(key)
        } else {
            other.read_lock(key)
        };
        let taken = request.wait(PATIENCE).acquire().await.unwrap();
        holder.signal("-CONT");
        assert_eq!(
            holder.ask(Command::WaitLost),
            Some(Line::Lost(true)),
            "{stopped:?}"
        );
        assert_eq!(
            holder.ask(Command::Release),
            Some(Line::Released(Outcome::Lost)),
            "{stopped:?}"
        );
        let info = other.inspect_read_write(key).await.unwrap();
        let writing = stopped == HoldKind::Read;
        assert_eq!(
            (info.writer, info.readers, info.held_here),
            (writing, u32::from(!writing), 1),
            "{stopped:?}: {info:?}"
        );
        taken.release().await.unwrap();
    }
}

/// Reentrancy within a locked scope, as the lock has it (Redisson's hold counts): a read
/// asked inside a read scope, and a write inside a write scope, re-enter the scope's hold
/// (no second lease in Redis, the writer's fence kept); the hold ends when the outer scope
/// does. Outside the scope, a spawned task's read is a reader of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_re_enter_within_their_scope() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let members = |server: &RedisServer| {
        let server = server.url();
        async move {
            let mut raw = redis::Client::open(server)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            redis::cmd("ZCOUNT")
                .arg("config:7")
                .arg("-inf")
                .arg("+inf")
                .query_async::<u32>(&mut raw)
                .await
                .unwrap()
        }
    };
    let inner = a
        .read_lock("config:7")
        .run(async {
            let again = a.read_lock("config:7").acquire().await.unwrap();
            assert!(again.is_reentrant());
            // The reader and the lock's mark: one lease, not two.
            assert_eq!(members(&server).await, 2);
            // A task spawned from the scope is no part of it: a reader of its own.
            let b = a.clone();
            let spawned = tokio::spawn(async move {
                let own = b.read_lock("config:7").acquire().await.unwrap();
                let reentrant = own.is_reentrant();
                own.release().await.unwrap();
                reentrant
            });
            assert!(!spawned.await.unwrap());
            again.release().await.unwrap();
            // Releasing the inner guard ends nothing: the scope still reads.
            assert_eq!(members(&server).await, 2);
        })
        .await;
    inner.unwrap();
    assert_eq!(
        members(&server).await,
        0,
        "the scope's end released the read"
    );

    let fence = a
        .write_lock("config:7")
        .fenced()
        .run(async {
            let again = a.write_lock("config:7").fenced().acquire().await.unwrap();
            assert!(again.is_reentrant());
            let info = a.inspect_read_write("config:7").await.unwrap();
            assert!(
                info.writer && info.readers == 0 && info.held_here == 1,
                "{info:?}"
            );
            again.fence()
        })
        .await
        .unwrap();
    assert!(fence.is_some());
    assert_eq!(members(&server).await, 0);
}

/// An uncontended read or write, taken and given back on a key that nobody uses, looks
/// neither at a queue that does not exist nor for leases that ended: one `EXISTS` of the key
/// and its queue to take it, one `LLEN` to give it back, and nothing purged or ranged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_read_or_write_skips_the_queue_and_the_purge() {
    let server = RedisServer::start();
    let a = client(&server).await;
    // The scripts are loaded, and the client's connections opened, before the count.
    take_and_give_back(&a, Of::Read, "doc:warm", PATIENCE).await;
    take_and_give_back(&a, Of::Write, "doc:warm", PATIENCE).await;
    server.reset_stats();
    let cycles = 10;
    for i in 0..cycles {
        for of in [Of::Read, Of::Write] {
            take_and_give_back(&a, of, &format!("doc:fresh:{i}"), PATIENCE).await;
        }
    }
    let counts = server.command_stats();
    let count = |command: &str| counts.get(command).copied().unwrap_or(0);
    for command in ["zadd", "zrem", "zcard", "llen", "zmscore"] {
        assert_eq!(count(command), 2 * cycles, "{command} in {counts:?}");
    }
    for command in [
        "pttl",
        "zrangebyscore",
        "zrevrangebyscore",
        "zremrangebyscore",
    ] {
        assert_eq!(count(command), 0, "{command} in {counts:?}");
    }
}

/// Every grant that creates a read-write lock's set gives it an expiry, whichever way it
/// came: uncontended, or on a free key whose queue still exists (an entry nobody listens
/// for), or handed to a waiter by a release. A set without one would outlive its leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_set_a_grant_creates_expires() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let mut raw = server.raw().await;
    let expiry = |key: &str| redis::cmd("PTTL").arg(key).to_owned();
    for (i, of) in [Of::Read, Of::Write, Of::UpgradeableRead, Of::Permit(2)]
        .into_iter()
        .enumerate()
    {
        for queued in [false, true] {
            let key = format!("doc:expiry:{i}:{queued}");
            if queued {
                let _: () = redis::cmd("RPUSH")
                    .arg(format!("{{{key}}}:waiters"))
                    .arg("gone:1 5000 0 r")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
            }
            let guard = of.request(&a, &key).wait(PATIENCE).acquire().await.unwrap();
            let left: i64 = expiry(&key).query_async(&mut raw).await.unwrap();
            assert!(left > 0, "{of:?} (queue existing: {queued}): PTTL {left}");
            guard.release().await.unwrap();
        }
    }
}
