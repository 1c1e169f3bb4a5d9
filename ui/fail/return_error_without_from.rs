use rlock_runtime::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "order:<user_id>")]
async fn create_order(user_id: u64) -> Result<u64, AppError> {
    Ok(user_id)
}

fn main() {}
