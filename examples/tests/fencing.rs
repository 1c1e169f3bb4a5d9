//! Fencing in the database: a holder process stopped (SIGSTOP) past its lease wakes up,
//! writes with its old token, and PostgreSQL itself refuses the write (`UPDATE … WHERE fence
//! < $3` matches no row), so the newer holder's report stands.
#![allow(clippy::unwrap_used)]

use rlock_examples::reports::{Reports, Write};
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::child::LineChild;
use rlock_tests::locking::PATIENCE;
use rlock_tests::postgres::PostgresServer;

/// The report both holders write.
const REPORT: u64 = 7;

/// Starts a `fenced-writer` process, driven line by line; killed on drop.
fn start_writer(redis: &str, database: &str) -> LineChild {
    let args = ["--redis", redis, "--database", database].map(String::from);
    LineChild::start(env!("CARGO_BIN_EXE_fenced-writer"), &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_a_holder_stopped_past_its_lease_has_its_late_write_refused() {
    let (server, postgres) = (RedisServer::start(), PostgresServer::start());
    let reports = Reports::connect(&postgres.url()).await.unwrap();
    reports.reset(REPORT).await.unwrap();

    let mut stopped = start_writer(&server.url(), &postgres.url());
    let first = stopped.text().unwrap();
    let fence: u64 = first.strip_prefix("fence ").unwrap().parse().unwrap();
    assert_eq!(
        stopped.ask_text("write by the first holder, in its lease"),
        Some("accepted".to_owned())
    );
    // Stopped whole, watchdog included: nobody renews its lease now.
    stopped.signal("-STOP");

    let client = LockClient::connect(&server.url()).await.unwrap();
    let newer = client
        .lock(format!("report:{REPORT}"))
        .fenced()
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    let token = newer.fence().unwrap().get();
    assert!(token > fence, "{token} after {fence}");
    assert_eq!(
        reports
            .write(REPORT, token, "by the newer holder")
            .await
            .unwrap(),
        Write::Accepted
    );

    // Woken while the newer holder still holds: it writes as if nothing happened.
    stopped.signal("-CONT");
    let late = tokio::task::spawn_blocking(move || {
        let late = stopped.ask_text("write by the stopped holder, after its lease");
        (late, stopped.ask_text("release"))
    })
    .await
    .unwrap();
    assert_eq!(
        late,
        (Some(format!("refused {token}")), Some("lost".to_owned()))
    );
    let report = reports.read(REPORT).await.unwrap().unwrap();
    assert_eq!(
        (report.body.as_str(), report.fence),
        ("by the newer holder", token)
    );
    newer.release().await.unwrap();
}
