//! `#[read_lock]`, `#[upgradeable_read_lock]` and `#[write_lock]`: readers together, a
//! writer alone, a write holder's nested read re-entering as a downgrade, a read holder's
//! nested write refused at once, an upgradeable read holder's nested write its upgrade.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use rlock_runtime::{LockClient, LockError, read_lock, upgradeable_read_lock, write_lock};

#[read_lock(key = "config:<id>", wait = "1s")]
async fn read(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[write_lock(key = "config:<id>", fence = token)]
async fn write(id: u64) -> Result<u64, LockError> {
    // The writer's task reads beside its own write lock.
    let read_back = read(id).await?;
    assert!(token > 0);
    Ok(read_back)
}

#[read_lock(key = "config:<id>")]
async fn read_then_write(id: u64) -> Result<u64, LockError> {
    // This task reads: the write lock would wait for it forever.
    write(id).await
}

#[upgradeable_read_lock(key = "config:<id>", wait = "1s")]
async fn read_then_upgrade(id: u64) -> Result<u64, LockError> {
    // Its read re-enters; its write is the upgrade, fenced, and it reads on after it.
    let read_back = read(id).await?;
    let written = write(id).await?;
    Ok(read_back + written)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        rlock_runtime::install(LockClient::in_memory());
        assert_eq!(read(7).await.unwrap(), 7);
        assert_eq!(write(7).await.unwrap(), 7);
        let err = read_then_write(7).await.unwrap_err();
        assert!(matches!(err, LockError::WouldDeadlock { .. }), "{err:?}");
        assert_eq!(read_then_upgrade(7).await.unwrap(), 14);
    });
}
