use rlock_runtime::{LockError, distributed_lock};

// A job lock that keeps nothing.
#[distributed_lock(key = "job:hourly", min_hold = "0s")]
async fn hourly() -> Result<(), LockError> {
    Ok(())
}

// A job lock kept past the longest lease.
#[distributed_lock(key = "job:weekly", min_hold = "168h")]
async fn weekly() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
