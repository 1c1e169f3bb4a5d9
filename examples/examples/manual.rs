//! The manual API: connect, lock, re-enter, see the fence, release.
//!
//! `cargo run -p rlock-examples --example manual [-- --redis URL]`

use std::process::ExitCode;
use std::time::Duration;

use rlock_runtime::{LockError, LockOptions};

#[tokio::main]
async fn main() -> ExitCode {
    let redis = rlock_examples::redis_option(
        "manual",
        "The manual API: connect, lock, re-enter, see the fence, release.",
    );
    rlock_examples::exit_code("manual", run(redis).await)
}

async fn run(redis: Option<String>) -> Result<(), LockError> {
    let backend = rlock_examples::backend(redis).await?;
    println!("locking on {}", backend.description);
    let client = backend.client.clone();

    // Take the lock by hand: one round trip when it is free.
    let guard = client
        .lock("order:42")
        .ttl(Duration::from_secs(10))
        .fenced()
        .acquire()
        .await?;
    println!(
        "acquired `{}` with fencing token {}",
        guard.key(),
        guard.fence().map_or(0, |f| f.get())
    );

    // Another instance of the service is turned away while we hold it.
    let other = client.sibling();
    match other.lock("order:42").acquire().await {
        Err(e @ LockError::Busy { .. }) => println!("another instance: {e}"),
        other => println!("unexpected: {other:?}"),
    }
    guard.release().await?;

    // The scoped form: nested locking of the same key re-enters without a round trip.
    let fence = client
        .with_lock("order:42", LockOptions::new(), async {
            let inner = client.lock("order:42").acquire().await?;
            println!("re-entered: reentrant={}", inner.is_reentrant());
            inner.release().await?;
            Ok::<_, LockError>(42)
        })
        .await??;
    println!("body returned {fence}");
    println!("metrics: {:?}", client.metrics());
    Ok(())
}
