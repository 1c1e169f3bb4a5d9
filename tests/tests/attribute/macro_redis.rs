//! `#[distributed_lock]` against a real `redis-server`: the rendered key and its lease are what
//! Redis holds while the body runs, a busy lock returns before the body, fences come from
//! Redis, nested annotated calls re-enter without a round trip, and a `#[single_flight]` body
//! runs once for a burst of callers over several clients, its result stored in Redis.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use redis::AsyncCommands;
use rlock_runtime::{LockClient, LockError, distributed_lock, single_flight};
use rlock_tests::RedisServer;

struct Item {
    sku: String,
}

/// What Redis shows for the lock key while the body runs: its value and remaining lease.
#[distributed_lock(key = "order:<user_id>:<item.sku>", ttl = "7s", client = client)]
async fn order(
    client: &LockClient,
    server: &RedisServer,
    user_id: u64,
    item: &Item,
) -> Result<(Option<String>, i64), LockError> {
    let mut raw = server.raw().await;
    let key = "order:42:A%3A1%2A";
    let value: Option<String> = raw.get(key).await.unwrap();
    let pttl: i64 = raw.pttl(key).await.unwrap();
    Ok((value, pttl))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_key_is_held_in_redis_with_the_declared_ttl() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let item = Item {
        sku: "A:1*".to_owned(),
    };
    let (value, pttl) = order(&client, &server, 42, &item).await.unwrap();
    let token = value.expect("the rendered key holds a token during the body");
    assert!(!token.is_empty());
    assert!(pttl > 0 && pttl <= 7_000, "pttl {pttl}");

    let mut raw = server.raw().await;
    let exists: bool = raw.exists("order:42:A%3A1%2A").await.unwrap();
    assert!(!exists, "the lock outlived the body");
}

#[distributed_lock(key = "stock:<sku>", client = client)]
async fn take_stock(client: &LockClient, sku: u32, runs: &AtomicUsize) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_returns_err_before_the_body_runs() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("stock:7").acquire().await.unwrap();

    let runs = AtomicUsize::new(0);
    let err = take_stock(&client, 7, &runs).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Busy { key, .. } if key == "stock:7"),
        "{err:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the body ran without the lock"
    );

    held.release().await.unwrap();
    take_stock(&client, 7, &runs).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[distributed_lock(key = "ledger:<id>", client = client, fence = token)]
async fn fenced(client: &LockClient, id: u32) -> Result<u64, LockError> {
    Ok(token)
}

#[distributed_lock(key = "ledger:<id>", client = client, fence = token)]
async fn outer(
    client: &LockClient,
    server: &RedisServer,
    id: u32,
) -> Result<(u64, u64, u64), LockError> {
    let (inner, counts) = server.commands_during(fenced(client, id)).await;
    Ok((token, inner?, counts.total))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_come_from_redis_and_nested_calls_reenter_for_free() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let first = fenced(&client, 1).await.unwrap();
    let second = fenced(&client, 1).await.unwrap();
    assert!(second > first, "{second} after {first}");

    let (outer_fence, inner_fence, commands) = outer(&client, &server, 1).await.unwrap();
    assert!(outer_fence > second);
    assert_eq!(inner_fence, outer_fence, "the nested call shares the hold");
    assert_eq!(commands, 0, "re-entering reached Redis");
}

static REPORT_RUNS: AtomicUsize = AtomicUsize::new(0);

#[single_flight(key = "report:<id>", ttl = "30s", wait = "30s", client = client)]
async fn report(client: &LockClient, id: u64) -> Result<Vec<u64>, LockError> {
    REPORT_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    Ok(vec![id, 42])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_flight_body_runs_once_for_a_burst_over_four_clients() {
    let server = RedisServer::start();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let client = LockClient::connect(&server.url()).await.unwrap();
        for _ in 0..4 {
            let client = client.clone();
            callers.spawn(async move { report(&client, 9).await });
        }
    }
    while let Some(answer) = callers.join_next().await {
        assert_eq!(answer.unwrap().unwrap(), [9, 42]);
    }
    assert_eq!(REPORT_RUNS.load(Ordering::SeqCst), 1);
    let mut raw = server.raw().await;
    let stored: Option<String> = raw.get("rlock:result:report:9").await.unwrap();
    assert_eq!(stored.as_deref(), Some("[9,42]"));
}
