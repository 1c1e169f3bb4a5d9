//! `#[semaphore]`: at most `permits` bodies at once, a nested call of the same semaphore
//! re-enters the permit held, and the options of `#[distributed_lock]` apply.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, semaphore};

#[semaphore(key = "export:<tenant>", permits = 1, wait = "0s", ttl = "10s")]
async fn export(tenant: &str) -> Result<usize, LockError> {
    // The one permit is held here: taking it again re-enters it.
    part(tenant).await
}

#[semaphore(key = "export:<tenant>", permits = 1)]
async fn part(tenant: &str) -> Result<usize, LockError> {
    Ok(tenant.len())
}

#[semaphore(key = "report", permits = 2, min_hold = "1m")]
async fn report() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        rlock_runtime::install(LockClient::in_memory());
        assert_eq!(export("acme").await.unwrap(), 4);
        // Two permits, each kept for a minute after its body.
        report().await.unwrap();
        report().await.unwrap();
        assert!(report().await.unwrap_err().is_busy());
    });
}
