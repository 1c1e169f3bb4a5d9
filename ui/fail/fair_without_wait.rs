use rlock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "ticket:<event>", fair = true)]
async fn book(event: u64) -> Result<(), LockError> {
    let _ = event;
    Ok(())
}

fn main() {}
