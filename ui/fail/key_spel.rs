use rlock_runtime::{LockError, distributed_lock};

struct Req {
    user_id: u64,
}

// lock4j's and Spring's habits: `#param` and `${…}` are literal text here.
#[distributed_lock(key = "#req.user_id")]
async fn pay(req: Req) -> Result<u64, LockError> {
    Ok(req.user_id)
}

#[distributed_lock(key = "stock:${sku}:#{warehouse}")]
async fn reserve(sku: u64, warehouse: u64) -> Result<u64, LockError> {
    Ok(sku + warehouse)
}

fn main() {}
