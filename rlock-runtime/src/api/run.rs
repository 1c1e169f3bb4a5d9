//! Running a body under a lock: what `with_lock` and `#[distributed_lock]` share.

use std::future::Future;

use crate::api::client::LockClient;
use crate::api::options::{LockOptions, OnLost};
use crate::api::request::{Keys, LockRequest};
use crate::backend::Kind;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};
use crate::lease::scope;
use crate::util::fence::Fence;

impl LockClient {
    /// Runs `body` while holding `key`, then releases it.
    ///
    /// Inside `body`, locking the same key with this client re-enters without a Redis
    /// command. Returns the body's output, or the error that prevented acquiring. When the
    /// lease turned out lost by the time of release, returns [`LockError::Lost`] (unless
    /// `options.on_lost` is [`OnLost::Continue`](crate::OnLost::Continue)).
    ///
    /// ```
    /// use rlock_runtime::{LockClient, LockOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let total = client
    ///     .with_lock("stock:7", LockOptions::new(), async { 40 + 2 })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<T>(
        &self,
        key: impl IntoLockKey,
        options: LockOptions,
        body: impl Future<Output = T>,
    ) -> Result<T, LockError> {
        let outcome = Outcome::<Result<T, LockError>>::RESULT;
        run_locked(
            Ok(self.clone()),
            Taking::Lock,
            key.into_lock_key(),
            options,
            outcome,
            |_| async { Ok(body.await) },
        )
        .await
    }
}

/// How a locked body's output reports a lock failure and tells success, as plain function
/// pointers: the caller picks them for its output type, so no trait bound rides along into
/// the generic code (where a missing impl would be reported again at every use).
#[derive(Debug)]
pub struct Outcome<R> {
    /// The output that reports `error`.
    pub from_lock_error: fn(LockError) -> R,
    /// Whether the body succeeded.
    pub succeeded: fn(&R) -> bool,
}

impl<R> Clone for Outcome<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Outcome<R> {}

impl<T, E: From<LockError>> Outcome<Result<T, E>> {
    /// The outcome of `Result<T, E>`: `Err(E::from(error))`, and `is_ok`.
    pub const RESULT: Self = Self {
        from_lock_error: |error| Err(E::from(error)),
        succeeded: Result::is_ok,
    };
}

impl LockRequest<'_> {
    /// Runs `body` while holding what the request takes (a lock, a permit), then releases
    /// it: the closure form of [`acquire`](Self::acquire), as `with_lock` and the attributes
    /// run their bodies. Inside `body`, the same request by this client (the same kind and
    /// key) re-enters what is held instead of taking it again: a nested call does not take a
    /// second permit of a semaphore. A lease found lost aborts the body as the request's
    /// `on_lost` says ([`LockClient::with_lock`]).
    ///
    /// ```
    /// # use rlock_runtime::{LockClient, LockError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
    /// let client = LockClient::in_memory();
    /// let exports = client.semaphore("export:acme", 1);
    /// let nested = exports
    ///     .run(async {
    ///         // Re-enters the one permit instead of waiting for a second.
    ///         client.semaphore("export:acme", 1).run(async { "done" }).await
    ///     })
    ///     .await??;
    /// assert_eq!(nested, "done");
    /// # Ok(()) }
    /// ```
    pub async fn run<T>(self, body: impl Future<Output = T>) -> Result<T, LockError> {
        let outcome = Outcome::<Result<T, LockError>>::RESULT;
        run_request(self, outcome, |_| async { Ok(body.await) }).await
    }
}

/// What an annotated function takes: the attribute's kind of lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taking {
    /// `#[distributed_lock]`.
    Lock,
    /// `#[semaphore(permits = …, take = …)]`: the count, and how many permits one call takes.
    Permit(u32, u32),
    /// `#[read_lock]`.
    Read,
    /// `#[upgradeable_read_lock]`.
    UpgradeableRead,
    /// `#[write_lock]`.
    Write,
}

/// Acquires `key` as `taking` says, runs `body(fence)` inside the reentrancy scope, releases.
///
/// A missing client or an acquisition failure is returned before the body runs. With [`OnLost::Abort`] the body
/// is dropped as soon as the lease is known lost and [`LockError::Lost`] is returned; a loss
/// found only at release turns a successful output into `Lost` too. With
/// [`OnLost::Continue`] the body's output is returned either way. A backend failure at
/// release does not hide the body's output: the lease then expires on its own.
pub async fn run_locked<R, F, Fut>(
    client: Result<LockClient, LockError>,
    taking: Taking,
    key: Result<LockKey, LockError>,
    options: LockOptions,
    outcome: Outcome<R>,
    body: F,
) -> R
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    run_on_client(
        client,
        move |client| match taking {
            Taking::Lock => client.lock_checked(key),
            Taking::Permit(permits, take) => client.semaphore_checked(key, permits).permits(take),
            Taking::Read => LockRequest::new(client, Kind::Read, key, LockOptions::default()),
            Taking::UpgradeableRead => {
                LockRequest::new(client, Kind::UpgradeableRead, key, LockOptions::default())
            }
            Taking::Write => LockRequest::new(client, Kind::Write, key, LockOptions::default()),
        },
        options,
        outcome,
        body,
    )
    .await
}

/// Takes all of `keys` (`#[distributed_lock(keys = […])]`, see
/// [`LockClient::lock_all`]), runs `body`, releases, as [`run_locked`] does for one key.
pub async fn run_locked_all<R, F, Fut>(
    client: Result<LockClient, LockError>,
    keys: Vec<Result<LockKey, LockError>>,
    options: LockOptions,
    outcome: Outcome<R>,
    body: F,
) -> R
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    let keys = keys
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map(Keys::All);
    run_on_client(
        client,
        move |client| LockRequest::of_keys(client, Kind::Lock, keys, LockOptions::default()),
        options,
        outcome,
        body,
    )
    .await
}

/// Runs `body` under what `request` asks of the client, once there is one (see
/// [`run_locked`]).
async fn run_on_client<R, F, Fut>(
    client: Result<LockClient, LockError>,
    request: impl for<'c> FnOnce(&'c LockClient) -> LockRequest<'c>,
    options: LockOptions,
    outcome: Outcome<R>,
    body: F,
) -> R
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    let client = match client {
        Ok(client) => client,
        Err(e) => return (outcome.from_lock_error)(e),
    };
    run_request(request(&client).options(options), outcome, body).await
}

/// Acquires what `request` asks for, runs `body(fence)` inside the reentrancy scope,
/// releases (see [`run_locked`]).
async fn run_request<R, F, Fut>(request: LockRequest<'_>, outcome: Outcome<R>, body: F) -> R
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    let on_lost = request.on_lost();
    let guard = match request.acquire().await {
        Ok(guard) => guard,
        Err(e) => return (outcome.from_lock_error)(e),
    };
    // The body's fence is 0 unless one was asked for (the macro asks when it binds one).
    let fence = guard.fence().map_or(0, Fence::get);
    // Boxed, so that a body which locks again does not nest its state inline in ours.
    let body = Box::pin(scope::enter(guard.holds().cloned(), body(fence)));
    let output = match on_lost {
        OnLost::Abort => {
            // The loss is looked at first: a body that could go on (its timer due, say) after
            // this process was stopped past the lease must not take another step unprotected.
            tokio::select! {
                biased;
                () = guard.lost() => {
                    let key = guard.key().as_str().to_owned();
                    // Dropping the guard still tries the compare-and-delete, which removes
                    // nothing that is not ours.
                    drop(guard);
                    return (outcome.from_lock_error)(LockError::Lost { key });
                }
                output = body => output,
            }
        }
        OnLost::Continue => body.await,
    };
    match guard.release().await {
        Err(lost @ LockError::Lost { .. })
            if on_lost == OnLost::Abort && (outcome.succeeded)(&output) =>
        {
            (outcome.from_lock_error)(lost)
        }
        _ => output,
    }
}

#[cfg(test)]
mod tests {
    use crate::{LockClient, LockOptions, OnLost};

    /// The body breaks its own lock (the hold is marked lost at once): the client's default
    /// decides whether it runs on, and a lock's own `on_lost` overrides the default.
    #[tokio::test]
    async fn the_clients_default_on_lost_applies_unless_the_lock_says() {
        let client = LockClient::builder()
            .default_on_lost(OnLost::Continue)
            .in_memory();
        let body = |client: LockClient| async move {
            client.force_unlock("k").await.unwrap();
            tokio::task::yield_now().await;
            7
        };
        let ran_on = client
            .with_lock("k", LockOptions::new(), body(client.clone()))
            .await;
        assert_eq!(
            ran_on.unwrap(),
            7,
            "the default, continue, let the body finish"
        );
        let aborted = client
            .with_lock(
                "k",
                LockOptions::new().on_lost(OnLost::Abort),
                body(client.clone()),
            )
            .await;
        assert!(aborted.unwrap_err().is_lost());
    }
}
