//! The flash sale as an HTTP service: the axum handler carries `#[distributed_lock]`.
//!
//! ```text
//! cargo run -p rlock-examples --example web -- [--port 3000] [--stock 100] [--redis URL]
//! curl -i -X POST -H 'x-user-id: 7' http://127.0.0.1:3000/vouchers/1/orders
//! curl -i http://127.0.0.1:3000/vouchers/1
//! ```
//!
//! Routes, status codes and the handler are in `examples/src/web.rs`.

use std::process::ExitCode;

use rlock_examples::seckill::Store;
use rlock_examples::web::{self, App};
use rlock_runtime::BoxError;

const USAGE: &str = "usage: web [--port N] [--stock N] [--redis URL]";

/// The command line.
struct Args {
    port: u16,
    stock: u64,
    redis: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut parsed = Args {
        port: 3000,
        stock: 100,
        redis: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let bad = |v: &str| format!("{flag}: `{v}` is not a valid value\n{USAGE}");
        match flag.as_str() {
            "--port" => parsed.port = value.and_then(|v| v.parse().map_err(|_| bad(&v)))?,
            "--stock" => parsed.stock = value.and_then(|v| v.parse().map_err(|_| bad(&v)))?,
            "--redis" => parsed.redis = Some(value?),
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("web: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), BoxError> {
    let backend = rlock_examples::backend(args.redis).await?;
    println!("locking on {}", backend.description);
    let store = match &backend.url {
        Some(url) => Store::connect(url).await?,
        None => Store::in_memory(),
    };
    let app = App::new(store, backend.client.clone());
    app.open_voucher(1, args.stock).await?;

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let addr = listener.local_addr()?;
    println!("voucher 1 is on sale with stock {}; try:", args.stock);
    println!("  curl -i -X POST -H 'x-user-id: 7' http://{addr}/vouchers/1/orders");
    println!("  curl -i http://{addr}/vouchers/1");
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
