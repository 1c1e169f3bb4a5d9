//! Inspection and administration of locks (`inspect`, `force_unlock`) against a real Redis
//! and in process; Cluster and Redlock run the same checks in their own files.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::locking::{client_for, inspect_and_force_unlock};

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
    // A key of another type is nobody's lock: not held, and nothing is broken.
    let _: () = raw.lpush("admin:list", "x").await.unwrap();
    assert!(!client.inspect("admin:list").await.unwrap().held);
    assert!(!client.force_unlock("admin:list").await.unwrap());
}
