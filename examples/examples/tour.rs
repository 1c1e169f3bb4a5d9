use rlock_runtime::{LockClient, LockError, distributed_lock};

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError), // how the lock's failures reach your callers
    #[error("user {0} already ordered")]
    AlreadyOrdered(u64),
}

// One order per user: the lock is "order:<user_id>", taken before the body runs and released
// after it; if another instance holds it, the call returns Err(LockError::Busy) at once.
#[distributed_lock(key = "order:<user_id>", ttl = "10s")]
async fn create_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> {
    // ... read stock, check for an earlier order, write the order, decrement stock ...
    let already_ordered = false; // e.g. `SELECT 1 FROM orders WHERE user_id = ?`
    if already_ordered {
        return Err(AppError::AlreadyOrdered(user_id));
    }
    Ok(voucher_id)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Once at start-up: the client every annotated fn uses unless given `client = …`.
    rlock_runtime::install(LockClient::connect("redis://127.0.0.1:6379/").await?);

    match create_order(42, 7).await {
        Ok(order) => println!("order {order}"),
        Err(AppError::Lock(e)) if e.is_busy() => println!("try again: {e}"), // → HTTP 409
        Err(e) => println!("failed: {e}"),                                   // → HTTP 503 …
    }
    Ok(())
}
