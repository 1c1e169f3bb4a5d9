use rlock_runtime::{LockError, distributed_lock};

// A syntax error in the body is rustc's to report, once, where it is written: the attribute
// does not parse the body.
#[distributed_lock(key = "order:<user_id>")]
async fn create_order(user_id: u64) -> Result<u64, LockError> {
    let total = user_id + ;
    Ok(total)
}

fn main() {}
