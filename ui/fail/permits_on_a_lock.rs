use rlock_runtime::{LockError, distributed_lock};

// A lock has one holder: a count belongs to #[semaphore].
#[distributed_lock(key = "export:<tenant>", permits = 5)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

fn main() {}
