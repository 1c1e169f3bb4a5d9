use rlock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<_>")]
async fn create_order(_: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
