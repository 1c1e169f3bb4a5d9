use rlock_runtime::distributed_lock;

#[distributed_lock(key = "order:<name>")]
async fn create_order(name: &str) -> &str {
    name
}

fn main() {}
