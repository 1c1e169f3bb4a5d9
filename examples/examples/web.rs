//! The flash sale as an HTTP service: the axum handler carries `#[distributed_lock]`.
//!
//! ```text
//! cargo run -p rlock-examples --example web -- [--port 3000] [--stock 100] [--redis URL]
//! curl -i -X POST -H 'x-user-id: 7' http://127.0.0.1:3000/vouchers/1/orders
//! curl -i http://127.0.0.1:3000/vouchers/1
//! curl http://127.0.0.1:3000/metrics
//! ```
//!
//! Routes, status codes and the handler are in `examples/src/web.rs`.

use std::process::ExitCode;

use clap::Parser;
use rlock_examples::database::ScratchDatabase;
use rlock_examples::seckill::Store;
use rlock_examples::web::{self, App};
use rlock_runtime::BoxError;

/// The flash sale as an HTTP service: the handler carries #[distributed_lock].
#[derive(Debug, Parser)]
#[command(name = "web")]
struct Args {
    /// The port to listen on, on 127.0.0.1.
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// Stock of voucher 1.
    #[arg(long, default_value_t = 100)]
    stock: u64,
    #[arg(long, value_name = "URL", help = rlock_examples::REDIS_HELP)]
    redis: Option<String>,
    /// The database of vouchers and orders: `sqlite://<file>` or `postgres://…` [default: a
    /// SQLite file made for this run].
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    database: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::exit_code("web", serve(Args::parse()).await)
}

async fn serve(args: Args) -> Result<(), BoxError> {
    // Before the first lock, so that every acquisition is counted.
    rlock_examples::prometheus::install();
    let backend = rlock_examples::backend(args.redis).await?;
    println!("locking on {}", backend.description);
    let (database, _scratch) = ScratchDatabase::unless_named(args.database)?;
    let store = Store::connect(&database).await?;
    println!(
        "orders in {:?} at {}",
        store.dialect(),
        rlock_examples::redact(store.url())
    );
    let app = App::new(store, backend.client.clone());
    app.open_voucher(1, args.stock).await?;

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let addr = listener.local_addr()?;
    println!("voucher 1 is on sale with stock {}; try:", args.stock);
    println!("  curl -i -X POST -H 'x-user-id: 7' http://{addr}/vouchers/1/orders");
    println!("  curl -i http://{addr}/vouchers/1");
    println!("  curl http://{addr}/metrics      # rlock's metrics, for Prometheus to scrape");
    println!("serving on http://{addr} (Ctrl-C stops it)");
    axum::serve(listener, web::router(app))
        .with_graceful_shutdown(shutdown())
        .await?;
    // Returning (rather than being killed) stops the redis-server started for this run.
    Ok(())
}

/// Resolves on Ctrl-C or, on Unix, SIGTERM.
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
