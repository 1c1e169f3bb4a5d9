use rlock_runtime::{LockError, semaphore};

#[semaphore(key = "export:<tenant>", permit = 5)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

fn main() {}
