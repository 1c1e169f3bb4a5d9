//! The watchdog: a body that runs longer than the lease keeps the lock, because the lease is
//! renewed (every ttl/3) while it runs. Without renewal the lock would expire mid-body and a
//! second instance would get in.
//!
//! `cargo run -p rlock-examples --example watchdog`

use std::process::ExitCode;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError, distributed_lock};

const BODY: Duration = Duration::from_millis(1500);

/// Rebuilds an index for 1.5 s under a 300 ms lease, renewed while it runs.
#[distributed_lock(key = "reindex:<shard>", client = client, ttl = "300ms")]
async fn reindex(client: &LockClient, shard: u32) -> Result<(), LockError> {
    tokio::time::sleep(BODY).await;
    Ok(())
}

/// The same work without renewal: the lease simply ends after 300 ms.
#[distributed_lock(key = "reindex:<shard>", client = client, ttl = "300ms", renew = false, on_lost = "continue")]
async fn reindex_unrenewed(client: &LockClient, shard: u32) -> Result<(), LockError> {
    tokio::time::sleep(BODY).await;
    Ok(())
}

/// Another instance trying the same lock every 100 ms while the body runs; returns how many
/// of its attempts got the lock.
async fn intruder(other: &LockClient, shard: u32) -> u32 {
    let mut got_in = 0;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(guard) = other.lock(format!("reindex:{shard}")).acquire().await {
            got_in += 1;
            let _ = guard.release().await;
        }
    }
    got_in
}

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::run_example(
        "watchdog",
        "The watchdog: a lease renewed while the body runs, and lost() when it cannot be.",
        run,
    )
    .await
}

async fn run(client: LockClient) -> Result<(), LockError> {
    let other = client.sibling();

    println!("a {BODY:?} body under a 300ms lease, with renewal:");
    let (done, intrusions) = tokio::join!(reindex(&client, 1), intruder(&other, 1));
    done?;
    let m = client.metrics();
    println!(
        "  another instance got in {intrusions} times out of 12; lease renewed {} times",
        m.renewed
    );

    println!("the same body with renew = false:");
    let (done, intrusions) = tokio::join!(reindex_unrenewed(&client, 2), intruder(&other, 2));
    let _ = done;
    println!(
        "  another instance got in {intrusions} times out of 12: the lease expired under the body"
    );
    println!(
        "metrics: renewed={} lost={}",
        client.metrics().renewed,
        client.metrics().lost
    );
    Ok(())
}
