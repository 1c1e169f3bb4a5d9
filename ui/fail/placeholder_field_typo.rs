// rustc reports the unknown field on the key with the closest name; on stable Rust it cannot
// point inside the literal, so its suggestion replaces the whole key (see the attribute's docs).
use rlock_runtime::{LockError, distributed_lock};

struct Request {
    user_id: u64,
    voucher_id: u64,
}

#[distributed_lock(key = "order:<req.usr_id>")]
async fn create_order(req: Request) -> Result<u64, LockError> {
    Ok(req.user_id + req.voucher_id)
}

fn main() {}
