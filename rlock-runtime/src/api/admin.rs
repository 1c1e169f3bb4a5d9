//! Looking at a lock from outside, and breaking it: Redisson's `isLocked`,
//! `remainTimeToLive` and `forceUnlock`, redis-py's `locked()` and `owned()`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::api::client::LockClient;
use crate::api::identity::Identity;
use crate::backend::{CountChange, Feature, Holder, Kind, Lease, Recounted};
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};
use crate::lease::card;
use crate::util::token::{Token, permits_taken};

/// What [`LockClient::inspect`] found about one lock.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// assert!(!client.inspect("order:7").await?.held);
/// let guard = client.lock("order:7").acquire().await?;
/// let info = client.inspect("order:7").await?;
/// assert!(info.held && info.held_here);
/// assert_eq!(info.hold_count, 1);
/// assert!(info.remaining.is_some_and(|left| !left.is_zero()));
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockInfo {
    /// Someone holds the lock: this client, another instance, or a client that is not rlock.
    pub held: bool,
    /// What is left of the holder's lease, when it has one (as Redis counts it now).
    pub remaining: Option<Duration>,
    /// This client holds it (the token in Redis is one of this client's live holds).
    pub held_here: bool,
    /// How many guards of this client share the hold: 1, plus one per reentry; 0 when the
    /// lock is not held here.
    pub hold_count: usize,
    /// Entries in the lock's queue in Redis: waiters of every instance (an entry whose
    /// waiter died stays until a release or its queue's expiry skips it). `None` where no
    /// queue is kept in Redis (Redlock, in process).
    pub waiters: Option<u32>,
    /// The holder's owner token (`<client id>:<n>`), as stored under the key.
    pub token: Option<String>,
    /// Who holds it: the service, host and process of the holding client, read from the
    /// client's holder card ([`Identity`]). `None` for a client that is not rlock, or one
    /// none of whose holds has lasted about a second yet (a client posts its card, and lists
    /// a hold on it, once the hold has lasted that long).
    pub holder: Option<Identity>,
    /// When the holder was granted the lock, by the holder's clock (the moment its acquire
    /// request went out: the grant came no earlier). `None` until the hold is listed on its
    /// client's card, about a second into it.
    pub granted_at: Option<SystemTime>,
    /// The holder's fencing token, if its hold has one (`fenced`), from the same card and
    /// with the same delay as [`holder`](Self::holder).
    pub fence: Option<u64>,
}

/// What a holder's card says of one of its holds.
#[derive(Debug, Default)]
struct CardRead {
    holder: Option<Identity>,
    granted_at: Option<SystemTime>,
    fence: Option<u64>,
}

/// What [`LockClient::list`] found: lock keys matching a pattern, as far as its bounds let
/// it look.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let _a = client.lock("order:1").acquire().await?;
/// let _b = client.lock("order:2").acquire().await?;
/// let found = client.list("order:*", 100).await?;
/// assert_eq!(found.keys, ["order:1", "order:2"]);
/// assert!(found.complete);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockList {
    /// The keys, as locks name them (without the client's namespace), sorted. A lock's
    /// queue, fence record and the holder cards are not listed.
    pub keys: Vec<String>,
    /// Whether the scan ran to its end; `false` when the limit stopped it first.
    pub complete: bool,
}

/// Keys a `SCAN` page asks each node to look at.
const SCAN_PAGE: u32 = 200;

/// What [`LockClient::inspect_read_write`] found about one read-write lock.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let a = client.read_lock("config:42").acquire().await?;
/// let b = client.read_lock("config:42").acquire().await?;
/// let info = client.inspect_read_write("config:42").await?;
/// assert_eq!((info.writer, info.readers, info.held_here), (false, 2, 2));
/// drop((a, b));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReadWriteInfo {
    /// A writer holds it.
    pub writer: bool,
    /// An upgradeable reader holds it (one of `readers`; its upgrade, if taken, is the
    /// writer).
    pub upgradeable: bool,
    /// How many readers hold it (a writer's own task may read beside it: a downgrade).
    pub readers: u32,
    /// How many of those leases (the writer's and the readers') this client holds.
    pub held_here: usize,
    /// What is left of the writer's lease, or, with readers only, of the reader's that ends
    /// last: when a writer could be granted at the latest, as Redis counts it now.
    pub remaining: Option<Duration>,
    /// Entries in its queue in Redis (readers and writers of every instance); `None` in
    /// process, where no queue is kept.
    pub waiters: Option<u32>,
}

/// What [`LockClient::inspect_semaphore`] found about one semaphore.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let permit = client.semaphore("export:acme", 5).acquire().await?;
/// let export = client.semaphore("export:acme", 5).permits(3).acquire().await?;
/// let info = client.inspect_semaphore("export:acme").await?;
/// assert_eq!((info.permits, info.in_use, info.available, info.held_here), (5, 4, 1, 4));
/// // Its holds, named: who holds how many.
/// let mut taken: Vec<u32> = info.holders.iter().map(|holder| holder.permits).collect();
/// taken.sort();
/// assert_eq!(taken, [1, 3]);
/// drop(export);
/// permit.release().await?;
/// assert_eq!(client.inspect_semaphore("export:acme").await?.in_use, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// Its count: the one set at run time ([`LockClient::set_permits`]) if any, else the one
    /// stored with the permits; 0 when neither is (the callers' count goes with the last
    /// permit).
    pub permits: u32,
    /// Permits in use now, by every instance (a hold of several permits counts each).
    pub in_use: u32,
    /// Permits free now (Redisson's `availablePermits`): the count less those in use, and 0
    /// when they are over a lowered count; 0 when none is in use and no count was set,
    /// since the count is then unknown (every caller names it).
    pub available: u32,
    /// The holds whose first permit is among the first 64 to end, each named, in the order
    /// their leases end (a bounded list: `in_use` counts every permit).
    pub holders: Vec<PermitHolder>,
    /// Of those, the ones this client holds.
    pub held_here: usize,
    /// What is left of the lease of the permit that ends first: when one comes free at the
    /// latest, unless it is renewed.
    pub next_end: Option<Duration>,
    /// Entries in its queue in Redis (see [`LockInfo::waiters`]).
    pub waiters: Option<u32>,
}

/// One hold of a semaphore's permits, as [`LockClient::inspect_semaphore`] names it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PermitHolder {
    /// Its owner token.
    pub token: String,
    /// The permits it holds (more than one with `permits(n)`).
    pub permits: u32,
    /// This client holds it.
    pub held_here: bool,
    /// Who holds it, from its client's holder card, as [`LockInfo::holder`].
    pub holder: Option<Identity>,
    /// When it was granted, from the same card, as [`LockInfo::granted_at`].
    pub granted_at: Option<SystemTime>,
}

impl LockClient {
    /// Reads whether `key` is locked, by whom (this client or not) and for how long, in one
    /// atomic read: one round trip (Redlock: one to each master, and a majority must agree
    /// on the holder). A snapshot: by the time it returns, the lock may have changed hands.
    /// For deciding, take the lock (`acquire` with no wait), do not inspect first.
    ///
    /// See [`LockInfo`] for an example.
    pub async fn inspect(&self, key: impl IntoLockKey) -> Result<LockInfo, LockError> {
        let key = key.into_lock_key()?;
        let redis_key = self.redis_key(&key);
        let engine = &self.shared().engine;
        let holder = engine.inspect(Kind::Lock, &redis_key).await?;
        of_kind(&key, Kind::Lock, &holder)?;
        let ours = (holder.token.as_deref()).and_then(|token| engine.hold_of(&redis_key, token));
        let card = match &holder.token {
            Some(token) => self.read_card(token).await?,
            None => CardRead::default(),
        };
        Ok(LockInfo {
            held: holder.token.is_some(),
            remaining: holder.remaining,
            held_here: ours.is_some(),
            hold_count: ours.map_or(0, |hold| hold.guard_count()),
            waiters: holder.queued,
            token: holder.token,
            holder: card.holder,
            granted_at: card.granted_at,
            fence: card.fence,
        })
    }

    /// Lock keys matching the glob `pattern` (Redis's `*`, `?`, `[…]`; in process only a
    /// trailing `*`), at most `limit` of them. It reads by `SCAN` with a page size on every
    /// node (a cluster's masters), each page within the command timeout, and stops at the
    /// limit or after `limit / 200 + 10` pages per node; it never runs `KEYS`, so it does not
    /// block Redis however many keys there are. A snapshot, as [`inspect`](Self::inspect).
    ///
    /// See [`LockList`] for an example.
    pub async fn list(&self, pattern: &str, limit: usize) -> Result<LockList, LockError> {
        let namespace = self.shared().namespace.as_deref();
        let in_namespace = match namespace {
            Some(ns) => format!("{ns}:{pattern}"),
            None => pattern.to_owned(),
        };
        let owned_namespace = namespace.map(str::to_owned);
        let unprefixed = move |key: &str| -> Option<String> {
            match &owned_namespace {
                Some(ns) => key
                    .strip_prefix(ns.as_str())?
                    .strip_prefix(':')
                    .map(str::to_owned),
                None => Some(key.to_owned()),
            }
        };
        let is_lock = {
            let unprefixed = unprefixed.clone();
            move |key: &str| {
                unprefixed(key)
                    .is_some_and(|k| !crate::key::is_companion_shaped(&k) && !card::is_card(&k))
            }
        };
        let scanned = self
            .shared()
            .engine
            .scan(&in_namespace, SCAN_PAGE, limit, &is_lock)
            .await?;
        let keys = scanned
            .keys
            .iter()
            .filter_map(|key| unprefixed(key))
            .collect();
        Ok(LockList {
            keys,
            complete: scanned.complete,
        })
    }

    /// The holder named by the card of `token`'s client, and the hold's grant time.
    async fn read_card(&self, token: &str) -> Result<CardRead, LockError> {
        let Some(token) = Token::parse(token) else {
            return Ok(CardRead::default());
        };
        let key = card::key(self.shared().namespace.as_deref(), token.client);
        let hold = card::hold_field(token);
        let mut fields = card::NAME_FIELDS.to_vec();
        fields.push(&hold);
        let card = self.shared().engine.read_card(&key, &fields).await;
        // The card only names the holder: a user whose ACL predates it (no `+hmget`) still
        // inspects, without the name, and a Redis that failed has already failed the read
        // of the lock itself.
        let card = match card {
            Ok(card) => card,
            Err(error) => {
                let error = &error as &(dyn std::error::Error + 'static);
                crate::util::trace::debug_event!(
                    card = key.as_str(),
                    error,
                    "rlock: holder card unread"
                );
                let _ = error; // read by the event only when `tracing` is on
                return Ok(CardRead::default());
            }
        };
        let hold = card
            .values
            .get(card::NAME_FIELDS.len())
            .and_then(|value| card::parse_hold_value(value.as_deref()?));
        Ok(CardRead {
            holder: Identity::from_card(&card.values),
            granted_at: hold.map(|(ms, _)| UNIX_EPOCH + Duration::from_millis(ms)),
            fence: hold.and_then(|(_, fence)| fence),
        })
    }

    /// Reads a semaphore's permits in use, its count and its waiters, in one atomic read
    /// (Redlock keeps no semaphores: an error). A snapshot, as [`inspect`](Self::inspect).
    ///
    /// See [`SemaphoreInfo`] for an example.
    pub async fn inspect_semaphore(
        &self,
        key: impl IntoLockKey,
    ) -> Result<SemaphoreInfo, LockError> {
        let (redis_key, holder) = self.semaphore_holders(key).await?;
        let permits = holder.permits.unwrap_or_default();
        let ours: Vec<_> = (self.shared().engine.holds_of(&redis_key).into_iter())
            .filter(|hold| !hold.is_lost())
            .collect();
        let listed: u64 = (permits.owners.iter())
            .map(|token| u64::from(permits_taken(token)))
            .sum();
        let listed_all = listed >= u64::from(permits.in_use);
        // This client's holds the inspection found (every one, when it listed them all).
        let held_here = (ours.iter())
            .filter(|hold| !listed_all || permits.owners.iter().any(|t| t == hold.token()))
            .map(|hold| permits_taken(hold.token()) as usize)
            .sum();
        let cards = permits.owners.iter().map(|token| self.read_card(token));
        let cards = futures_util::future::try_join_all(cards).await?;
        let holders = (permits.owners.iter().zip(cards))
            .map(|(token, card)| PermitHolder {
                token: token.clone(),
                permits: permits_taken(token),
                held_here: ours.iter().any(|hold| hold.token() == token),
                holder: card.holder,
                granted_at: card.granted_at,
            })
            .collect();
        Ok(SemaphoreInfo {
            permits: permits.count,
            in_use: permits.in_use,
            available: permits.count.saturating_sub(permits.in_use),
            holders,
            held_here,
            next_end: holder.remaining,
            waiters: holder.queued,
        })
    }

    /// Reads a read-write lock's writer, readers and waiters, in one atomic read (Redlock
    /// keeps no read-write locks: an error). A snapshot, as [`inspect`](Self::inspect).
    ///
    /// See [`ReadWriteInfo`] for an example.
    pub async fn inspect_read_write(
        &self,
        key: impl IntoLockKey,
    ) -> Result<ReadWriteInfo, LockError> {
        let (redis_key, holder) = self.read_write_holders(key).await?;
        let readers = holder.permits.unwrap_or_default();
        // The inspection lists a bounded number of readers: when it did not list them all,
        // this client's live holds count as found.
        let listed_all = readers.owners.len() >= readers.count as usize;
        let held_here = self
            .shared()
            .engine
            .holds_of(&redis_key)
            .iter()
            .filter(|hold| {
                !hold.is_lost()
                    && (!listed_all
                        || holder.token.as_deref() == Some(hold.token())
                        || readers.owners.iter().any(|t| t == hold.token()))
            })
            .count();
        Ok(ReadWriteInfo {
            writer: holder.token.is_some(),
            upgradeable: readers.upgrader.is_some(),
            readers: readers.count,
            held_here,
            remaining: holder.remaining,
            waiters: holder.queued,
        })
    }

    /// **Dangerous**: ends every lease of the read-write lock `key`, its writer's and its
    /// readers', whoever holds them; returns how many were ended. The waiters queued next
    /// are admitted, as on a release. Holders in this client are marked lost at once;
    /// holders elsewhere find out at their next renewal, as with
    /// [`force_unlock`](Self::force_unlock).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let ops = LockClient::in_memory();
    /// let stuck = ops.sibling();
    /// let writer = stuck.write_lock("config:42").acquire().await?;
    /// assert_eq!(ops.force_unlock_read_write("config:42").await?, 1);
    /// assert!(!ops.inspect_read_write("config:42").await?.writer);
    /// assert!(writer.release().await.unwrap_err().is_lost());
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock_read_write(&self, key: impl IntoLockKey) -> Result<u32, LockError> {
        let (redis_key, holder) = self.read_write_holders(key).await?;
        let readers = holder.permits.unwrap_or_default();
        let role = |token: &String| {
            if readers.upgrader.as_ref() == Some(token) {
                Kind::UpgradeableRead
            } else {
                Kind::Read
            }
        };
        let leases = (holder.token.iter().map(|t| (Kind::Write, t)))
            .chain(readers.owners.iter().map(|t| (role(t), t)));
        let ended = self.end_leases(&redis_key, leases).await?;
        if ended > 0 {
            crate::util::trace::warn_event!(
                key = redis_key.as_str(),
                leases = ended,
                "rlock: read-write lock forcibly unlocked"
            );
        }
        Ok(ended)
    }

    /// Releases each of `leases` (a kind and an owner token) of `redis_key` under its
    /// owner's token, marking this client's holds of them lost; how many were ended.
    async fn end_leases<'t>(
        &self,
        redis_key: &str,
        leases: impl Iterator<Item = (Kind, &'t String)>,
    ) -> Result<u32, LockError> {
        let engine = &self.shared().engine;
        let mut ended = 0;
        for (kind, token) in leases {
            let lease = Lease {
                kind,
                key: redis_key,
                token,
                ttl: Duration::ZERO,
            };
            if engine.end_lease(lease).await? {
                ended += permits_taken(token);
            }
        }
        Ok(ended)
    }

    /// Sets the count of the semaphore `key` at run time (Redisson's `setPermits`, redis-semaphore's
    /// resizable count): from now on it is the count for every caller, whatever count they
    /// name (no `InvalidConfig` for another), until [`clear_permits`](Self::clear_permits).
    /// Holders keep their permits: a count lowered below the permits in use admits nobody
    /// until enough are given back; a raised one admits the queued waiters that now fit at
    /// once, in arrival order (each told on its own channel, as by a release). `0` admits
    /// nobody. The count is kept in Redis beside the semaphore (`{key}:permits`) with no
    /// expiry, as Redisson keeps its count; Redlock keeps no semaphores (an error).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let a = client.semaphore("export:acme", 2).acquire().await?;
    /// let b = client.semaphore("export:acme", 2).acquire().await?;
    /// // The tenant's plan changes: one export at a time from now on.
    /// client.set_permits("export:acme", 1).await?;
    /// drop(a); // both holders kept their permits; nobody new until one is left
    /// # tokio::task::yield_now().await;
    /// assert!(client.semaphore("export:acme", 2).acquire().await.unwrap_err().is_busy());
    /// assert_eq!(client.add_permits("export:acme", 2).await?, 3);
    /// let c = client.semaphore("export:acme", 2).acquire().await?; // any count named
    /// assert_eq!(client.inspect_semaphore("export:acme").await?.permits, 3);
    /// client.clear_permits("export:acme").await?;
    /// # drop((b, c)); Ok(()) }
    /// ```
    pub async fn set_permits(&self, key: impl IntoLockKey, permits: u32) -> Result<(), LockError> {
        self.recount(key, CountChange::Set(permits)).await.map(drop)
    }

    /// Changes the count of the semaphore `key` by `delta` (Redisson's `addPermits`; negative
    /// lowers it, to at least 0), as [`set_permits`](Self::set_permits) would set it; returns
    /// the count now. It adds to the count set, or, with none set, to the count in use;
    /// [`LockError::InvalidConfig`] when there is neither (nothing says what to add to).
    pub async fn add_permits(&self, key: impl IntoLockKey, delta: i64) -> Result<u32, LockError> {
        self.recount(key, CountChange::Add(delta)).await
    }

    /// Forgets the count set by [`set_permits`](Self::set_permits): callers' counts apply
    /// again, once the permits taken under the set count are given back (the count lives
    /// with the permits in use, and a caller naming another is refused meanwhile).
    pub async fn clear_permits(&self, key: impl IntoLockKey) -> Result<(), LockError> {
        self.recount(key, CountChange::Clear).await.map(drop)
    }

    /// Changes the semaphore `key`'s count: the count after it.
    async fn recount(&self, key: impl IntoLockKey, change: CountChange) -> Result<u32, LockError> {
        let key = key.into_lock_key()?;
        let engine = &self.shared().engine;
        if let Some(why) = engine.refuses(Feature::Semaphores) {
            return Err(LockError::InvalidConfig(format!(
                "semaphore `{key}`: {why}"
            )));
        }
        match engine.recount(&self.redis_key(&key), change).await? {
            Recounted::Count(permits) => Ok(permits),
            Recounted::NoCount => Err(LockError::InvalidConfig(format!(
                "semaphore `{key}` has no count to add to: none was set and no permit is in \
                 use; set one with `set_permits`"
            ))),
            Recounted::Misfit(misfit) => Err(misfit.error(
                Kind::Permit {
                    permits: 1,
                    take: 1,
                },
                &key,
            )),
        }
    }

    /// The Redis key of the read-write lock `key`, and its holders as the backend reads them.
    async fn read_write_holders(
        &self,
        key: impl IntoLockKey,
    ) -> Result<(String, Holder), LockError> {
        let key = key.into_lock_key()?;
        let engine = &self.shared().engine;
        if let Some(why) = engine.refuses(Feature::ReadWrite) {
            return Err(LockError::InvalidConfig(format!(
                "read-write lock `{key}`: {why}"
            )));
        }
        let redis_key = self.redis_key(&key);
        let holder = engine.inspect(Kind::Read, &redis_key).await?;
        of_kind(&key, Kind::Read, &holder)?;
        Ok((redis_key, holder))
    }

    /// **Dangerous**: gives back every permit of the semaphore `key`, whoever holds them;
    /// returns how many were given back. Each goes to the next queued waiter, as on a
    /// release. As with [`force_unlock`](Self::force_unlock), holders in this client are
    /// marked lost at once and holders elsewhere find out at their next renewal, so until
    /// then more than `permits` may run. For an operator clearing permits whose holders are
    /// known to be gone.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let ops = LockClient::in_memory();
    /// let stuck = ops.sibling();
    /// let permit = stuck.semaphore("export:acme", 2).acquire().await?;
    /// assert_eq!(ops.force_unlock_semaphore("export:acme").await?, 1);
    /// assert_eq!(ops.inspect_semaphore("export:acme").await?.in_use, 0);
    /// assert!(permit.release().await.unwrap_err().is_lost());
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock_semaphore(&self, key: impl IntoLockKey) -> Result<u32, LockError> {
        let (redis_key, holder) = self.semaphore_holders(key).await?;
        let Some(permits) = holder.permits else {
            return Ok(0);
        };
        let kind = Kind::Permit {
            permits: permits.count,
            take: 1,
        };
        let given_back = self
            .end_leases(&redis_key, permits.owners.iter().map(|t| (kind, t)))
            .await?;
        if given_back > 0 {
            crate::util::trace::warn_event!(
                key = redis_key.as_str(),
                permits = given_back,
                "rlock: semaphore permits forcibly given back"
            );
        }
        Ok(given_back)
    }

    /// The Redis key of the semaphore `key`, and its permits as the backend reads them.
    async fn semaphore_holders(
        &self,
        key: impl IntoLockKey,
    ) -> Result<(String, Holder), LockError> {
        let key = key.into_lock_key()?;
        let engine = &self.shared().engine;
        if let Some(why) = engine.refuses(Feature::Semaphores) {
            return Err(LockError::InvalidConfig(format!(
                "semaphore `{key}`: {why}"
            )));
        }
        let redis_key = self.redis_key(&key);
        // The count is read, not named: any will do for the inspection script.
        let kind = Kind::Permit {
            permits: 1,
            take: 1,
        };
        let holder = engine.inspect(kind, &redis_key).await?;
        of_kind(&key, kind, &holder)?;
        Ok((redis_key, holder))
    }

    /// **Dangerous**: deletes `key`'s lock whoever holds it, as Redisson's `forceUnlock`
    /// does; `Ok(true)` when a lock was deleted. The next waiter queued for it is handed the
    /// lock, as on a release. The holder is not told: if it is in this client, its hold is
    /// marked lost at once (its `lost()` fires); anywhere else it finds out at its next
    /// renewal (its lease lost), and until then two holders may run. For an operator
    /// clearing a lock whose holder is known to be gone, not for normal flow.
    ///
    /// Counted in [`LockMetrics::forced_unlocks`](crate::LockMetrics::forced_unlocks) and
    /// logged as a warning with the key.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let ops = LockClient::in_memory();
    /// let stuck = ops.sibling();
    /// let guard = stuck.lock("report:daily").acquire().await?;
    /// assert!(ops.force_unlock("report:daily").await?);
    /// assert!(!ops.inspect("report:daily").await?.held);
    /// assert_eq!(ops.metrics().forced_unlocks, 1);
    /// assert!(guard.release().await.unwrap_err().is_lost());
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self, key: impl IntoLockKey) -> Result<bool, LockError> {
        let key = key.into_lock_key()?;
        let redis_key = self.redis_key(&key);
        let engine = &self.shared().engine;
        let holder = engine.inspect(Kind::Lock, &redis_key).await?;
        of_kind(&key, Kind::Lock, &holder)?;
        let Some(token) = holder.token else {
            return Ok(false);
        };
        let lease = Lease {
            kind: Kind::Lock,
            key: &redis_key,
            token: &token,
            ttl: Duration::ZERO,
        };
        // A release under the holder's own token: it deletes nothing if the lock changed
        // hands since the read, and hands the lock to the next queued waiter if it did not.
        let deleted = engine.end_lease(lease).await?;
        if deleted {
            crate::util::trace::warn_event!(key = key.as_str(), "rlock: lock forcibly unlocked");
        }
        Ok(deleted)
    }
}

/// `Ok` when `key`, as inspected (`holder`), is free or holds `kind`; else the error that
/// names both: one kind's inspection or force-unlock never reads or ends another's.
fn of_kind(key: &LockKey, kind: Kind, holder: &Holder) -> Result<(), LockError> {
    match holder.found {
        Some(found) if found != kind.key_kind() => Err(LockError::WrongKind {
            key: key.as_str().to_owned(),
            asked: kind.key_kind(),
            found,
        }),
        _ => Ok(()),
    }
}
