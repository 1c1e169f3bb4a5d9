use rlock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>", ttl = "30s", max_hold = "10s")]
async fn create_order(user_id: u64) -> Result<(), LockError> {
    let _ = user_id;
    Ok(())
}

fn main() {}
