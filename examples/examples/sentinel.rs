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
    let Some(url) = rlock_examples::url_argument() else {
        eprintln!(
            "usage: sentinel --redis redis+sentinel://host1:port1,host2:port2/service (or set REDIS_URL)"
        );
        return ExitCode::from(2);
    };
    match rlock_examples::one_order_per_user(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sentinel: {e}");
            ExitCode::FAILURE
        }
    }
}
