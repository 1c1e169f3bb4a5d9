//! Locks on Redis Cluster: the same API as on one Redis; each lock lives on its key's shard.
//!
//! ```text
//! cargo run -p rlock-examples --example cluster -- --redis redis+cluster://127.0.0.1:7000,127.0.0.1:7001
//! ```
//!
//! (`REDIS_URL` works too.) A local cluster: six `redis-server --cluster-enabled yes` and
//! `redis-cli --cluster create … --cluster-replicas 1`.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::topology_example(
        "cluster",
        "One order per user on a Redis Cluster, with the same API as on one Redis.",
        "redis+cluster://host1:port1,host2:port2",
    )
    .await
}
