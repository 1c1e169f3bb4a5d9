use rlock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<customer>")]
async fn create_order(user_id: u64, voucher_id: u64) -> Result<(), LockError> {
    let _ = (user_id, voucher_id);
    Ok(())
}

fn main() {}
