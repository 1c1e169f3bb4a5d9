//! Reentrancy: an annotated function calling another one with the same key re-enters the
//! lock it already holds instead of deadlocking on itself.
//!
//! `cargo run -p rlock-examples --example reentrancy [-- --redis URL]`

use rlock_runtime::{LockClient, LockError, distributed_lock};
use std::process::ExitCode;

/// Pays an order: takes `order:<order_id>`, then refunds the coupon, which takes the same
/// lock again from inside the body.
#[distributed_lock(key = "order:<order_id>", client = client, ttl = "10s")]
async fn pay(client: &LockClient, order_id: u64) -> Result<(), LockError> {
    println!("  pay({order_id}): holding `order:{order_id}`");
    release_coupon(client, order_id).await?;
    println!("  pay({order_id}): done");
    Ok(())
}

/// Also callable on its own, so it locks the order too.
#[distributed_lock(key = "order:<order_id>", client = client, ttl = "10s")]
async fn release_coupon(client: &LockClient, order_id: u64) -> Result<(), LockError> {
    let inner = client.lock(format!("order:{order_id}")).acquire().await?;
    println!(
        "  release_coupon({order_id}): re-entered (a third, manual lock is reentrant: {})",
        inner.is_reentrant()
    );
    inner.release().await?;

    // Another instance of the service (same Redis, its own identity) is still excluded.
    match client
        .sibling()
        .lock(format!("order:{order_id}"))
        .acquire()
        .await
    {
        Err(e) if e.is_busy() => println!("  another instance: busy, as it should be"),
        other => println!("  another instance: unexpected {other:?}"),
    }

    // A task spawned here is not part of this call chain, so it does not inherit the hold.
    let spawned = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock(format!("order:{order_id}"))
                .acquire()
                .await
                .map(drop)
        }
    });
    match spawned.await {
        Ok(Err(e)) if e.is_busy() => println!("  a spawned task: busy (holds are per task chain)"),
        other => println!("  a spawned task: unexpected {other:?}"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::run_example(
        "reentrancy",
        "Reentrancy: a locked fn calling another that takes the same lock.",
        run,
    )
    .await
}

async fn run(client: LockClient) -> Result<(), LockError> {
    pay(&client, 42).await?;

    let m = client.metrics();
    println!(
        "three nested locks of one key cost {} acquisition and {} release on the backend",
        m.acquired, m.released
    );
    // Only the outermost release deleted the key: it is free again.
    let again = client.sibling().lock("order:42").fenced().acquire().await?;
    println!(
        "after pay(): `order:42` is free again (fence {})",
        again.fence().map_or(0, |f| f.get())
    );
    again.release().await
}
