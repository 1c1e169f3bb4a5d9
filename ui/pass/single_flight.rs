//! `#[single_flight]`: the body runs once per key while its result is kept, every caller
//! gets that result, the future is `Send` when the body is, and a custom error type takes
//! the lock's errors.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use rlock_runtime::{LockClient, LockError, single_flight};

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

/// Docs stay on the function.
#[single_flight(key = "report:<id>", ttl = "30s", wait = "5s")]
pub async fn build_report(id: u64, title: &str) -> Result<(u64, String), AppError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    Ok((id, title.to_owned()))
}

/// With a client of its own, and the default ttl and wait.
#[single_flight(key = "total:<shop>", client = client)]
async fn total(client: &LockClient, shop: &str) -> Result<Vec<u64>, LockError> {
    Ok(vec![shop.len() as u64])
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
        rlock_runtime::install(LockClient::in_memory());
        let first = tokio::spawn(assert_send(build_report(7, "sales")));
        let first = first.await.unwrap().unwrap();
        // Within the ttl, the stored result: the body does not run again.
        let again = build_report(7, "ignored").await.unwrap();
        assert_eq!((first, RUNS.load(Ordering::SeqCst)), (again, 1));
        let client = LockClient::in_memory();
        assert_eq!(total(&client, "acme").await.unwrap(), [4]);
        let AppError::Lock(e) = AppError::from(LockError::NotConfigured);
        assert!(matches!(e, LockError::NotConfigured));
    });
}
