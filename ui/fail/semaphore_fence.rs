use rlock_runtime::{LockError, semaphore};

// Several holders at once have no order to fence.
#[semaphore(key = "export:<tenant>", permits = 5, fence = token)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant + token)
}

fn main() {}
