use rlock_runtime::{LockError, semaphore};

// No permits at all.
#[semaphore(key = "export:<tenant>", permits = 0)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

// A count in quotes.
#[semaphore(key = "render:<job>", permits = "4")]
async fn render(job: u64) -> Result<u64, LockError> {
    Ok(job)
}

// A count from a constant: it must be checked at compile time.
const MAX_UPLOADS: u32 = 3;
#[semaphore(key = "upload:<user>", permits = MAX_UPLOADS)]
async fn upload(user: u64) -> Result<u64, LockError> {
    Ok(user)
}

fn main() {}
