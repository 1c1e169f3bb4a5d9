use rlock_runtime::{LockError, distributed_lock};

// `format!`'s habit: this would be one lock for every user.
#[distributed_lock(key = "order:{user_id}")]
async fn create_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
