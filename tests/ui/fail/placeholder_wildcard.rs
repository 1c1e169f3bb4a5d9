use rlock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "order:<_>")]
async fn create_order(_: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
