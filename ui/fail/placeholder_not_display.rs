use rlock_runtime::{LockError, distributed_lock};

struct UserId(u64);

#[distributed_lock(key = "order:<user_id>")]
async fn create_order(user_id: UserId) -> Result<u64, LockError> {
    Ok(user_id.0)
}

fn main() {}
