use rlock_runtime::distributed_lock;

#[distributed_lock(key = "order")]
struct Order;

fn main() {}
