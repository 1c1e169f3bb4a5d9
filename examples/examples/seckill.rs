//! The flash sale: one order per user and no oversold stock, with and without the locks.
//!
//! ```text
//! cargo run -p rlock-examples --example seckill
//! cargo run -p rlock-examples --example seckill -- --no-lock
//! cargo run -p rlock-examples --example seckill -- --users 1000 --stock 50 --workers 2
//! DATABASE_URL=postgres://shop@127.0.0.1/shop cargo run -p rlock-examples --example seckill
//! ```
//!
//! The order logic, the tables and what the lock does that the database does not are in
//! `examples/src/seckill/` (the lesson, `Shop`, in its `mod.rs`).

use std::process::ExitCode;

use rlock_examples::database::ScratchDatabase;
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
            "no locks (--no-lock); the lock client would be on {}",
            backend.description
        );
    }
    config.redis = backend.url.clone();

    // The orders live in a database every instance shares: the one named, or a SQLite file
    // made for this run (and removed after it).
    let (database, scratch) = ScratchDatabase::unless_named(config.database.clone())?;
    let store = Store::connect(&database).await?;
    println!(
        "orders in {:?} at {}{}",
        store.dialect(),
        store.url(),
        if scratch.is_some() {
            " (made for this run; --database or DATABASE_URL names another)"
        } else {
            ""
        }
    );
    config.database = Some(database);

    // Worker processes share the locks through Redis; the in-memory backend lives in one
    // process, so without Redis the workers are tasks.
    let (workers, kind) = match &backend.url {
        Some(_) => (
            Workers::Processes(std::env::current_exe()?),
            "worker processes",
        ),
        None => (Workers::Tasks, "worker tasks (in-memory backend)"),
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
    } else if report.duplicate_users > 0 {
        println!(
            "  without the locks, a user's concurrent requests all passed the check \
             (SELECT COUNT(*) of their orders) before any of them wrote its order"
        );
    }
    println!("{}", report.summary_line());
    Ok(())
}
