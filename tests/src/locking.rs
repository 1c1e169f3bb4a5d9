//! Small steps that many tests take with a lock client.

use std::time::Duration;

use rlock_runtime::LockClient;

use crate::RedisServer;

/// A client of `server` whose commands time out after `timeout`.
///
/// # Panics
///
/// When the server cannot be reached.
pub async fn client_for(server: &RedisServer, timeout: Duration) -> LockClient {
    LockClient::builder()
        .url(server.url())
        .command_timeout(timeout)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

/// Takes `key` (waiting up to `wait`) and releases it again: proof that it is free, or frees
/// within `wait`.
///
/// # Panics
///
/// When the lock cannot be taken within `wait` or its release fails.
pub async fn lock_and_release(client: &LockClient, key: &str, wait: Duration) {
    let guard = client
        .lock(key)
        .wait(wait)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("`{key}` not free within {wait:?}: {e}"));
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("releasing `{key}`: {e}"));
}

/// Spawns a task that takes `key` (waiting up to `wait`, with a 10 s lease), holds it for
/// `hold`, and releases it: one contender of a queue.
pub fn spawn_contender(
    client: LockClient,
    key: &'static str,
    wait: Duration,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<(), rlock_runtime::LockError>> {
    tokio::spawn(async move {
        let guard = client
            .lock(key)
            .ttl(Duration::from_secs(10))
            .wait(wait)
            .acquire()
            .await?;
        tokio::time::sleep(hold).await;
        guard.release().await
    })
}
