//! Fencing: even a correct lock can be lost, when its holder pauses (GC, a stalled VM, a
//! swapped-out process) for longer than its lease. The fencing token makes the database
//! itself refuse the paused holder's late write.
//!
//! ```text
//! cargo run -p rlock-examples --example fencing -- [--redis URL] [--database URL]
//! ```
//!
//! Timeline: A takes the lock (token n) and stalls for 600 ms, past its 200 ms lease. B
//! takes the lock (token n+1) and writes. A wakes up and writes too: the report's row has
//! been written with n+1, so the `UPDATE … WHERE fence < $3` matches no row and A's write
//! changes nothing. Without the token, A would overwrite B's newer report.
//!
//! The report is a row in SQLite (a file made for the run) unless `--database` or
//! `DATABASE_URL` names another database, PostgreSQL say. `examples/tests/fencing.rs` runs
//! the same store on PostgreSQL with a holder stopped whole, watchdog included.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rlock_examples::database::ScratchDatabase;
use rlock_examples::reports::{Reports, Write};
use rlock_runtime::{BoxError, LockClient, LockError, distributed_lock};

/// Fencing tokens: a database row that refuses writes from a holder whose lease ended.
#[derive(Debug, Parser)]
#[command(name = "fencing")]
struct Args {
    #[arg(long, value_name = "URL", help = rlock_examples::REDIS_HELP)]
    redis: Option<String>,
    /// The database of the report: `sqlite://<file>` or `postgres://…` [default: a SQLite
    /// file made for this run].
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    database: Option<String>,
}

/// Why saving a report failed.
#[derive(Debug, thiserror::Error)]
enum SaveError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("the report database failed: {0}")]
    Database(#[from] rlock_examples::database::DatabaseError),
}

/// Saves a report under `report:<id>`. Renewal is off so that the stall below outlives the
/// lease, as it would if the whole process (watchdog included) were frozen; `on_lost =
/// "continue"` lets the stale write reach the database, to show the database refusing it.
#[distributed_lock(
    key = "report:<id>",
    client = client,
    ttl = "200ms",
    renew = false,
    wait = "2s",
    on_lost = "continue",
    fence = token
)]
async fn save_report(
    client: &LockClient,
    reports: &Reports,
    id: u64,
    who: &str,
    stall: Duration,
) -> Result<(), SaveError> {
    println!("  {who}: holds `report:{id}` with fencing token {token}");
    if !stall.is_zero() {
        println!("  {who}: stalls for {stall:?} (lease is 200ms)");
        tokio::time::sleep(stall).await;
    }
    match reports
        .write(id, token, &format!("written by {who}"))
        .await?
    {
        Write::Accepted => println!("  {who}: write with token {token} accepted"),
        Write::Refused { newest } => println!(
            "  {who}: write with token {token} REFUSED by the database: the row was written \
             with {newest}"
        ),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::exit_code("fencing", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let backend = rlock_examples::backend(args.redis).await?;
    println!("locking on {}", backend.description);
    let (database, _scratch) = ScratchDatabase::unless_named(args.database)?;
    let reports = Reports::connect(&database).await?;
    println!("report rows in {}", rlock_examples::redact(&database));
    reports.reset(7).await?;

    // Two instances of the service.
    let (a, b) = (backend.client.clone(), backend.client.sibling());
    let slow = save_report(&a, &reports, 7, "A", Duration::from_millis(600));
    let fast = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!("  B: asks for the lock (waits up to 2s)");
        save_report(&b, &reports, 7, "B", Duration::ZERO).await
    };
    let (ra, rb) = tokio::join!(slow, fast);
    ra?;
    rb?;

    if let Some(report) = reports.read(7).await? {
        println!(
            "the row holds {:?} (token {}): the late write did not clobber it",
            report.body, report.fence
        );
    }
    println!("lost leases seen by A's instance: {}", a.metrics().lost);
    Ok(())
}
