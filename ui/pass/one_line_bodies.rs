//! Bodies written on one line, literal braces and hash tags in keys: no warning may come
//! from the generated code (every pass case denies warnings).

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>", client = client)]
async fn one_line(client: &LockClient, user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

#[distributed_lock(key = "{orders}:{{user_id}}:<user_id>", client = client)]
async fn braces(client: &LockClient, user_id: u64) -> Result<u64, LockError> {
    let id = user_id;
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::in_memory();
    assert_eq!(one_line(&client, 7).await.unwrap(), 7);
    assert_eq!(braces(&client, 8).await.unwrap(), 8);
}
