use rlock_runtime::{LockError, distributed_lock};

// Redisson's and lock4j's names for the lease and the wait, all reported at once.
#[distributed_lock(key = "order:<user_id>", lease_time = "10s", wait_time = "2s")]
async fn create_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

#[distributed_lock(key = "order:<user_id>", expire = "10s", acquire_timeout = "2s")]
async fn cancel_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

#[distributed_lock(key = "order:<user_id>", timeout = "2s")]
async fn pay_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
