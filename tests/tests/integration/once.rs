//! Once-only work across instances (`LockClient::once`) against a real `redis-server`: a
//! burst of callers over four clients computes once and every caller gets that result; a
//! computation that fails or whose caller is cut off from Redis is taken over by a waiting
//! caller; a result too large is refused clearly and not stored; a stored result of another
//! type is computed again.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::locking::{PATIENCE, client_at};
use rlock_tests::proxy::FaultProxy;

const TTL: Duration = Duration::from_secs(30);

async fn client(url: &str) -> LockClient {
    client_at(url, Duration::from_secs(2)).await
}

/// A computation that counts its runs, takes `ms`, and answers `answer` (or fails).
fn counted(
    runs: &Arc<AtomicUsize>,
    ms: u64,
    answer: Result<Vec<u64>, &'static str>,
) -> impl Future<Output = Result<Vec<u64>, LockError>> + use<> {
    let runs = runs.clone();
    async move {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        answer.map_err(|why| LockError::InvalidConfig(why.into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_four_clients_computes_once_and_shares_the_result() {
    let server = RedisServer::start();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..4 {
        let client = client(&server.url()).await;
        for _ in 0..8 {
            let (client, runs) = (client.clone(), runs.clone());
            callers.spawn(async move {
                client
                    .once("report:1")
                    .ttl(TTL)
                    .wait(PATIENCE)
                    .run(|| counted(&runs, 300, Ok(vec![c, 42])))
                    .await
            });
        }
    }
    let mut answers = Vec::new();
    while let Some(answer) = callers.join_next().await {
        answers.push(answer.unwrap().unwrap());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(answers.len(), 32);
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
    // Within the ttl, a later caller gets it too, without computing.
    let later = client(&server.url()).await;
    let again = later
        .once("report:1")
        .run(|| counted(&runs, 0, Ok(vec![])))
        .await
        .unwrap();
    assert_eq!(
        (again, runs.load(Ordering::SeqCst)),
        (answers[0].clone(), 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_computation_is_taken_over_by_one_waiting_caller() {
    let server = RedisServer::start();
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    let runs = Arc::new(AtomicUsize::new(0));
    let first = {
        let (a, runs) = (a.clone(), runs.clone());
        tokio::spawn(async move {
            a.once("report:2")
                .ttl(TTL)
                .run(|| counted(&runs, 500, Err("the report failed")))
                .await
        })
    };
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut waiters = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (b, runs) = (b.clone(), runs.clone());
        waiters.spawn(async move {
            b.once("report:2")
                .ttl(TTL)
                .wait(PATIENCE)
                .run(|| counted(&runs, 100, Ok(vec![7])))
                .await
        });
    }
    let failed = first.await.unwrap().unwrap_err();
    assert!(failed.to_string().contains("the report failed"), "{failed}");
    while let Some(answer) = waiters.join_next().await {
        assert_eq!(answer.unwrap().unwrap(), [7]);
    }
    // The failed computation, then one waiter's.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A computing caller cut off from Redis loses its lease: its computation is dropped and it
/// gets `Lost`; a waiting caller computes once the lease ends, and shares its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computing_caller_cut_off_from_redis_is_replaced() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    // The computing caller's write lease is its client's default ttl: a short one here.
    let cut = LockClient::builder()
        .url(proxy.url())
        .command_timeout(Duration::from_millis(300))
        .default_ttl(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let other = client(&server.url()).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let first = {
        let runs = runs.clone();
        tokio::spawn(async move {
            cut.once("report:3")
                .ttl(TTL)
                .run(|| counted(&runs, 60_000, Ok(vec![1])))
                .await
        })
    };
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waiter = {
        let runs = runs.clone();
        tokio::spawn(async move {
            other
                .once("report:3")
                .ttl(TTL)
                .wait(PATIENCE)
                .run(|| counted(&runs, 0, Ok(vec![2])))
                .await
        })
    };
    proxy.partition();
    let lost = first.await.unwrap().unwrap_err();
    assert!(lost.is_lost(), "{lost}");
    assert_eq!(waiter.await.unwrap().unwrap(), [2]);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_result_too_large_is_refused_clearly_and_computed_again() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let refused = client
            .once("report:4")
            .max_size(64)
            .run(|| counted(&runs, 0, Ok((0..100).collect())))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, LockError::ResultNotShared { reason, .. } if reason.contains("over the limit of 64")),
            "{refused}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // A stored result that does not decode as the type asked for is computed again.
    let number: u64 = client
        .once("report:5")
        .run(|| async { Ok::<_, LockError>(5) })
        .await
        .unwrap();
    let text: String = client
        .once("report:5")
        .run(|| async { Ok::<_, LockError>(format!("now {number}")) })
        .await
        .unwrap();
    assert_eq!(text, "now 5");
}
