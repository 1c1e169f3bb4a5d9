//! Inspection and administration of locks (`inspect`, `force_unlock`) against a real Redis
//! and in process; Cluster and Redlock run the same checks in their own files.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::{KeyKind, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::{PATIENCE, client_for, inspect_and_force_unlock};

const TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_unlock_on_one_redis() {
    let server = RedisServer::start();
    let a = client_for(&server, TIMEOUT).await;
    let b = client_for(&server, TIMEOUT).await;
    inspect_and_force_unlock(&a, &b, "admin:one").await;
}

#[tokio::test]
async fn inspect_and_force_unlock_in_process() {
    let a = LockClient::in_memory();
    inspect_and_force_unlock(&a, &a.sibling(), "admin:memory").await;
}

/// A lock taken by a client that is not rlock (redis-py's `Lock`: `SET key token NX PX`) is
/// seen as held, not here, and can be broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_holder_is_seen_and_can_be_broken() {
    let server = RedisServer::start();
    let client = client_for(&server, TIMEOUT).await;
    let mut raw = server.raw().await;
    let _: () = redis::cmd("SET")
        .arg(&["admin:py", "py-token", "NX", "PX", "30000"][..])
        .query_async(&mut raw)
        .await
        .unwrap();
    let info = client.inspect("admin:py").await.unwrap();
    assert!(info.held && !info.held_here, "{info:?}");
    assert_eq!(
        info.waiters,
        Some(0),
        "one server keeps a queue, empty here"
    );
    assert!(client.force_unlock("admin:py").await.unwrap());
    let left: Option<String> = raw.get("admin:py").await.unwrap();
    assert_eq!(left, None);
    // A key of another type is nobody's lock: it is named for what it is, and nothing is
    // broken.
    let _: () = raw.lpush("admin:list", "x").await.unwrap();
    for refused in [
        client.inspect("admin:list").await.map(drop),
        client.force_unlock("admin:list").await.map(drop),
    ] {
        assert!(
            matches!(
                refused,
                Err(LockError::WrongKind {
                    asked: KeyKind::Lock,
                    found: KeyKind::Other,
                    ..
                })
            ),
            "{refused:?}"
        );
    }
    let left: Vec<String> = raw.lrange("admin:list", 0, -1).await.unwrap();
    assert_eq!(left, ["x"]);
}

/// `inspect` from another process names the holder (service, host, pid) and when it was
/// granted, from the holder's card; the card names only live holds and goes with its client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_a_holder_in_another_process_and_when_it_was_granted() {
    use rlock_tests::child::LineChild;
    use rlock_tests::protocol::{Command, Line, Outcome};
    use rlock_tests::worker::{Hold, HoldKind};

    let server = RedisServer::start();
    let operator = client_for(&server, TIMEOUT).await;
    let before = std::time::SystemTime::now();
    let hold = Hold {
        redis: server.url(),
        key: "order:42".into(),
        ttl_ms: 2_000,
        renew: true,
        kind: HoldKind::Lock,
        permits: 1,
        take_over: None,
    };
    let mut holder = LineChild::start(env!("CARGO_BIN_EXE_worker"), &hold.args());
    let Some(Line::Acquired { token, .. }) = holder.line() else {
        panic!("the worker did not hold the lock");
    };
    // A waiter from a third client, queued behind it.
    let waiter = client_for(&server, TIMEOUT).await;
    let waiting = tokio::spawn(async move {
        waiter
            .lock("order:42")
            .wait(PATIENCE)
            .acquire()
            .await
            .map(drop)
    });

    // Listed once it has lasted a pass of its client's card keeper.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let info = loop {
        let info = operator.inspect("order:42").await.unwrap();
        if info.holder.is_some() && info.waiters == Some(1) {
            break info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never named: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let named = info.holder.clone().unwrap();
    assert_eq!(
        (named.service.as_str(), named.pid),
        ("worker", holder.pid()),
        "{info:?}"
    );
    assert_eq!(named.host, operator.identity().host);
    assert_eq!(info.token.as_deref(), Some(token.as_str()));
    let granted = info.granted_at.unwrap();
    assert!(granted >= before - Duration::from_secs(1), "{info:?}");
    assert!(granted <= std::time::SystemTime::now(), "{info:?}");
    assert!(info.held && !info.held_here);

    assert_eq!(
        holder.ask(Command::Release),
        Some(Line::Released(Outcome::Ok))
    );
    waiting.await.unwrap().unwrap();
    drop(holder);
    // The worker has exited: its card expires with its lease, naming nobody meanwhile.
    let client_id = token.split_once(':').unwrap().0.to_owned();
    let mut raw = server.raw().await;
    let mut card_left = true;
    for _ in 0..(PATIENCE.as_millis() / 100) {
        card_left = raw
            .exists(format!("rlock:holder:{client_id}"))
            .await
            .unwrap();
        if !card_left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!card_left, "the card outlived its client");
}

/// A semaphore of 200 with 70 holds of one permit and one of three, from two clients:
/// `inspect_semaphore` counts every permit in use and those free, and names the first 64
/// holds (the script lists no more), each with its permits and, once its client's card lists
/// it, who holds it; a read-write lock's 70 readers are all counted though 64 are listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_counts_every_holder_and_names_a_bounded_few() {
    let server = RedisServer::start();
    let (a, b) = (
        client_for(&server, TIMEOUT).await,
        client_for(&server, TIMEOUT).await,
    );
    let key = "admin:many";
    // A shorter lease than the others': its permits end first, renewed or not (holds
    // granted or renewed in one millisecond would otherwise tie, and be listed by token).
    let heavy = a
        .semaphore(key, 200)
        .permits(3)
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let mut held = Vec::new();
    for i in 0..70 {
        let client = if i % 2 == 0 { &a } else { &b };
        held.push(client.semaphore(key, 200).acquire().await.unwrap());
    }
    let mut readers = Vec::new();
    for _ in 0..70 {
        readers.push(b.read_lock("admin:readers").acquire().await.unwrap());
    }
    // Named once every listed hold has lasted a pass of its client's card keeper.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let info = loop {
        let info = a.inspect_semaphore(key).await.unwrap();
        if info.holders.iter().all(|holder| holder.holder.is_some()) {
            break info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never named: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((info.permits, info.in_use, info.available), (200, 73, 127));
    assert_eq!(info.held_here, 38, "35 single permits and the hold of 3");
    let listed: u32 = info.holders.iter().map(|holder| holder.permits).sum();
    assert_eq!(
        listed, 64,
        "the holds of the first 64 permits: a bounded list"
    );
    // The hold of 3 has the shortest lease, so its permits end first: it heads the list.
    let first = &info.holders[0];
    assert_eq!((first.token.as_str(), first.permits), (heavy.token(), 3));
    assert!(first.held_here && first.granted_at.is_some());
    let named = first.holder.clone().unwrap();
    assert_eq!(
        (named.pid, &named.host),
        (std::process::id(), &a.identity().host)
    );
    assert_eq!(info.holders.len(), 62);
    let rw = a.inspect_read_write("admin:readers").await.unwrap();
    assert_eq!((rw.readers, rw.writer), (70, false));
    drop((heavy, held, readers));
}
