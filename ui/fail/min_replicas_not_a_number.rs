use rlock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "payout:<id>", min_replicas = "1")]
async fn pay_out(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "refund:<id>", min_replicas = 1000)]
async fn refund(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
