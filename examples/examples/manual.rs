//! The manual API: connect, lock, re-enter, see the fence, release.
//!
//! `cargo run -p rlock-examples --example manual [-- --redis URL]`

use std::process::ExitCode;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError, LockOptions};

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::run_example(
        "manual",
        "The manual API: connect, lock, re-enter, see the fence, release.",
        run,
    )
    .await
}

async fn run(client: LockClient) -> Result<(), LockError> {
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
