use rlock_runtime::{LockError, single_flight};

// The key template is checked as a lock's: a placeholder names a parameter.
#[single_flight(key = "report:<idd>", ttl = "30s")]
async fn build_report(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
