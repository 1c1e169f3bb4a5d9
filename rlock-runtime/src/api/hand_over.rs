//! Handing a hold to another process: a request handler takes the lock, a background worker
//! finishes the job and releases it. [`LockGuard::hand_over`] gives the hold up as a
//! [`HoldToken`] (text, to pass along a queue or a database row), and
//! [`LockClient::take_over`] makes it a guard of another client, with its own watchdog and
//! `lost()`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::api::acquire::plan;
use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::options::LockOptions;
use crate::backend::Kind;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};
use crate::lease::plan::check_ttl;
use crate::util::fence::Fence;

/// The text every hold token starts with, and its format's version.
const PREFIX: &str = "rlock-hold/1";

/// A hold given up by [`LockGuard::hand_over`], for another process to
/// [`take_over`](LockClient::take_over): the key, the kind of lease, its owner token, its
/// fence and its ttl. Written out (`to_string`) it is one line of text, and
/// [`parse`](str::parse) reads it back.
///
/// Whoever has it can take the hold over, so pass it as you would a credential: its owner
/// token carries 122 random bits, which nobody guesses, but anyone who can read the key in
/// Redis can read the token too (the same trust as Redis access itself).
///
/// ```
/// use rlock_runtime::{HoldToken, LockClient};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let guard = client.lock("export:acme").fenced().acquire().await?;
/// let text = guard.hand_over()?.to_string(); // e.g. into a job queue
/// let token: HoldToken = text.parse()?;
/// assert_eq!(token.key().as_str(), "export:acme");
/// assert!(token.fence().is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldToken {
    kind: Kind,
    key: LockKey,
    token: String,
    fence: Option<u64>,
    ttl: Duration,
}

impl HoldToken {
    /// The key held (without the client's namespace: the client that takes it over must
    /// have the same namespace).
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The hold's fencing token, if it was fenced: the one that takes it over keeps it.
    pub fn fence(&self) -> Option<Fence> {
        self.fence.map(Fence)
    }

    /// The lease its renewals ask for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// A kind as a hold token writes it.
fn kind_text(kind: Kind) -> String {
    match kind {
        Kind::Lock => "lock".to_owned(),
        Kind::Read => "read".to_owned(),
        Kind::UpgradeableRead => "upgradeable-read".to_owned(),
        Kind::Write => "write".to_owned(),
        Kind::Permit { permits, take } => format!("permits:{permits}:{take}"),
    }
}

fn kind_of(text: &str) -> Option<Kind> {
    match text {
        "lock" => Some(Kind::Lock),
        "read" => Some(Kind::Read),
        "upgradeable-read" => Some(Kind::UpgradeableRead),
        "write" => Some(Kind::Write),
        _ => {
            let (permits, take) = text.strip_prefix("permits:")?.split_once(':')?;
            Some(Kind::Permit {
                permits: permits.parse().ok()?,
                take: take.parse().ok()?,
            })
        }
    }
}

impl fmt::Display for HoldToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fence = self.fence.map_or("-".to_owned(), |fence| fence.to_string());
        write!(
            f,
            "{PREFIX} {} {} {fence} {} {}",
            kind_text(self.kind),
            self.ttl.as_millis(),
            self.token,
            self.key
        )
    }
}

impl FromStr for HoldToken {
    type Err = LockError;

    /// Reads a token written by `to_string`; anything else is [`LockError::InvalidConfig`].
    fn from_str(text: &str) -> Result<Self, LockError> {
        let bad = || {
            LockError::InvalidConfig(format!(
                "not a hold token (from `LockGuard::hand_over`): {:?}",
                text.chars().take(80).collect::<String>()
            ))
        };
        let mut parts = text.splitn(6, ' ');
        if parts.next() != Some(PREFIX) {
            return Err(bad());
        }
        let kind = parts.next().and_then(kind_of).ok_or_else(bad)?;
        let ttl = (parts.next())
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
            .ok_or_else(bad)?;
        let fence = match parts.next().ok_or_else(bad)? {
            "-" => None,
            fence => Some(fence.parse().map_err(|_| bad())?),
        };
        let token = parts.next().filter(|t| !t.is_empty()).ok_or_else(bad)?;
        let key = parts.next().ok_or_else(bad)?.into_lock_key()?;
        Ok(Self {
            kind,
            key,
            token: token.to_owned(),
            fence,
            ttl,
        })
    }
}

impl LockGuard {
    /// Gives this hold up, unreleased, for another process to
    /// [`take_over`](LockClient::take_over) (redis-semaphore's `acquiredExternally`, redsync's
    /// unlock from another handle): a request handler takes the lock and answers, and a
    /// background worker finishes the job and releases it. From here this client neither
    /// renews nor releases it: the lease runs on, by Redis's clock, until the other side
    /// takes it over (and renews it) or it ends. Its `min_hold` and `max_hold` stay behind.
    ///
    /// [`LockError::Lost`] when the lease is already lost; `InvalidConfig` for a reentrant
    /// guard (its hold is its scope's) or one of several keys (hand each key's guard over
    /// on its own).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let handler = LockClient::in_memory();
    /// let worker = handler.sibling(); // another process, as far as locks go
    /// let guard = handler.lock("order:42").acquire().await?;
    /// let token = guard.hand_over()?;
    /// let guard = worker.take_over(token).await?; // same lease, renewed by the worker now
    /// assert!(handler.lock("order:42").acquire().await.unwrap_err().is_busy());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn hand_over(self) -> Result<HoldToken, LockError> {
        if self.is_reentrant() || self.keys().nth(1).is_some() {
            return Err(LockError::InvalidConfig(format!(
                "lock `{}`: only a guard of one key that took its own lease can be handed \
                 over (a reentrant guard's hold is its scope's; hand each key of a \
                 `lock_all` over on its own guard)",
                self.key()
            )));
        }
        let hold = self.into_hold();
        let ttl = hold.hand_over().ok_or_else(|| hold.lost_error())?;
        Ok(HoldToken {
            kind: hold.kind(),
            key: hold.key().clone(),
            token: hold.token().to_owned(),
            fence: hold.fence().map(Fence::get),
            ttl,
        })
    }
}

impl LockClient {
    /// Takes over a hold another process gave up with [`LockGuard::hand_over`]: in one
    /// atomic step (one round trip) the lease, if still the token's, is set to its ttl and
    /// given an owner token of this client in place of the old one, then held as if this
    /// client had taken it, with its watchdog, `lost()`, release and holder card. The fence
    /// is the original grant's. The hold is in no locked scope (nothing re-enters it).
    ///
    /// [`LockError::Lost`] when the lease ended or was released before it was taken over,
    /// or was taken over already (the old token owns nothing after the first take-over, so
    /// one token makes one holder); the errors of an acquisition when Redis cannot be
    /// reached.
    ///
    /// See [`LockGuard::hand_over`] for an example.
    pub async fn take_over(&self, token: HoldToken) -> Result<LockGuard, LockError> {
        check_ttl(&token.key, token.ttl)?;
        let options = LockOptions::new()
            .ttl(token.ttl)
            .fenced(token.fence.is_some());
        let plan = plan(self, token.kind, &token.key, &options)?;
        let redis_key = self.redis_key(&token.key);
        let hold = self
            .shared()
            .engine
            .take_over(&token.key, &redis_key, plan, token.token, token.fence)
            .await?;
        Ok(LockGuard::new(hold, false))
    }
}
