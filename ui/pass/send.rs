//! The future of an annotated fn is `Send` when its body is, so it can be spawned.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>", client = client, ttl = "5s")]
async fn create_order(client: LockClient, user_id: u64) -> Result<u64, LockError> {
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    Ok(user_id)
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = LockClient::in_memory();
        let task = tokio::spawn(assert_send(create_order(client, 9)));
        assert_eq!(task.await.unwrap().unwrap(), 9);
    });
}
