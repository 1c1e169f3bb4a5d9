//! The flash sale: one order per user and no oversold stock, with and without the locks.
//!
//! ```text
//! cargo run -p rlock-examples --example seckill
//! cargo run -p rlock-examples --example seckill -- --no-lock
//! cargo run -p rlock-examples --example seckill -- --users 1000 --stock 50 --workers 2
//! ```
//!
//! The order logic, the store layout and the reasons for the two locks are in
//! `examples/src/seckill/` (the lesson, `Shop`, in its `mod.rs`).

use std::process::ExitCode;

use rlock_examples::seckill::{self, Command, Config, Store, Workers};
use rlock_runtime::BoxError;

#[tokio::main]
async fn main() -> ExitCode {
    // `--help` and mistakes: clap prints them and exits.
    let command = seckill::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let outcome = match command {
        Command::Worker { config, index } => seckill::run_worker(&config, index).await,
        Command::Run(config) => sale(config).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seckill: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn sale(mut config: Config) -> Result<(), BoxError> {
    let backend = rlock_examples::backend(config.redis.clone()).await?;
    if config.lock {
        println!("locking on {}", backend.description);
    } else {
        println!(
            "no locks (--no-lock); the store is on {}",
            backend.description
        );
    }
    config.redis = backend.url.clone();

    // Worker processes share the sale only through Redis; the in-memory backend lives in
    // one process, so without Redis the workers are tasks.
    let (store, workers, kind) = match &backend.url {
        Some(url) => (
            Store::connect(url).await?,
            Workers::Processes(std::env::current_exe()?),
            "worker processes",
        ),
        None => (
            Store::in_memory(),
            Workers::Tasks,
            "worker tasks (in-memory backend)",
        ),
    };
    println!(
        "voucher {} with stock {}: {} users x {} concurrent requests over {} {kind}, locks {}",
        config.voucher_id,
        config.stock,
        config.users,
        config.requests,
        config.workers,
        if config.lock { "on" } else { "OFF" },
    );

    let run = seckill::run(
        &config,
        &store,
        &backend.client,
        workers,
        seckill::stdout_is_terminal(),
    );
    // On Ctrl-C, return normally so that the workers and the redis-server started for this
    // run are stopped rather than left behind.
    let report = tokio::select! {
        report = run => report?,
        _ = tokio::signal::ctrl_c() => return Err("interrupted".into()),
    };
    print!("{report}");
    if config.lock {
        println!(
            "  busy rejections: a user's concurrent duplicate requests, turned away by the \
             order:<user_id> lock while the first one ran"
        );
    } else if report.duplicate_users > 0 || report.oversold > 0 {
        println!("  without the locks, concurrent requests passed the checks before any write");
    }
    println!("{}", report.summary_line());
    Ok(())
}
