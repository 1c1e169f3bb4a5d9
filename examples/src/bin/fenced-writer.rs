//! One instance of the fencing example's service as a process of its own, for a test to stop
//! with SIGSTOP past its lease (watchdog and all) and wake again:
//!
//! ```text
//! fenced-writer --redis URL --database URL [--report 7] [--ttl-ms 500]
//! ```
//!
//! It takes `report:<id>` with a fencing token (its watchdog renewing the lease) and prints
//! `fence <n>`; then, line by line on stdin, `write <body>` writes the report with that token
//! and prints `accepted` or `refused <newest token the row keeps>`, and `release` releases
//! and prints `released` or `lost`, then exits.

use std::io::BufRead as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rlock_examples::reports::{Reports, Write};
use rlock_runtime::{BoxError, LockClient, LockError};

/// A fenced writer of one report, driven over stdin.
#[derive(Debug, Parser)]
#[command(name = "fenced-writer")]
struct Args {
    /// The Redis holding the lock.
    #[arg(long, value_name = "URL")]
    redis: String,
    /// The database of the report: `sqlite://<file>` or `postgres://…`.
    #[arg(long, value_name = "URL")]
    database: String,
    /// The report to write.
    #[arg(long, default_value_t = 7)]
    report: u64,
    /// The lock's lease, renewed by the watchdog while the process runs.
    #[arg(long, default_value_t = 500)]
    ttl_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    rlock_examples::exit_code("fenced-writer", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let client = LockClient::connect(&args.redis).await?;
    let reports = Reports::connect(&args.database).await?;
    let guard = client
        .lock(format!("report:{}", args.report))
        .ttl(Duration::from_millis(args.ttl_ms))
        .fenced()
        .acquire()
        .await?;
    let fence = guard
        .fence()
        .ok_or("the lock was granted without a fence")?
        .get();
    println!("fence {fence}");
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        match line.split_once(' ').unwrap_or((line.as_str(), "")) {
            ("write", body) => match reports.write(args.report, fence, body).await? {
                Write::Accepted => println!("accepted"),
                Write::Refused { newest } => println!("refused {newest}"),
            },
            ("release", _) => {
                match guard.release().await {
                    Ok(()) => println!("released"),
                    Err(LockError::Lost { .. }) => println!("lost"),
                    Err(e) => return Err(e.into()),
                }
                return Ok(());
            }
            _ => {
                return Err(
                    format!("unknown command {line:?}: use `write <body>` or `release`").into(),
                );
            }
        }
    }
    Err("stdin closed before `release`".into())
}
