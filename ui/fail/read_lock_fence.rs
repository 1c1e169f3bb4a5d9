use rlock_runtime::{LockError, read_lock, upgradeable_read_lock};

// Readers hold together: a read lease has no fencing token.
#[read_lock(key = "config:<id>", fence = token)]
async fn read(id: u64) -> Result<u64, LockError> {
    Ok(id + token)
}

// Nor an upgradeable one: its upgrade is fenced.
#[upgradeable_read_lock(key = "config:<id>", fence = token)]
async fn read_to_upgrade(id: u64) -> Result<u64, LockError> {
    Ok(id + token)
}

fn main() {}
