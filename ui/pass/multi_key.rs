//! `keys = […]`: several locks taken together, every template checked like `key`'s, and a
//! nested call locking one of them re-enters it.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "1s")]
async fn transfer(from: u64, to: u64, amount: u64) -> Result<u64, LockError> {
    // `account:<from>` is held here: the nested call re-enters it.
    audit(from).await?;
    Ok(amount)
}

#[distributed_lock(key = "account:<id>")]
async fn audit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        rlock_runtime::install(LockClient::in_memory());
        assert_eq!(transfer(1, 2, 40).await.unwrap(), 40);
        // The other way round, once the first is done.
        assert_eq!(transfer(2, 1, 2).await.unwrap(), 2);
    });
}
