//! Locks on a master managed by Redis Sentinel: the client asks the sentinels for the master
//! and follows it across failovers; the API is the same as on one Redis. Replication is
//! asynchronous, so a grant can be lost with a master that fails right after it: a lock that
//! must survive that waits for a replica to confirm its grant (`min_replicas`).
//!
//! ```text
//! cargo run -p rlock-examples --example sentinel -- --redis redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster
//! ```
//!
//! (`REDIS_URL` works too.) Credentials go before the sentinels, `redis+sentinel://user:pw@…`;
//! they are the master's.

use std::process::ExitCode;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError};

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = rlock_examples::deployment_url(
        "sentinel",
        "One order per user through Sentinel, with grants confirmed by a replica.",
        "redis+sentinel://host1:port1,host2:port2/service",
    ) else {
        return ExitCode::from(2);
    };
    rlock_examples::exit_code("sentinel", one_order_per_user(&url).await)
}

async fn one_order_per_user(url: &str) -> Result<(), LockError> {
    let instance_a = LockClient::connect(url).await?;
    let instance_b = LockClient::connect(url).await?;

    // Granted only once a replica has it too (`NotReplicated` otherwise, and nothing held);
    // the fencing token lets the store refuse a late write of a holder that lost the lock.
    let order = instance_a
        .lock("order:42")
        .ttl(Duration::from_secs(10))
        .min_replicas(1)
        .fenced()
        .acquire()
        .await?;
    let fence = order.fence().map_or(0, |f| f.get());
    println!("instance A holds order:42, confirmed by a replica (fence {fence})");
    match instance_b.lock("order:42").acquire().await {
        Err(e) if e.is_busy() => println!("instance B is refused: {e}"),
        Ok(_) => println!("instance B got it too: the lock is broken"),
        Err(e) => return Err(e),
    }
    order.release().await?;
    let again = instance_b.lock("order:42").acquire().await?;
    println!("after A released, instance B holds order:42");
    again.release().await
}
