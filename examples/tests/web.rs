//! The HTTP service against a real Redis, driven over real TCP with hand-written HTTP/1.1.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rlock_examples::database::ScratchDatabase;
use rlock_examples::seckill::Store;
use rlock_examples::web::{self, App};
use rlock_runtime::LockClient;
use rlock_tests::deploy::redlock_url;
use rlock_tests::{RedisServer, http};
use serde_json::Value;
use tokio::net::TcpListener;

/// Serves the router on a free loopback port, with voucher 1 on sale in a SQLite file that
/// lasts as long as the returned `ScratchDatabase`.
async fn serve(server: &RedisServer, stock: u64) -> (SocketAddr, App, ScratchDatabase) {
    let locks = LockClient::builder()
        .url(server.url())
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let database = ScratchDatabase::new().unwrap();
    let app = App::new(Store::connect(&database.url()).await.unwrap(), locks);
    app.open_voucher(1, stock).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = web::router(app.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, app, database)
}

/// One request on its own connection; returns the status code and the JSON body.
async fn request(addr: SocketAddr, method: &str, path: &str, user: Option<u64>) -> (u16, Value) {
    let (status, _head, body) = exchange(addr, method, path, user).await;
    (status, body)
}

/// One request on its own connection; returns the status code, the head (lower-cased) and
/// the JSON body.
async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    user: Option<u64>,
) -> (u16, String, Value) {
    let user = user.map(|user| user.to_string());
    let headers: Vec<_> = user
        .iter()
        .map(|user| ("x-user-id", user.as_str()))
        .collect();
    let reply = http::exchange(addr, method, path, &headers).await;
    let body = serde_json::from_str(&reply.body).unwrap();
    (reply.status, reply.head, body)
}

async fn order(addr: SocketAddr, user: u64) -> (u16, Value) {
    request(addr, "POST", "/vouchers/1/orders", Some(user)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_give_each_user_one_order_and_the_rest_409() {
    let server = RedisServer::start();
    let (addr, _app, _database) = serve(&server, 100).await;
    let (users, per_user) = (30u64, 4);

    let requests: Vec<_> = (1..=users)
        .flat_map(|user| (0..per_user).map(move |_| user))
        .map(|user| tokio::spawn(async move { (user, order(addr, user).await) }))
        .collect();
    let mut created: HashMap<u64, u32> = HashMap::new();
    let mut conflicts: HashMap<String, u32> = HashMap::new();
    for request in requests {
        let (user, (status, body)) = request.await.unwrap();
        match status {
            201 => {
                assert_eq!(body["user_id"], user);
                assert_eq!(body["voucher_id"], 1);
                *created.entry(user).or_default() += 1;
            }
            409 => {
                let error = body["error"].as_str().unwrap().to_owned();
                assert!(
                    error == "busy" || error == "already_ordered",
                    "unexpected conflict {body}"
                );
                *conflicts.entry(error).or_default() += 1;
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    println!("conflicts: {conflicts:?}");
    assert_eq!(created.len() as u64, users, "every user got an order");
    assert!(
        created.values().all(|&n| n == 1),
        "one order per user: {created:?}"
    );
    assert_eq!(
        conflicts.values().sum::<u32>() as u64,
        users * (per_user - 1)
    );

    let (status, state) = request(addr, "GET", "/vouchers/1", None).await;
    assert_eq!(status, 200);
    assert_eq!(state["orders"], users);
    assert_eq!(state["stock"], 100 - users);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_is_409_with_retry_after_and_no_internals() {
    let server = RedisServer::start();
    let (addr, app, _database) = serve(&server, 10).await;

    // Another instance is placing user 5's order right now.
    let other_instance = app.locks.sibling();
    let held = other_instance.lock("order:5").acquire().await.unwrap();
    let (status, head, body) = exchange(addr, "POST", "/vouchers/1/orders", Some(5)).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("busy")));
    assert!(head.contains("\r\nretry-after: 1\r\n"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    // Safe for API clients: neither the key nor advice meant for the developer.
    let text = body.to_string();
    assert!(
        !text.contains("order:5") && !text.contains("wait ="),
        "{text}"
    );

    held.release().await.unwrap();
    let (status, body) = order(addr, 5).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = order(addr, 5).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("already_ordered"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_unknown_vouchers_and_sold_out() {
    let server = RedisServer::start();
    let (addr, _app, _database) = serve(&server, 1).await;

    let (status, body) = request(addr, "POST", "/vouchers/1/orders", None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("missing_user"))
    );
    let (status, body) = request(addr, "POST", "/vouchers/9/orders", Some(1)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_voucher"))
    );
    assert_eq!(order(addr, 1).await.0, 201);
    let (status, body) = order(addr, 2).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("sold_out")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_503() {
    let server = RedisServer::start();
    let (addr, _app, _database) = serve(&server, 10).await;
    server.kill();

    let (status, body) = order(addr, 1).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_for_prometheus_labelled_by_key_template() {
    // Installed before any lock of this test binary is taken, counted from then on.
    rlock_examples::prometheus::install();
    let server = RedisServer::start();
    let (addr, _app, _database) = serve(&server, 10).await;
    assert_eq!(order(addr, 7).await.0, 201);

    let reply = http::exchange(addr, "GET", "/metrics", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.head);
    assert!(
        reply
            .head
            .contains("\r\ncontent-type: text/plain; version=0.0.4"),
        "{}",
        reply.head
    );
    let body = reply.body;
    // The template the handler's attribute names, never a rendered key such as `order:7`.
    let acquired = body
        .lines()
        .find_map(|l| {
            l.strip_prefix("rlock_acquired_total{lock=\"order:<user_id>\",kind=\"lock\"} ")
        })
        .unwrap_or_else(|| panic!("no acquisition counted:\n{body}"));
    assert!(acquired.parse::<u64>().unwrap() >= 1, "{body}");
    assert!(
        body.contains("# TYPE rlock_hold_seconds histogram"),
        "{body}"
    );
    assert!(
        body.contains(
            "rlock_hold_seconds_bucket{lock=\"order:<user_id>\",kind=\"lock\",le=\"+Inf\"}"
        ),
        "{body}"
    );
    assert!(!body.contains("order:7"), "{body}");
}

/// An order retried with its `Idempotency-Key` (a client that timed out, a double click) gets
/// the first answer, replayed, and no second order; without the key the same retry is
/// refused as a second order. The key used for another request is `422`; another user's equal
/// key is that user's own; concurrent retries make one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_order_gets_the_first_answer_and_makes_one_order() {
    let server = RedisServer::start();
    let (addr, app, _database) = serve(&server, 10).await;
    app.open_voucher(2, 10).await.unwrap();
    let key = ("idempotency-key", "\"retry-me\"");
    let send = |path: &'static str, user: &'static str| async move {
        http::exchange(addr, "POST", path, &[("x-user-id", user), key]).await
    };

    let first = send("/vouchers/1/orders", "7").await;
    assert_eq!(first.status, 201, "{}", first.body);
    let retried = send("/vouchers/1/orders", "7").await;
    assert_eq!((retried.status, &retried.body), (201, &first.body));
    assert!(
        retried.has_header("idempotency-replayed", "true"),
        "{}",
        retried.head
    );
    assert!(
        retried.has_header("content-type", "application/json"),
        "{}",
        retried.head
    );
    let (status, body) = order(addr, 7).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("already_ordered"))
    );

    let other = send("/vouchers/2/orders", "7").await;
    assert_eq!(other.status, 422, "{}", other.body);
    let someone_else = send("/vouchers/1/orders", "8").await;
    assert_eq!(someone_else.status, 201, "{}", someone_else.body);
    assert!(!someone_else.has_header("idempotency-replayed", "true"));

    let mut retries = tokio::task::JoinSet::new();
    for _ in 0..6 {
        retries.spawn(send("/vouchers/2/orders", "9"));
    }
    let mut made = Vec::new();
    while let Some(reply) = retries.join_next().await {
        let reply = reply.unwrap();
        match reply.status {
            201 => made.push(reply.body),
            409 => assert!(reply.body.contains("being processed"), "{}", reply.body),
            other => panic!("{other}: {}", reply.body),
        }
    }
    assert!(
        !made.is_empty() && made.iter().all(|b| *b == made[0]),
        "{made:?}"
    );
    let (_, tally) = request(addr, "GET", "/vouchers/2", None).await;
    assert_eq!(tally["orders"], 1, "{tally}");
}

/// A client that cannot keep answers (Redlock: independent masters) makes every keyed
/// request `500`, logged, rather than `503`: retrying will not help; unkeyed requests run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_keep_answers_is_a_500_not_a_retry() {
    let masters = RedisServer::start_many(3);
    let client = LockClient::connect(&redlock_url(&masters)).await.unwrap();
    let router = axum::Router::new()
        .route("/orders", axum::routing::post(|| async { "ran" }))
        .layer(rlock_runtime::IdempotencyLayer::new(client));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });

    let keyed = http::exchange(addr, "POST", "/orders", &[("idempotency-key", "\"k\"")]).await;
    assert_eq!(keyed.status, 500, "{}", keyed.body);
    assert!(keyed.body.contains("cannot keep answers"), "{}", keyed.body);
    let unkeyed = http::exchange(addr, "POST", "/orders", &[]).await;
    assert_eq!((unkeyed.status, unkeyed.body.as_str()), (200, "ran"));
}
