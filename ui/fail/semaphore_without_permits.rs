use rlock_runtime::{LockError, semaphore};

// A semaphore must say how many may hold it at once.
#[semaphore(key = "export:<tenant>", wait = "10s")]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

fn main() {}
