//! Running a body under a lock: what `with_lock` and `#[distributed_lock]` share.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::options::{LockOptions, OnLost};
use crate::api::request::{Keys, LockRequest};
use crate::backend::Kind;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};
use crate::lease::scope::{self, Chain};
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
        Run::new(Locked::acquire(self), outcome, |_| async { Ok(body.await) }).await
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
pub fn run_locked<R, F, Fut>(
    client: Result<LockClient, LockError>,
    taking: Taking,
    key: Result<LockKey, LockError>,
    options: LockOptions,
    outcome: Outcome<R>,
    body: F,
) -> impl Future<Output = R>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    Run::new(Locked::take(client, taking, key, options), outcome, body)
}

/// Takes all of `keys` (`#[distributed_lock(keys = […])]`, see
/// [`LockClient::lock_all`]), runs `body`, releases, as [`run_locked`] does for one key.
pub fn run_locked_all<R, F, Fut>(
    client: Result<LockClient, LockError>,
    keys: Vec<Result<LockKey, LockError>>,
    options: LockOptions,
    outcome: Outcome<R>,
    body: F,
) -> impl Future<Output = R>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    Run::new(Locked::take_all(client, keys, options), outcome, body)
}

/// An acquisition on its way, boxed: one type whatever took it, and a small future for the
/// run that awaits it, however large the acquisition's state. Boxed here, by the functions
/// below that are not generic, so that the acquisition's code is compiled once, in this
/// crate: awaited only from generic code, it would be compiled again in every crate that
/// uses the attributes.
type Taken<'a> = Pin<Box<dyn Future<Output = Result<Locked, LockError>> + Send + 'a>>;

/// What a body runs under: the guard, and what a loss does to the body.
///
/// What does not depend on the body lives here and in [`Core`], in functions that are not
/// generic, so that each annotated function instantiates only [`Run`]'s `poll`.
struct Locked {
    guard: LockGuard,
    on_lost: OnLost,
}

impl Locked {
    /// Takes `key` as `taking` says, on `client` once there is one.
    fn take(
        client: Result<LockClient, LockError>,
        taking: Taking,
        key: Result<LockKey, LockError>,
        options: LockOptions,
    ) -> Taken<'static> {
        Box::pin(Self::take_owned(client, taking, key, options))
    }

    async fn take_owned(
        client: Result<LockClient, LockError>,
        taking: Taking,
        key: Result<LockKey, LockError>,
        options: LockOptions,
    ) -> Result<Self, LockError> {
        let client = client?;
        let request = match taking {
            Taking::Lock => client.lock_checked(key),
            Taking::Permit(permits, take) => client.semaphore_checked(key, permits).permits(take),
            Taking::Read => LockRequest::new(&client, Kind::Read, key, LockOptions::default()),
            Taking::UpgradeableRead => {
                LockRequest::new(&client, Kind::UpgradeableRead, key, LockOptions::default())
            }
            Taking::Write => LockRequest::new(&client, Kind::Write, key, LockOptions::default()),
        };
        Self::acquired(request.options(options)).await
    }

    /// Takes all of `keys` on `client` once there is one.
    fn take_all(
        client: Result<LockClient, LockError>,
        keys: Vec<Result<LockKey, LockError>>,
        options: LockOptions,
    ) -> Taken<'static> {
        Box::pin(Self::take_all_owned(client, keys, options))
    }

    async fn take_all_owned(
        client: Result<LockClient, LockError>,
        keys: Vec<Result<LockKey, LockError>>,
        options: LockOptions,
    ) -> Result<Self, LockError> {
        let client = client?;
        let keys = keys
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map(Keys::All);
        let request = LockRequest::of_keys(&client, Kind::Lock, keys, LockOptions::default());
        Self::acquired(request.options(options)).await
    }

    /// Acquires what `request` asks for.
    fn acquire(request: LockRequest<'_>) -> Taken<'_> {
        Box::pin(Self::acquired(request))
    }

    async fn acquired(request: LockRequest<'_>) -> Result<Self, LockError> {
        let on_lost = request.on_lost();
        let guard = request.acquire().await?;
        Ok(Self { guard, on_lost })
    }

    /// The body's fence: 0 unless one was asked for (the macro asks when it binds one).
    fn fence(&self) -> u64 {
        self.guard.fence().map_or(0, Fence::get)
    }

    /// The body was dropped because the lease is lost: the error it ends with.
    fn abandon(self) -> LockError {
        let key = self.guard.key().as_str().to_owned();
        // Dropping the guard still tries the compare-and-delete, which removes nothing that
        // is not ours.
        drop(self.guard);
        LockError::Lost { key }
    }

    /// Releases after the body: the error that replaces its output, if any. A loss found
    /// only now turns a successful output into `Lost` when the body was to be aborted on a
    /// loss; a backend failure does not hide the output (the lease then expires on its own).
    async fn release(self, succeeded: bool) -> Option<LockError> {
        match self.guard.release().await {
            Err(lost @ LockError::Lost { .. }) if self.on_lost == OnLost::Abort && succeeded => {
                Some(lost)
            }
            _ => None,
        }
    }
}

/// A locked body's run, as a future: the acquisition, the body inside the hold's scope, the
/// release. Its `poll` is the only code instantiated per body; it asks [`Core`] (not generic)
/// what to do next, and polls the body when told to. (Written by hand rather than as an
/// `async fn`: a generic `async fn`'s state machine and drop glue were most of what every
/// annotated function cost to compile.)
struct Run<'a, R, F, Fut: Future<Output = R>> {
    core: Core<'a>,
    /// What makes the body from the fence, until it is made.
    make: Option<F>,
    /// The body while it runs; boxed, so that a body which locks again does not nest its
    /// state in ours.
    body: Option<Pin<Box<Fut>>>,
    /// Its output, kept through the release.
    output: Option<R>,
    outcome: Outcome<R>,
}

// Nothing of `Run` is pinned in place (the body is boxed, the rest is moved freely).
impl<R, F, Fut: Future<Output = R>> Unpin for Run<'_, R, F, Fut> {}

impl<'a, R, F, Fut: Future<Output = R>> Run<'a, R, F, Fut> {
    fn new(taken: Taken<'a>, outcome: Outcome<R>, make: F) -> Self {
        Self {
            core: Core {
                stage: Stage::Taking(taken),
            },
            make: Some(make),
            body: None,
            output: None,
            outcome,
        }
    }

    /// Drops the body if it runs, inside the hold's scope as it ran.
    fn drop_body(&mut self) {
        if let Some(body) = self.body.take() {
            match self.core.chain() {
                Some(chain) => scope::drop_within::<R>(chain, body),
                None => drop(body),
            }
        }
    }
}

impl<R, F, Fut> Future for Run<'_, R, F, Fut>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = R>,
{
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let this = self.get_mut();
        loop {
            let (fence, chain) = match this.core.step(cx) {
                Step::Pending => return Poll::Pending,
                Step::Body { fence, chain } => (fence, chain),
                Step::Failed(e) => {
                    this.drop_body();
                    return Poll::Ready((this.outcome.from_lock_error)(e));
                }
                Step::Released(Some(lost)) => {
                    return Poll::Ready((this.outcome.from_lock_error)(lost));
                }
                Step::Released(None) => match this.output.take() {
                    Some(output) => return Poll::Ready(output),
                    // A release starts only once the body's output is kept.
                    None => unreachable!(),
                },
            };
            if let Some(make) = this.make.take() {
                this.body = Some(Box::pin(make(fence)));
            }
            let Some(body) = this.body.as_mut() else {
                // The body is made the first time the core says to run it.
                unreachable!()
            };
            let Poll::Ready(output) = scope::poll_within::<R>(&chain, body.as_mut(), cx) else {
                return Poll::Pending;
            };
            this.core.release((this.outcome.succeeded)(&output));
            this.output = Some(output);
            // Outside the hold's scope, which has ended: a finished `async` block holds
            // nothing left to drop.
            this.body = None;
        }
    }
}

impl<R, F, Fut: Future<Output = R>> Drop for Run<'_, R, F, Fut> {
    fn drop(&mut self) {
        // A run cut short (the caller dropped it) drops its body inside the hold's scope;
        // the guard in `core` then releases in the background as a dropped guard does.
        self.drop_body();
    }
}

/// The part of a locked run that does not depend on the body: where it stands, and each
/// step it takes.
struct Core<'a> {
    stage: Stage<'a>,
}

enum Stage<'a> {
    /// Acquiring.
    Taking(Taken<'a>),
    /// Held while the body runs: the holds it runs inside, and the loss that ends it (when
    /// a loss aborts the body).
    Holding {
        locked: Locked,
        chain: Chain,
        lost: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    },
    /// Releasing after the body: the error that replaces its output, if any.
    Releasing(Pin<Box<dyn Future<Output = Option<LockError>> + Send>>),
    /// Ended.
    Done,
}

/// What [`Run`] does next, as [`Core::step`] says.
enum Step {
    /// Wait to be woken.
    Pending,
    /// Poll the body, inside `chain` (making it first with `fence`).
    Body { fence: u64, chain: Chain },
    /// The run ends with this error: nothing was acquired, or the lease was lost under a
    /// body that a loss aborts.
    Failed(LockError),
    /// Released: the error that replaces the body's output, if any.
    Released(Option<LockError>),
}

impl Core<'_> {
    /// Moves the acquisition, the watch for a loss or the release on.
    fn step(&mut self, cx: &mut Context<'_>) -> Step {
        if let Stage::Taking(taken) = &mut self.stage {
            match taken.as_mut().poll(cx) {
                Poll::Pending => return Step::Pending,
                Poll::Ready(Err(e)) => {
                    self.stage = Stage::Done;
                    return Step::Failed(e);
                }
                Poll::Ready(Ok(locked)) => {
                    let chain = scope::with_holds(locked.guard.holds());
                    let lost = (locked.on_lost == OnLost::Abort)
                        .then(|| Box::pin(locked.guard.lost_owned()) as Pin<Box<_>>);
                    self.stage = Stage::Holding {
                        locked,
                        chain,
                        lost,
                    };
                }
            }
        }
        match &mut self.stage {
            Stage::Holding {
                locked,
                chain,
                lost,
            } => {
                // The loss is looked at first: a body that could go on (its timer due, say)
                // after this process was stopped past the lease must not take another step
                // unprotected.
                let is_lost = lost
                    .as_mut()
                    .is_some_and(|lost| lost.as_mut().poll(cx).is_ready());
                if !is_lost {
                    return Step::Body {
                        fence: locked.fence(),
                        chain: chain.clone(),
                    };
                }
                match std::mem::replace(&mut self.stage, Stage::Done) {
                    Stage::Holding { locked, .. } => Step::Failed(locked.abandon()),
                    _ => unreachable!("the stage was just matched"),
                }
            }
            Stage::Releasing(releasing) => match releasing.as_mut().poll(cx) {
                Poll::Pending => Step::Pending,
                Poll::Ready(lost) => {
                    self.stage = Stage::Done;
                    Step::Released(lost)
                }
            },
            Stage::Taking(_) | Stage::Done => {
                unreachable!("a locked run is not polled once it ended")
            }
        }
    }

    /// The holds the body runs inside, while it may run.
    fn chain(&self) -> Option<&Chain> {
        match &self.stage {
            Stage::Holding { chain, .. } => Some(chain),
            _ => None,
        }
    }

    /// The body finished (`succeeded` or not): releases.
    fn release(&mut self, succeeded: bool) {
        if let Stage::Holding { locked, .. } = std::mem::replace(&mut self.stage, Stage::Done) {
            self.stage = Stage::Releasing(Box::pin(locked.release(succeeded)));
        }
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
