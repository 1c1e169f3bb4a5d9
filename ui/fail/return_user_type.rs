use rlock_runtime::distributed_lock;

struct Order;

#[distributed_lock(key = "order:<user_id>")]
async fn create_order(user_id: u64) -> Order {
    let _ = user_id;
    Order
}

fn main() {}
