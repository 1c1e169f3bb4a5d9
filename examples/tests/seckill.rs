//! The flash sale against a real Redis: the locks keep both rules, and without them the
//! same logic breaks both.
#![allow(clippy::unwrap_used)]

use rlock_examples::seckill::{self, Config, Report, Store, Workers};
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;

/// Runs a sale with workers as tasks (inside a test, `current_exe()` is the test binary,
/// not the example, so worker processes are not an option here).
async fn sale(server: &RedisServer, config: Config) -> Report {
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let store = Store::connect(&server.url()).await.unwrap();
    seckill::run(&config, &store, &locks, Workers::Tasks, false)
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
    let server = RedisServer::start();
    let config = small(true);
    let report = sale(&server, config.clone()).await;
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
    let server = RedisServer::start();
    let config = Config {
        stock: 100,
        ..small(true)
    };
    let report = sale(&server, config).await;

    assert_eq!((report.orders, report.duplicate_users), (60, 0));
    assert_eq!(report.stock_left, 40);
    // Reading back the store directly: one entry per user in the orders list.
    let mut raw = server.raw().await;
    let mut users: Vec<u64> = redis::cmd("LRANGE")
        .arg("seckill:voucher:1:orders")
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    users.sort_unstable();
    assert_eq!(users, (1..=60).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_locks_the_same_logic_oversells_and_duplicates() {
    let server = RedisServer::start();
    let config = small(false);
    let report = sale(&server, config).await;
    println!("{report}{}", report.summary_line());

    assert!(report.oversold > 0, "expected oversold stock: {report:?}");
    assert!(
        report.duplicate_users > 0,
        "expected duplicate orders: {report:?}"
    );
    assert_eq!(report.tally.busy, 0);
    assert!(report.summary_line().ends_with("lock=off"));
}
