use rlock_runtime::{LockError, single_flight};

// The lease the work runs under is the runtime's: a lock's lease options do not apply.
#[single_flight(key = "report:<id>", renew = false, fence = token, fair = true, wait = "1s")]
async fn build_report(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[single_flight(key = "total:<id>", permits = 3)]
async fn total(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
