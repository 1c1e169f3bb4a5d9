use rlock_runtime::{LockError, distributed_lock};

struct App {
    locks: String,
}

#[distributed_lock(key = "order:<user_id>", client = app.locks)]
async fn create_order(app: &App, user_id: u64) -> Result<(), LockError> {
    let _ = (app, user_id);
    Ok(())
}

fn main() {}
