//! Fencing tokens.

use std::fmt;

/// A fencing token: every acquisition of a key that asks for one (`fenced`, or `fence = …` on
/// the attribute) gets a number strictly greater than every token issued earlier for that
/// key, across releases, lease expiries and holders. Asking costs a second key write inside
/// the acquire script, so locks that no store checks do without.
///
/// Hand it to the store you write under the lock and have the store reject a write whose token
/// is lower than one it has already seen: then a holder that was paused past its lease (and so
/// lost the lock without knowing) cannot overwrite the newer holder's work.
///
/// On Redis the token is `max(previous + 1, server time in µs)`, computed by the acquire script.
/// The previous value is kept only as long as the lease, so no per-key record lives forever;
/// the scheme assumes the Redis server's clock does not step backwards by more than a lease.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let first = client.lock("report").fenced().acquire().await.unwrap();
/// let f1 = first.fence().unwrap();
/// first.release().await.unwrap();
/// let second = client.lock("report").fenced().acquire().await.unwrap();
/// assert!(second.fence().unwrap() > f1);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub(crate) u64);

impl Fence {
    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<Fence> for u64 {
    fn from(fence: Fence) -> u64 {
        fence.0
    }
}
