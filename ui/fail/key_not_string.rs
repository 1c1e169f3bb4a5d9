use rlock_runtime::{LockError, distributed_lock};

const KEY: &str = "order";

#[distributed_lock(key = KEY)]
async fn create_order(user_id: u64) -> Result<(), LockError> {
    let _ = user_id;
    Ok(())
}

fn main() {}
