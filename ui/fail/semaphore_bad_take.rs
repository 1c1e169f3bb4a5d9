use rlock_runtime::{LockError, distributed_lock, semaphore};

// More permits per call than the semaphore has.
#[semaphore(key = "export:<tenant>", permits = 2, take = 3)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

// None at all.
#[semaphore(key = "render:<job>", permits = 4, take = 0)]
async fn render(job: u64) -> Result<u64, LockError> {
    Ok(job)
}

// `take` on a lock.
#[distributed_lock(key = "upload:<user>", take = 2)]
async fn upload(user: u64) -> Result<u64, LockError> {
    Ok(user)
}

fn main() {}
