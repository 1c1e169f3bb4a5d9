use rlock_runtime::{LockError, single_flight};

// The result is shared with every caller as JSON: it must serialize.
struct Report {
    id: u64,
}

#[single_flight(key = "report:<id>", ttl = "30s")]
async fn build_report(id: u64) -> Result<Report, LockError> {
    Ok(Report { id })
}

fn main() {}
