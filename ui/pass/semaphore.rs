//! `#[semaphore]`: at most `permits` bodies at once, `take` permits per call, a nested call of the same semaphore
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

// Each call takes 2 of the 3 permits: one call at a time.
#[semaphore(key = "heavy:<tenant>", permits = 3, take = 2)]
async fn heavy(tenant: &str) -> Result<usize, LockError> {
    let client = rlock_runtime::installed().expect("installed by main");
    let info = client.inspect_semaphore(format!("heavy:{tenant}")).await?;
    Ok(info.in_use as usize)
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
        assert_eq!(heavy("acme").await.unwrap(), 2);
        // Two permits, each kept for a minute after its body.
        report().await.unwrap();
        report().await.unwrap();
        assert!(report().await.unwrap_err().is_busy());
    });
}
