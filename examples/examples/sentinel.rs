//! Locks on a master managed by Redis Sentinel: the client asks the sentinels for the master
//! and follows it across failovers; the API is the same as on one Redis.
//!
//! ```text
//! cargo run -p rlock-examples --example sentinel -- --redis redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster
//! ```
//!
//! (`REDIS_URL` works too.) Credentials go before the sentinels, `redis+sentinel://user:pw@…`; they are
//! the master's.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::topology_example(
        "sentinel",
        "One order per user through Sentinel, following the master across failovers.",
        "redis+sentinel://host1:port1,host2:port2/service",
    )
    .await
}
