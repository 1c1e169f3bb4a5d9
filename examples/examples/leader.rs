//! Leader election: two instances of a service; one leads at a time and writes the billing
//! report under its term, which the report's row keeps. When the seat changes hands, the
//! former leader's writes still on their way (a slow network, a retry, a process that
//! stalled past its lease) arrive under its old term, and the database itself refuses them.
//!
//! ```text
//! cargo run -p rlock-examples --example leader -- [--redis URL] [--database URL]
//! ```
//!
//! Timeline: A is elected (term n) and writes; a second write of A's is held up on its way.
//! A steps down; B, campaigning meanwhile in the seat's queue with the loop form, is elected
//! at once (term m > n) and writes. A's held-up write arrives under n: `UPDATE … WHERE fence
//! < $3` matches no row. (`tests/tests/integration/leader.rs` does the same with leader
//! processes killed and stopped past their lease.) The report is the row of the `fencing`
//! example's table (`reports.rs`): SQLite, or the database that `--database` or
//! `DATABASE_URL` names.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rlock_examples::database::ScratchDatabase;
use rlock_examples::reports::{Reports, Write};
use rlock_runtime::{BoxError, LockClient};

/// Leader election whose terms fence the leader's writes.
#[derive(Debug, Parser)]
#[command(name = "leader")]
struct Args {
    #[arg(long, value_name = "URL", help = rlock_examples::REDIS_HELP)]
    redis: Option<String>,
    /// The database of the report: `sqlite://<file>` or `postgres://…` [default: a SQLite
    /// file made for this run].
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    database: Option<String>,
}

/// The report row the leaders write.
const REPORT: u64 = 9;

/// Writes the report under `term` and says what the database did.
async fn write(reports: &Reports, who: &str, term: u64) -> Result<Write, BoxError> {
    let written = reports
        .write(REPORT, term, &format!("billed by {who}"))
        .await?;
    match written {
        Write::Accepted => println!("  {who}: report written under term {term}"),
        Write::Refused { newest } => println!(
            "  {who}: write under term {term} REFUSED by the database: the row was written \
             under term {newest}"
        ),
    }
    Ok(written)
}

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::exit_code("leader", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let backend = rlock_examples::backend(args.redis).await?;
    println!("electing on {}", backend.description);
    let (database, _scratch) = ScratchDatabase::unless_named(args.database)?;
    let reports = Reports::connect(&database).await?;
    println!("report row in {}", rlock_examples::redact(&database));
    reports.reset(REPORT).await?;

    // Two instances of the service.
    let (a, b): (LockClient, LockClient) = (backend.client.clone(), backend.client.sibling());

    // A leads and writes; its next write is held up on the way.
    let lead = a.leader("billing").campaign().await?;
    let old_term = lead.term();
    println!("  A: elected, term {old_term}");
    write(&reports, "A", old_term).await?;
    let held_up = tokio::spawn({
        let reports = reports.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            write(&reports, "A (held-up write)", old_term).await
        }
    });

    // B runs the loop form: it waits in the seat's queue, and leads once the seat is free.
    let b_leads = tokio::spawn({
        let (b, reports) = (b.clone(), reports.clone());
        async move {
            b.leader("billing")
                .run(|term| {
                    // Each term's work gets its own handle: the loop may elect B again.
                    let reports = reports.clone();
                    async move {
                        println!("  B: elected, term {term}");
                        write(&reports, "B", term).await.map(|_| term)
                    }
                })
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!("  A: steps down");
    lead.resign().await?;
    let new_term = b_leads.await???;
    let refused = held_up.await??;

    if let Some(report) = reports.read(REPORT).await? {
        println!(
            "the row holds {:?} (term {}): the former leader's late write did not clobber it",
            report.body, report.fence
        );
    }
    if !matches!(refused, Write::Refused { .. }) || new_term <= old_term {
        return Err("the former leader's write was not refused".into());
    }
    Ok(())
}
