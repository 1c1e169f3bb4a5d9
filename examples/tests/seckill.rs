//! The flash sale against a real Redis and a SQLite file: the lock keeps one order per
//! user, and without it the same logic writes duplicate orders; the stock is the database's
//! conditional update's, never oversold either way.
#![allow(clippy::unwrap_used)]

use rlock_examples::database::{Dialect, ScratchDatabase};
use rlock_examples::seckill::{self, Config, Report, Store, Workers};
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::postgres::PostgresServer;

/// Runs a sale with workers as tasks (inside a test, `current_exe()` is the test binary,
/// not the example, so worker processes are not an option here).
async fn sale(server: &RedisServer, store: &Store, config: Config) -> Report {
    let locks = LockClient::connect(&server.url()).await.unwrap();
    seckill::run(&config, store, &locks, Workers::Tasks, false)
        .await
        .unwrap()
}

fn small(lock: bool) -> Config {
    Config {
        stock: 20,
        users: 60,
        requests: 4,
        workers: 2,
        lock,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_locks_stock_is_never_oversold_and_each_user_orders_once() {
    let (server, database) = (RedisServer::start(), ScratchDatabase::new().unwrap());
    let store = Store::connect(&database.url()).await.unwrap();
    let config = small(true);
    let report = sale(&server, &store, config.clone()).await;
    println!("{report}{}", report.summary_line());

    assert_eq!(report.orders, config.stock.min(config.users));
    assert_eq!(report.duplicate_users, 0);
    assert_eq!(report.oversold, 0);
    assert_eq!(report.stock_left, 0);
    let t = report.tally;
    assert_eq!(t.failed, 0, "no request may fail: {t:?}");
    assert_eq!(
        t.ordered, report.orders,
        "the requests' account matches the store"
    );
    assert_eq!(
        t.ordered + t.already_ordered + t.sold_out + t.busy,
        config.total_requests()
    );
    assert!(report.summary_line().ends_with("lock=on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_more_stock_than_users_every_user_gets_exactly_one_order() {
    let (server, database) = (RedisServer::start(), ScratchDatabase::new().unwrap());
    let store = Store::connect(&database.url()).await.unwrap();
    let config = Config {
        stock: 100,
        ..small(true)
    };
    let report = sale(&server, &store, config).await;

    assert_eq!((report.orders, report.duplicate_users), (60, 0));
    assert_eq!(report.stock_left, 40);
    // Reading the table back directly: one order per user.
    let pool = sqlx::SqlitePool::connect(&database.url()).await.unwrap();
    let users: Vec<i64> = sqlx::query_scalar(
        "SELECT user_id FROM seckill_orders WHERE voucher_id = 1 ORDER BY user_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(users, (1..=60).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_the_same_logic_writes_duplicate_orders() {
    let (server, database) = (RedisServer::start(), ScratchDatabase::new().unwrap());
    let store = Store::connect(&database.url()).await.unwrap();
    // Stock for every request: each one that passed the check writes its order.
    let config = Config {
        stock: 1000,
        ..small(false)
    };
    let report = sale(&server, &store, config).await;
    println!("{report}{}", report.summary_line());

    assert_eq!(report.oversold, 0, "the conditional update never oversells");
    assert_eq!(report.tally.failed, 0, "{report:?}");
    assert!(
        report.duplicate_users > 0,
        "expected duplicate orders: {report:?}"
    );
    assert_eq!(report.tally.busy, 0);
    assert!(report.summary_line().ends_with("lock=off"));
}

/// The same sale on PostgreSQL (read committed, its default): the lock keeps one order per
/// user, and without it the database takes the duplicate orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_the_lock_keeps_one_order_per_user() {
    let (server, postgres) = (RedisServer::start(), PostgresServer::start());
    let store = Store::connect(&postgres.url()).await.unwrap();
    assert_eq!(store.dialect(), Dialect::Postgres);

    let config = Config {
        stock: 100,
        ..small(true)
    };
    let locked = sale(&server, &store, config).await;
    println!("{locked}{}", locked.summary_line());
    assert_eq!(
        (locked.orders, locked.duplicate_users, locked.oversold),
        (60, 0, 0)
    );
    assert_eq!(locked.tally.failed, 0, "{locked:?}");

    let config = Config {
        stock: 1000,
        ..small(false)
    };
    let unlocked = sale(&server, &store, config).await;
    println!("{unlocked}{}", unlocked.summary_line());
    assert!(unlocked.duplicate_users > 0, "{unlocked:?}");
    assert_eq!(unlocked.oversold, 0);
}
