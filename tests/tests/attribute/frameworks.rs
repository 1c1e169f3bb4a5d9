//! A lock error answered by the frameworks services serve from, over real connections to a
//! real server, with a real Redis behind it: actix-web (`ResponseError`) and tonic
//! (`From<LockError> for Status`). The same service answers each of the four ways a request
//! can end: placed, busy (another instance holds the lock), lost (the lease was broken while
//! the request held it) and unavailable (Redis is dead). axum's answers are tested the same
//! way in the examples' `web` test. The actix-web form of the idempotency layer keeps the
//! tower layer's rules (the examples' `web` test retries the shop's orders through that one).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use rlock_runtime::{LockClient, LockError, LockGuard};
use rlock_tests::{RedisServer, http};
use tokio::sync::Notify;
use tonic::Code;
use tonic::transport::Endpoint;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The user whose request stops while it holds its lock, until the test has broken it.
const PAUSED_USER: u64 = 7;

/// How long a test waits for the service to report that it holds the paused user's lock.
const HOLD_TIMEOUT: Duration = Duration::from_secs(30);

/// The service both frameworks serve: places a user's order under `order:<user>`, failing
/// with the lock's error.
#[derive(Clone)]
struct Shop {
    locks: LockClient,
    /// Told when the paused user's request holds its lock.
    held: Arc<Notify>,
    /// Lets the paused user's request go on, to its release.
    resume: Arc<Notify>,
}

impl Shop {
    async fn connect(server: &RedisServer) -> Shop {
        let locks = LockClient::builder()
            .url(server.url())
            .command_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap();
        Shop {
            locks,
            held: Arc::new(Notify::new()),
            resume: Arc::new(Notify::new()),
        }
    }

    async fn place(&self, user: u64) -> Result<(), LockError> {
        let guard = self.locks.lock(format!("order:{user}")).acquire().await?;
        if user == PAUSED_USER {
            self.held.notify_one();
            self.resume.notified().await;
        }
        guard.release().await
    }

    /// User `user`'s lock, taken by another instance placing their order right now.
    async fn held_by_another_instance(&self, user: u64) -> LockGuard {
        let other_instance = self.locks.sibling();
        other_instance
            .lock(format!("order:{user}"))
            .acquire()
            .await
            .unwrap()
    }

    /// Waits for the paused user's request to hold its lock, breaks the lock as an operator
    /// would, and lets the request go on to find it lost.
    async fn break_paused_lease(&self) {
        tokio::time::timeout(HOLD_TIMEOUT, self.held.notified())
            .await
            .expect("the paused request never held its lock");
        let broken = self
            .locks
            .sibling()
            .force_unlock(format!("order:{PAUSED_USER}"))
            .await
            .unwrap();
        assert!(broken, "the paused request's lock was held");
        self.resume.notify_one();
    }
}

/// The answers are safe for API clients: they never name the key.
fn assert_safe(text: &str) {
    assert!(!text.contains("order:"), "{text}");
}

async fn place(
    shop: actix_web::web::Data<Shop>,
    user: actix_web::web::Path<u64>,
) -> Result<&'static str, LockError> {
    shop.place(user.into_inner()).await?;
    Ok("placed")
}

/// Serves `POST /orders/{user}` with actix-web on a free loopback port.
fn serve_actix(shop: Shop) -> SocketAddr {
    use actix_web::{App, HttpServer, web};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(shop.clone()))
            .route("/orders/{user}", web::post().to(place))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    addr
}

async fn post(addr: SocketAddr, user: u64) -> http::Reply {
    http::exchange(addr, "POST", &format!("/orders/{user}"), &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_web_answers_lock_errors_with_the_statuses_and_bodies_axum_gives() {
    let server = RedisServer::start();
    let shop = Shop::connect(&server).await;
    let addr = serve_actix(shop.clone());
    let placed = post(addr, 1).await;
    assert_eq!((placed.status, placed.body.as_str()), (200, "placed"));

    let other_instance = shop.held_by_another_instance(5).await;
    let busy = post(addr, 5).await;
    assert_eq!(busy.status, 409, "{busy:?}");
    assert!(busy.has_header("retry-after", "1"), "{}", busy.head);
    assert!(
        busy.has_header("content-type", "application/json"),
        "{}",
        busy.head
    );
    assert_eq!(
        busy.body,
        r#"{"error":"busy","message":"the resource is being changed by another request; retry shortly"}"#
    );
    other_instance.release().await.unwrap();

    let request = tokio::spawn(post(addr, PAUSED_USER));
    shop.break_paused_lease().await;
    let lost = request.await.unwrap();
    assert_eq!(lost.status, 500, "{lost:?}");
    assert!(
        lost.body.starts_with(r#"{"error":"lock_lost","#),
        "{}",
        lost.body
    );
    assert!(!lost.head.contains("retry-after"), "{}", lost.head);
    assert_safe(&lost.body);

    server.kill();
    let unavailable = post(addr, 2).await;
    assert_eq!(unavailable.status, 503, "{unavailable:?}");
    assert!(
        unavailable.body.starts_with(r#"{"error":"unavailable","#),
        "{}",
        unavailable.body
    );
    assert_safe(&unavailable.body);
}

/// The gRPC face of the shop: the generated Health service stands in for a user's own
/// (real tonic codegen, no `protoc` needed); `Check` places the order of the user its
/// `service` field names.
#[tonic::async_trait]
impl Health for Shop {
    async fn check(
        &self,
        request: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        let user = request
            .into_inner()
            .service
            .parse()
            .map_err(|_| tonic::Status::invalid_argument("not a user id"))?;
        // What the feature is for: `?` from a lock error to a gRPC status.
        self.place(user).await?;
        Ok(tonic::Response::new(HealthCheckResponse {
            status: ServingStatus::Serving.into(),
        }))
    }

    type WatchStream =
        Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, tonic::Status>> + Send>>;

    async fn watch(
        &self,
        _request: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not served"))
    }
}

/// Serves the shop over gRPC on a free loopback port, and connects a client to it.
async fn serve_grpc(shop: Shop) -> HealthClient<tonic::transport::Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(HealthServer::new(shop))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_answers_busy_and_lost_as_aborted_and_a_dead_redis_as_unavailable() {
    let server = RedisServer::start();
    let shop = Shop::connect(&server).await;
    let client = serve_grpc(shop.clone()).await;
    let check = |user: u64| {
        let mut client = client.clone();
        async move {
            let request = HealthCheckRequest {
                service: user.to_string(),
            };
            client.check(request).await.map(|r| r.into_inner())
        }
    };
    let rlock_error = |status: &tonic::Status| {
        let value = status.metadata().get("rlock-error").cloned();
        value.map(|v| v.to_str().unwrap().to_owned())
    };

    let placed = check(1).await.unwrap();
    assert_eq!(placed.status(), ServingStatus::Serving);

    let other_instance = shop.held_by_another_instance(5).await;
    let busy = check(5).await.unwrap_err();
    assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
    assert_eq!(rlock_error(&busy).as_deref(), Some("busy"));
    assert_eq!(
        busy.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1000"
    );
    assert_eq!(
        busy.message(),
        "the resource is being changed by another request; retry shortly"
    );
    other_instance.release().await.unwrap();

    let request = tokio::spawn(check(PAUSED_USER));
    shop.break_paused_lease().await;
    let lost = request.await.unwrap().unwrap_err();
    assert_eq!(lost.code(), Code::Aborted, "{lost:?}");
    assert_eq!(rlock_error(&lost).as_deref(), Some("lock_lost"));
    assert!(lost.metadata().get("grpc-retry-pushback-ms").is_none());
    assert_safe(lost.message());

    server.kill();
    let unavailable = check(2).await.unwrap_err();
    assert_eq!(unavailable.code(), Code::Unavailable, "{unavailable:?}");
    // Said by the service, not by a transport that failed to reach it.
    assert_eq!(rlock_error(&unavailable).as_deref(), Some("unavailable"));
    assert_safe(unavailable.message());
}

/// Serves `POST /orders` with actix-web behind the idempotency middleware, keys scoped by
/// `x-user-id`; the handler counts its runs and answers `201` with the run's number.
fn serve_idempotent_actix(
    locks: LockClient,
    runs: Arc<std::sync::atomic::AtomicU64>,
) -> SocketAddr {
    use actix_web::{App, HttpResponse, HttpServer, web};
    use rlock_runtime::IdempotencyMiddleware;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = HttpServer::new(move || {
        let runs = runs.clone();
        let idempotent = IdempotencyMiddleware::new(locks.clone()).scope(|req| {
            req.headers()
                .get("x-user-id")?
                .to_str()
                .ok()
                .map(str::to_owned)
        });
        App::new().wrap(idempotent).route(
            "/orders",
            web::post().to(move || {
                let runs = runs.clone();
                async move {
                    let run = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    HttpResponse::Created()
                        .content_type("application/json")
                        .insert_header(("x-internal", "not replayed"))
                        .body(format!("{{\"order\":{run}}}"))
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_web_requests_with_an_idempotency_key_run_once_and_are_replayed() {
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let addr = serve_idempotent_actix(locks, runs.clone());
    let send = |user: &'static str, key: &'static str, path: &'static str| async move {
        http::exchange(
            addr,
            "POST",
            path,
            &[("x-user-id", user), ("idempotency-key", key)],
        )
        .await
    };

    // A retry while the first runs: 409; after it: the first answer, replayed.
    let first = tokio::spawn(send("7", "\"k1\"", "/orders"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let during = send("7", "\"k1\"", "/orders").await;
    assert_eq!(during.status, 409, "{}", during.body);
    let first = first.await.unwrap();
    assert_eq!((first.status, first.body.as_str()), (201, "{\"order\":1}"));
    let retried = send("7", "\"k1\"", "/orders").await;
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
    assert!(!retried.head.contains("x-internal"), "{}", retried.head);

    // The key on another request: 422; another user's equal key is theirs; no key: runs.
    let other = send("7", "\"k1\"", "/orders?again=1").await;
    assert_eq!(other.status, 422, "{}", other.body);
    let theirs = send("8", "\"k1\"", "/orders").await;
    assert_eq!(
        (theirs.status, theirs.body.as_str()),
        (201, "{\"order\":2}")
    );
    let bad = send("7", "\"\"", "/orders").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let unkeyed = http::exchange(addr, "POST", "/orders", &[("x-user-id", "7")]).await;
    assert_eq!(
        (unkeyed.status, unkeyed.body.as_str()),
        (201, "{\"order\":3}")
    );
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);

    // Redis gone: 503, and the request does not run unprotected.
    server.kill();
    let unavailable = send("7", "\"k2\"", "/orders").await;
    assert_eq!(unavailable.status, 503, "{}", unavailable.body);
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
}
