use rlock_runtime::distributed_lock;

#[distributed_lock(key = "order:<user_id>")]
async fn create_order(user_id: u64) -> () {
    let _ = user_id;
}

fn main() {}
