//! A free async fn with the default client, every option, and a custom error type.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Parse(std::num::ParseIntError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(err: std::num::ParseIntError) -> Self {
        AppError::Parse(err)
    }
}

/// Docs stay on the function.
#[distributed_lock(key = "order:<user_id>", ttl = "10s")]
pub async fn create_order(user_id: u64, voucher_id: &str) -> Result<u64, AppError> {
    let voucher: u64 = voucher_id.parse()?;
    Ok(user_id + voucher)
}

#[distributed_lock(
    key = "stock:<sku>:<warehouse>",
    ttl = "1m30s",
    wait = "2s",
    renew = true,
    max_hold = "10m",
    on_lost = "continue",
    fence = token,
    min_replicas = 1,
)]
async fn reserve(sku: String, warehouse: u32) -> Result<u64, LockError> {
    if sku.is_empty() {
        return Err(LockError::NotConfigured);
    }
    Ok(token + u64::from(warehouse))
}

#[distributed_lock(key = "nightly-report", renew = false, ttl = "500ms")]
async fn constant_key() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        rlock_runtime::install(LockClient::in_memory());
        assert_eq!(create_order(1, "41").await.unwrap(), 42);
        assert!(matches!(
            create_order(1, "x").await,
            Err(AppError::Parse(e)) if e.to_string().contains("invalid digit")
        ));
        assert!(reserve("apple".into(), 3).await.unwrap() > 3);
        constant_key().await.unwrap();
        let AppError::Lock(e) = AppError::from(LockError::NotConfigured) else {
            unreachable!("a lock error stays one")
        };
        assert!(matches!(e, LockError::NotConfigured));
    });
}
