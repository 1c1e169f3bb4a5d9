//! Locks on Redis Cluster: the same API as on one Redis. Each lock lives on its key's shard,
//! and a release hands the lock to a waiting instance through that shard alone.
//!
//! ```text
//! cargo run -p rlock-examples --example cluster -- --redis redis+cluster://127.0.0.1:7000,127.0.0.1:7001
//! ```
//!
//! (`REDIS_URL` works too.) A local cluster: six `redis-server --cluster-enabled yes` and
//! `redis-cli --cluster create … --cluster-replicas 1`.

use std::process::ExitCode;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError};

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = rlock_examples::deployment_url(
        "cluster",
        "One order per user on a Redis Cluster, with the same API as on one Redis.",
        "redis+cluster://host1:port1,host2:port2",
    ) else {
        return ExitCode::from(2);
    };
    rlock_examples::exit_code("cluster", one_order_per_user(&url).await)
}

async fn one_order_per_user(url: &str) -> Result<(), LockError> {
    // Two instances of a service: a client each, given any of the cluster's nodes.
    let instance_a = LockClient::connect(url).await?;
    let instance_b = LockClient::connect(url).await?;

    // Keys spread over the shards; a hash tag (`{user:42}:…`) would keep related ones
    // together, in one slot.
    let order = instance_a
        .lock("order:42")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await?;
    println!("instance A holds order:42");
    match instance_b.lock("order:42").acquire().await {
        Err(e) if e.is_busy() => println!("instance B, not waiting, is refused: {e}"),
        Ok(_) => println!("instance B got it too: the lock is broken"),
        Err(e) => return Err(e),
    }

    // B waits for it: A's release hands it over, announced on the key's shard only.
    let waiting = tokio::spawn(async move {
        instance_b
            .lock("order:42")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    order.release().await?;
    match waiting.await {
        Ok(handed) => {
            let handed = handed?;
            println!("after A released, instance B holds order:42");
            handed.release().await
        }
        Err(e) => {
            println!("instance B's task failed: {e}");
            Ok(())
        }
    }
}
