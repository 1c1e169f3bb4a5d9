use rlock_runtime::{LockError, distributed_lock};

// A job lock whose key must stay taken longer than the cap allows the hold to last.
#[distributed_lock(key = "job:daily-report", min_hold = "10m", max_hold = "5m")]
async fn daily_report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
