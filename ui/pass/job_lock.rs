//! A job lock: `min_hold` keeps the key taken after a body that ends sooner, so a second run
//! in another instance's scheduler finds it busy.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "job:daily-report", ttl = "10s", min_hold = "30s")]
async fn daily_report() -> Result<&'static str, LockError> {
    Ok("sent")
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        rlock_runtime::install(LockClient::in_memory());
        assert_eq!(daily_report().await.unwrap(), "sent");
        assert!(daily_report().await.unwrap_err().is_busy());
    });
}
