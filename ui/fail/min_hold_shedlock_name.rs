use rlock_runtime::{LockError, distributed_lock};

// ShedLock's name for the time the key stays taken after the job.
#[distributed_lock(key = "job:daily-report", lockAtLeastFor = "30s")]
async fn daily_report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
