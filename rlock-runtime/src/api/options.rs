//! Per-lock options: lease length, wait budget, renewal and what to do when the lease is lost.

use std::time::Duration;

/// What a locked body does when its lease is lost.
///
/// ```
/// use rlock_runtime::{LockClient, LockOptions, OnLost};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let opts = LockOptions::new().ttl(Duration::from_millis(30)).renew(false);
/// let body = async { tokio::time::sleep(Duration::from_millis(100)).await; "done" };
///
/// // Abort: the body is dropped when the 30 ms lease ends.
/// let aborted = client.with_lock("a", opts.clone(), body).await;
/// assert!(aborted.unwrap_err().is_lost());
///
/// // Continue: it runs to its end.
/// let body = async { tokio::time::sleep(Duration::from_millis(100)).await; "done" };
/// let finished = client.with_lock("b", opts.on_lost(OnLost::Continue), body).await;
/// assert_eq!(finished.unwrap(), "done");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body future and return [`LockError::Lost`](crate::LockError::Lost).
    #[default]
    Abort,
    /// Let the body finish; the loss is reported through `tracing` and the counters.
    Continue,
}

/// How one lock is taken. The defaults match `#[distributed_lock]`'s: the client's default
/// ttl (30 s unless configured), the client's default wait (none unless configured), renewal
/// on, no cap, the client's default on loss (abort unless configured), no fence.
///
/// ```
/// use rlock_runtime::LockOptions;
/// use std::time::Duration;
///
/// let opts = LockOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2));
/// assert_ne!(opts, LockOptions::new());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) renew: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) fenced: bool,
    pub(crate) min_replicas: Option<u32>,
    pub(crate) fair: bool,
    pub(crate) label: Option<&'static str>,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self {
            ttl: None,
            wait: None,
            renew: true,
            max_hold: None,
            min_hold: None,
            on_lost: None,
            fenced: false,
            min_replicas: None,
            fair: false,
            label: None,
        }
    }
}

impl LockOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease length; without it the client's default ttl applies.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to wait for a busy lock; zero tries once (default: the client's
    /// [`default_wait`](crate::LockClientBuilder::default_wait), zero unless configured).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Whether the watchdog renews the lease while it is held.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// A hard cap on the total time held, renewals included.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// The key stays taken at least this long after the grant, even when the body ends
    /// sooner: a job lock (ShedLock's `lockAtLeastFor`). See
    /// [`LockRequest::min_hold`](crate::LockRequest::min_hold).
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    /// What a locked body does when the lease is lost (default: the client's
    /// [`default_on_lost`](crate::LockClientBuilder::default_on_lost), abort unless configured).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = Some(on_lost);
        self
    }

    /// Whether the acquisition issues a [`Fence`](crate::Fence) (default: no). A fence costs
    /// one more key write inside the acquire script; ask for it where a store checks it.
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// How many replicas must confirm the grant (`WAIT`) before it counts; without it the
    /// client's default applies (0 unless configured). See
    /// [`LockRequest::min_replicas`](crate::LockRequest::min_replicas).
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.min_replicas = Some(replicas);
        self
    }

    /// Whether waiters are granted the lock strictly in arrival order across all instances
    /// (default: no). See [`LockRequest::fair`](crate::LockRequest::fair).
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The lock's label in the metrics exported with the `metrics` feature: its key
    /// *template* (`"order:<user_id>"`), which `#[distributed_lock]` sets by itself. Never
    /// the rendered key: one series per value would be unbounded. Default `"manual"`.
    pub fn metrics_label(mut self, label: &'static str) -> Self {
        self.label = Some(label);
        self
    }
}
