//! Behaviour of functions annotated with `#[distributed_lock]`, on the in-memory backend.
//!
//! "Another instance" is played by `LockClient::sibling`, which shares the backend but not
//! the identity, so it neither re-enters our holds nor lets us re-enter its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rlock_runtime::{LockClient, LockError, distributed_lock};

/// Whether another instance would find `key` locked right now.
async fn busy_elsewhere(client: &LockClient, key: &str) -> bool {
    match client.sibling().lock(key).acquire().await {
        Ok(guard) => {
            guard.release().await.expect("release a probe lock");
            false
        }
        Err(err) => {
            assert!(err.is_busy(), "unexpected error probing {key}: {err}");
            true
        }
    }
}

#[distributed_lock(key = "order:<user_id>:<item>", client = client)]
async fn order(client: &LockClient, user_id: u64, item: &str) -> Result<(bool, bool), LockError> {
    let held = busy_elsewhere(
        client,
        &format!("order:{user_id}:{}", item.replace(':', "%3A")),
    )
    .await;
    let other = busy_elsewhere(client, "order:0:other").await;
    Ok((held, other))
}

#[tokio::test]
async fn key_is_rendered_from_the_arguments_and_held_during_the_body() {
    let client = LockClient::in_memory();
    let (held, other) = order(&client, 42, "a:b").await.expect("lock is free");
    assert!(
        held,
        "the rendered key `order:42:a%3Ab` is held while the body runs"
    );
    assert!(!other, "no other key is held");
    assert!(
        !busy_elsewhere(&client, "order:42:a%3Ab").await,
        "released after the body"
    );
}

#[distributed_lock(key = "lit:<<x>>:<id>", client = client)]
async fn escaped_brackets(client: &LockClient, id: u32) -> Result<bool, LockError> {
    Ok(busy_elsewhere(client, &format!("lit:<x>:{id}")).await)
}

#[tokio::test]
async fn doubled_brackets_are_literal() {
    let client = LockClient::in_memory();
    assert!(escaped_brackets(&client, 5).await.expect("free"));
}

#[distributed_lock(key = "stock:<sku>", client = client)]
async fn take_stock(client: &LockClient, sku: u32, runs: &AtomicUsize) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn busy_lock_returns_err_without_running_the_body() {
    let client = LockClient::in_memory();
    let other = client.sibling();
    let held = other.lock("stock:7").acquire().await.expect("free");
    let runs = AtomicUsize::new(0);
    let err = take_stock(&client, 7, &runs).await.expect_err("busy");
    assert!(err.is_busy(), "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body did not run");

    held.release().await.expect("release");
    take_stock(&client, 7, &runs).await.expect("free again");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[distributed_lock(key = "stock:<sku>", client = client, wait = "5s")]
async fn take_stock_waiting(client: &LockClient, sku: u32) -> Result<u32, LockError> {
    Ok(sku)
}

#[tokio::test]
async fn wait_acquires_once_the_holder_releases() {
    let client = LockClient::in_memory();
    let held = client
        .sibling()
        .lock("stock:8")
        .acquire()
        .await
        .expect("free");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.release().await
    });
    assert_eq!(
        take_stock_waiting(&client, 8)
            .await
            .expect("acquired after waiting"),
        8
    );
    release.await.expect("join").expect("release");
}

#[distributed_lock(key = "fenced:<id>", client = client, fence = token)]
async fn fenced(client: &LockClient, id: u8) -> Result<u64, LockError> {
    Ok(token)
}

#[tokio::test]
async fn fence_is_bound_and_increases() {
    let client = LockClient::in_memory();
    let first = fenced(&client, 1).await.expect("free");
    let second = fenced(&client, 1).await.expect("free");
    let by_hand = client
        .lock("fenced:1")
        .fenced()
        .acquire()
        .await
        .expect("free");
    assert!(second > first, "{second} > {first}");
    assert!(by_hand.fence().expect("asked for").get() > second);
    by_hand.release().await.expect("release");
}

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Insufficient,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

#[distributed_lock(key = "account:<id>", client = client, fence = outer)]
async fn transfer(client: &LockClient, id: u64, amount: u64) -> Result<(u64, u64), AppError> {
    let inner = withdraw(client, id, amount).await?;
    assert!(
        busy_elsewhere(client, &format!("account:{id}")).await,
        "still held after the inner call"
    );
    Ok((outer, inner))
}

#[distributed_lock(key = "account:<id>", client = client, fence = inner)]
async fn withdraw(client: &LockClient, id: u64, amount: u64) -> Result<u64, AppError> {
    if amount > 100 {
        return Err(AppError::Insufficient);
    }
    Ok(inner)
}

#[tokio::test]
async fn nested_calls_on_the_same_key_reenter() {
    let client = LockClient::in_memory();
    let (outer, inner) = transfer(&client, 3, 10).await.expect("reentrant");
    assert_eq!(outer, inner, "a reentrant hold shares the outer fence");
    assert!(
        !busy_elsewhere(&client, "account:3").await,
        "the outermost release deletes"
    );

    // The body's own error comes back through `?` unchanged.
    assert!(matches!(
        transfer(&client, 3, 1000).await,
        Err(AppError::Insufficient)
    ));
    assert!(!busy_elsewhere(&client, "account:3").await);

    // Failing to acquire comes back through `From<LockError>`.
    let held = client
        .sibling()
        .lock("account:3")
        .acquire()
        .await
        .expect("free");
    match transfer(&client, 3, 10).await {
        Err(AppError::Lock(err)) => assert!(err.is_busy(), "{err}"),
        other => panic!("expected a busy lock, got {other:?}"),
    }
    held.release().await.expect("release");
}

#[distributed_lock(key = "spawned:<id>", client = client)]
async fn spawned(client: LockClient, id: u64) -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_futures_are_send_and_spawnable() {
    let client = LockClient::in_memory();
    let tasks: Vec<_> = (0..8)
        .map(|id| tokio::spawn(spawned(client.clone(), id)))
        .collect();
    for (id, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.expect("join").expect("distinct keys"), id as u64);
    }
}

struct Inventory {
    locks: LockClient,
    warehouse: String,
    reserved: u32,
}

impl Inventory {
    #[distributed_lock(key = "inv:<self.warehouse>:<sku>", client = self.locks)]
    async fn available(&self, sku: u32) -> Result<bool, LockError> {
        Ok(busy_elsewhere(&self.locks, &format!("inv:{}:{sku}", self.warehouse)).await)
    }

    #[distributed_lock(key = "inv:<self.warehouse>:<sku>", client = self.locks, fence = token)]
    async fn reserve(&mut self, sku: u32) -> Result<u64, LockError> {
        self.reserved += 1;
        Ok(token)
    }

    #[distributed_lock(key = "inv:<self.warehouse>", client = self.locks.clone())]
    async fn into_reserved(self) -> Result<u32, LockError> {
        Ok(self.reserved)
    }
}

#[tokio::test]
async fn methods_with_self_receivers_and_client_from_self() {
    let mut inventory = Inventory {
        locks: LockClient::in_memory(),
        warehouse: "north/1".into(),
        reserved: 0,
    };
    // `/` in a value is escaped, so the key is `inv:north%2F1:5`.
    assert!(!inventory.available(5).await.expect("free"));
    inventory.warehouse = "north".into();
    assert!(inventory.available(5).await.expect("free"));
    inventory.reserve(5).await.expect("free");
    inventory.reserve(5).await.expect("free");
    assert_eq!(inventory.into_reserved().await.expect("free"), 2);
}

struct Path<T>(T);
struct State<T>(T);

#[derive(Clone)]
struct App {
    locks: LockClient,
}

#[distributed_lock(key = "user:<user_id>:<tenant>", client = state.locks)]
async fn handler(
    Path(user_id): Path<u64>,
    State(state): State<App>,
    (tenant, _): (&str, u8),
) -> Result<bool, LockError> {
    Ok(busy_elsewhere(&state.locks, &format!("user:{user_id}:{tenant}")).await)
}

#[tokio::test]
async fn pattern_bound_parameters_render_into_the_key() {
    let app = App {
        locks: LockClient::in_memory(),
    };
    assert!(
        handler(Path(11), State(app.clone()), ("acme", 0))
            .await
            .expect("free")
    );
}

struct Request {
    user: User,
    pair: (u8, &'static str),
}

struct User {
    id: u64,
}

#[distributed_lock(key = "req:<req.user.id>:<req.pair.1>", client = client)]
async fn nested_fields(client: &LockClient, req: &Request) -> Result<bool, LockError> {
    Ok(
        busy_elsewhere(client, &format!("req:{}:{}", req.user.id, req.pair.1)).await
            && req.pair.0 == 1,
    )
}

#[tokio::test]
async fn field_paths_render_into_the_key() {
    let client = LockClient::in_memory();
    let req = Request {
        user: User { id: 77 },
        pair: (1, "x"),
    };
    assert!(nested_fields(&client, &req).await.expect("free"));
}

#[distributed_lock(key = "installed:<id>")]
async fn with_installed_client(id: u32, runs: Arc<AtomicUsize>) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

#[tokio::test]
async fn default_client_is_the_installed_one() {
    // No other test in this binary relies on the installed client, so installing is safe.
    let client = LockClient::in_memory();
    rlock_runtime::install(client.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let held = client
        .sibling()
        .lock("installed:1")
        .acquire()
        .await
        .expect("free");
    assert!(
        with_installed_client(1, runs.clone())
            .await
            .expect_err("busy")
            .is_busy()
    );
    held.release().await.expect("release");
    assert_eq!(
        with_installed_client(1, runs.clone()).await.expect("free"),
        1
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
