//! Without `client = …` and with no client installed, an annotated function fails with
//! `NotConfigured` before its body runs. (Its own test binary: installing is process-wide.)

use rlock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<id>")]
async fn job(id: u32) -> Result<u32, LockError> {
    panic!("the body ran without a lock for job {id}");
}

#[tokio::test]
async fn no_installed_client_is_a_clear_error() {
    let err = job(1).await.expect_err("no client is installed");
    assert!(matches!(err, LockError::NotConfigured), "{err:?}");
    assert!(err.to_string().contains("rlock_runtime::install"), "{err}");
}
