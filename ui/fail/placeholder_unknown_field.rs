use rlock_runtime::{LockError, distributed_lock};

struct User {
    id: u64,
}

#[distributed_lock(key = "user:<user.name>")]
async fn load(user: User) -> Result<u64, LockError> {
    Ok(user.id)
}

fn main() {}
