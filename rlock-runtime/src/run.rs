//! Running a body under a lock: what `with_lock` and `#[distributed_lock]` share.

use std::future::Future;

use crate::client::LockClient;
use crate::error::LockError;
use crate::key::LockKey;
use crate::options::{LockOptions, OnLost};
use crate::scope;

/// Acquires `key`, runs `body(fence)` inside the reentrancy scope, releases.
///
/// An acquisition failure is returned before the body runs. With [`OnLost::Abort`] the body
/// is dropped as soon as the lease is known lost and [`LockError::Lost`] is returned; a loss
/// found only at release turns a successful output into `Lost` too. With
/// [`OnLost::Continue`] the body's output is returned either way. A backend failure at
/// release does not hide the body's output: the lease then expires on its own.
pub(crate) async fn run_locked<T, E, F, Fut>(
    client: LockClient,
    key: Result<LockKey, LockError>,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let on_lost = options.on_lost;
    let guard = client.lock_checked(key).options(options).acquire().await?;
    let body = scope::enter(guard.shared(), body(guard.fence().get()));
    let output = match on_lost {
        OnLost::Abort => {
            tokio::select! {
                biased;
                output = body => output,
                () = guard.lost() => {
                    let key = guard.key().as_str().to_owned();
                    // Dropping the guard still tries the compare-and-delete, which removes
                    // nothing that is not ours.
                    drop(guard);
                    return Err(LockError::Lost { key }.into());
                }
            }
        }
        OnLost::Continue => body.await,
    };
    match guard.release().await {
        Err(lost @ LockError::Lost { .. }) if on_lost == OnLost::Abort && output.is_ok() => {
            Err(lost.into())
        }
        _ => output,
    }
}
