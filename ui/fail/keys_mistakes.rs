use rlock_runtime::{LockError, distributed_lock, semaphore};

// Not a list.
#[distributed_lock(keys = "account:<from>")]
async fn one(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

// The same template twice.
#[distributed_lock(keys = ["account:<from>", "account:<from>"])]
async fn twice(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

// Both `key` and `keys`.
#[distributed_lock(key = "account:<from>", keys = ["account:<to>"])]
async fn both(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// One fence cannot stand for several locks.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], fence = token)]
async fn fenced(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// A semaphore has one key.
#[semaphore(keys = ["export:<tenant>"], permits = 2)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

// A placeholder that names no parameter, in the second template.
#[distributed_lock(keys = ["account:<from>", "account:<too>"])]
async fn typo(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
