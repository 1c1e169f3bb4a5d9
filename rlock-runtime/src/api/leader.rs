//! Leader election: one leader per name across every instance, built on a fenced, renewed
//! lock (`leader:<name>`), so that it keeps the lock's guarantees: its term is the lock's
//! fencing token (greater for every new leader), `lost()` fires before another instance can
//! lead, and waiting candidates queue herd-free. The loop form ([`LeaderRequest::run`]) is
//! what Kubernetes' leader election and etcd's `Campaign` give their users: campaign, run the
//! leader's work, cancel it when leadership is lost, campaign again.

use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::identity::Identity;
use crate::error::LockError;
use crate::key::{IntoLockKey, LockKey};
use crate::util::fence::Fence;
use crate::util::tuning::{WAIT_FOREVER, backoff};

/// The first pause of [`LeaderRequest::run`] after a campaign that failed (Redis down or
/// slow); it doubles per failure up to [`RUN_RETRY_MAX`].
const RUN_RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest pause of [`LeaderRequest::run`] between failed campaigns.
const RUN_RETRY_MAX: Duration = Duration::from_secs(5);
/// How often [`LeaderChanges`] reads who leads, unless [`LeaderRequest::poll`] says.
const OBSERVE_EVERY: Duration = Duration::from_millis(250);

impl LockClient {
    /// Starts a leader election for `name`: [`campaign`](LeaderRequest::campaign) to lead
    /// once, [`run`](LeaderRequest::run) to run a task whenever this instance leads, and
    /// [`observe`](LeaderRequest::observe) to see who leads without campaigning.
    ///
    /// A leadership is a fenced, renewed lock on `leader:<name>` (in the client's namespace),
    /// so it keeps the lock's guarantees and its limits: a leader stopped past its lease,
    /// partitioned from Redis or killed is replaced once its lease ends, by Redis's clock (a
    /// killed one's at the latest; a stopped or partitioned one's `lost()` fires before
    /// that, as far as its clock can tell); a campaign waits in the lock's queue. A Redlock
    /// client refuses it (independent masters keep no fencing token).
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let lead = client.leader("billing").campaign().await?;
    /// // A second candidate that does not wait finds the seat taken.
    /// assert!(client.leader("billing").campaign().await.unwrap_err().is_busy());
    /// let first_term = lead.term();
    /// lead.resign().await?;
    /// let next = client.leader("billing").campaign().await?;
    /// assert!(next.term() > first_term);
    /// # Ok(()) }
    /// ```
    pub fn leader(&self, name: impl IntoLockKey) -> LeaderRequest<'_> {
        let key = name
            .into_lock_key()
            .and_then(|name| format!("leader:{}", name.as_str()).into_lock_key());
        LeaderRequest {
            client: self,
            key,
            ttl: None,
            wait: None,
            poll: OBSERVE_EVERY,
        }
    }
}

/// A leader election for one name: set its lease and campaign budget, then
/// [`campaign`](Self::campaign), [`run`](Self::run) or [`observe`](Self::observe).
#[derive(Debug)]
#[must_use = "a leader request does nothing until it campaigns, runs or observes"]
pub struct LeaderRequest<'a> {
    client: &'a LockClient,
    key: Result<LockKey, LockError>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    poll: Duration,
}

impl<'a> LeaderRequest<'a> {
    /// The leader's lease (default: the client's default ttl). The watchdog renews it while
    /// the leadership lasts; a leader that dies is replaced once it ends, so it is the bound
    /// on a failover.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long [`campaign`](Self::campaign) waits for the seat while another instance
    /// leads (default: the client's default wait, `0` unless set: it answers at once). For
    /// [`run`](Self::run), each campaign's budget (default: until elected).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How often [`changes`](Self::changes) reads who leads (default 250 ms; each read is
    /// two round trips).
    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// Campaigns once: leads if nobody does (or once the leader steps down, within the wait
    /// budget), or answers [`LockError::Busy`]. Errors are the lock's: a dead Redis is
    /// [`Timeout`](LockError::Timeout) or [`Unavailable`](LockError::Unavailable), not
    /// `Busy`.
    pub async fn campaign(self) -> Result<Leadership, LockError> {
        let wait = self.wait;
        self.seat()?.campaign(wait).await
    }

    /// The request with its name checked.
    fn seat(self) -> Result<Seat<'a>, LockError> {
        Ok(Seat {
            client: self.client,
            key: self.key?,
            ttl: self.ttl,
            wait: self.wait,
            poll: self.poll,
        })
    }

    /// Runs `work` whenever this instance leads, until it returns: campaigns (waiting in the
    /// queue, by [`wait`](Self::wait) per campaign), calls `work` with the term, and drops
    /// its future the moment leadership is lost (before another instance can lead), then
    /// campaigns again. When `work` finishes while leading, it resigns and returns `work`'s
    /// output.
    ///
    /// A campaign that fails for a passing reason (Redis down or slow, the budget spent
    /// while another leads) is tried again, after a pause that doubles from 100 ms to 5 s
    /// while failures last; an error that trying again cannot mend (an invalid name, a
    /// Redlock client, another kind on the name) is returned.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// let swept = client
    ///     .leader("sweeper")
    ///     .run(|term| async move {
    ///         // The leader's work, its writes fenced by `term`.
    ///         format!("swept under term {term}")
    ///     })
    ///     .await?;
    /// assert!(swept.starts_with("swept under term"));
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(self, mut work: F) -> Result<T, LockError>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let seat = self.seat()?;
        let budget = Some(seat.wait.unwrap_or(WAIT_FOREVER));
        let mut failures = 0u32;
        loop {
            let lead = match seat.campaign(budget).await {
                Ok(lead) => lead,
                // The budget ran out while another leads: again, after a pause that keeps a
                // budget of 0 from spinning.
                Err(e) if e.is_busy() => {
                    tokio::time::sleep(RUN_RETRY_MIN).await;
                    continue;
                }
                Err(e) if e.is_backend() || e.is_lost() => {
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(backoff(RUN_RETRY_MIN, RUN_RETRY_MAX, failures)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            failures = 0;
            let done = {
                let work = work(lead.term());
                tokio::pin!(work);
                tokio::select! {
                    biased;
                    () = lead.lost() => None,
                    out = &mut work => Some(out),
                }
            };
            if let Some(out) = done {
                // A resignation that fails leaves the lease to end by itself.
                let _ = lead.resign().await;
                return Ok(out);
            }
        }
    }

    /// Who leads now, without campaigning: `None` when nobody does. The holder's identity,
    /// term and start come from its client's holder card, which lists a hold about a second
    /// into it: until then they are `None`.
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::in_memory();
    /// assert!(client.leader("billing").observe().await?.is_none());
    /// let lead = client.leader("billing").campaign().await?;
    /// let now = client.leader("billing").observe().await?.expect("a leader");
    /// assert!(now.here && now.token == lead.token());
    /// # Ok(()) }
    /// ```
    pub async fn observe(self) -> Result<Option<LeaderInfo>, LockError> {
        self.seat()?.observe().await
    }

    /// Each change of leader, read every [`poll`](Self::poll) period (see
    /// [`LeaderChanges::next`]); [`LockError::InvalidKey`] for a name that cannot be one.
    pub fn changes(self) -> Result<LeaderChanges<'a>, LockError> {
        Ok(LeaderChanges {
            seat: self.seat()?,
            last: None,
        })
    }
}

/// A leader request whose name is checked: what campaigns and observations use.
#[derive(Debug)]
struct Seat<'a> {
    client: &'a LockClient,
    key: LockKey,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    poll: Duration,
}

impl Seat<'_> {
    /// Campaigns once, waiting up to `wait` (the client's default if `None`).
    async fn campaign(&self, wait: Option<Duration>) -> Result<Leadership, LockError> {
        let mut request = self.client.lock(self.key.clone()).fenced();
        if let Some(ttl) = self.ttl {
            request = request.ttl(ttl);
        }
        if let Some(wait) = wait {
            request = request.wait(wait);
        }
        let guard = request.acquire().await?;
        let Some(term) = guard.fence() else {
            return Err(LockError::InvalidConfig(format!(
                "leader `{}`: the backend gave no fencing token to serve as the term",
                self.key
            )));
        };
        Ok(Leadership {
            guard,
            term,
            key: self.key.clone(),
        })
    }

    /// Who leads now (see [`LeaderRequest::observe`]).
    async fn observe(&self) -> Result<Option<LeaderInfo>, LockError> {
        let info = self.client.inspect(self.key.clone()).await?;
        Ok(info.token.map(|token| LeaderInfo {
            token,
            term: info.fence,
            holder: info.holder,
            since: info.granted_at,
            remaining: info.remaining,
            here: info.held_here,
        }))
    }
}

/// This instance's leadership of one name, from [`LeaderRequest::campaign`]: renewed by the
/// watchdog until [`resign`](Self::resign)ed, dropped (which resigns in the background) or
/// lost.
#[derive(Debug)]
#[must_use = "dropping a leadership resigns it"]
pub struct Leadership {
    guard: LockGuard,
    term: Fence,
    key: LockKey,
}

impl Leadership {
    /// The term: a number greater than every earlier leader's of this name (the lock's
    /// fencing token). Hand it to the stores the leader writes to, and have them refuse a
    /// write under a lower term than one they have seen: a former leader paused past its
    /// lease then cannot overwrite its successor's work.
    pub fn term(&self) -> u64 {
        self.term.get()
    }

    /// The term as a [`Fence`].
    pub fn fence(&self) -> Fence {
        self.term
    }

    /// The lock key that holds the seat (`leader:<name>`).
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The owner token stored under the key, as [`LeaderInfo::token`] shows it.
    pub fn token(&self) -> &str {
        self.guard.token()
    }

    /// Whether leadership is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves once leadership can no longer be counted on (as [`LockGuard::lost`]): before
    /// another instance can have been elected, as far as this process's clock can tell.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Steps down, so that the next candidate in the queue leads at once. [`LockError::Lost`]
    /// if leadership had already been lost.
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}

/// Who leads a name, from [`LeaderRequest::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The leader's owner token: it differs for every leadership, a new term of the same
    /// instance included.
    pub token: String,
    /// The leader's term; `None` until its client's holder card lists it (about a second).
    pub term: Option<u64>,
    /// Its service, host and process, from the same card.
    pub holder: Option<Identity>,
    /// When it was elected, by its clock, from the same card.
    pub since: Option<SystemTime>,
    /// What is left of its lease, as Redis counts it now.
    pub remaining: Option<Duration>,
    /// This client leads.
    pub here: bool,
}

/// Each change of leader of one name, from [`LeaderRequest::changes`].
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let mut changes = client.leader("billing").changes()?;
/// assert_eq!(changes.next().await?, None); // nobody leads
/// let lead = client.leader("billing").campaign().await?;
/// let now = changes.next().await?.expect("a leader");
/// assert_eq!(now.token, lead.token());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderChanges<'a> {
    seat: Seat<'a>,
    /// The token of the leader last reported, and whether anything was reported yet.
    last: Option<Option<String>>,
}

impl LeaderChanges<'_> {
    /// Who leads, as soon as it differs from what the last call answered (the first call
    /// answers at once): `None` when nobody leads. It reads every poll period; a leadership
    /// that begins and ends between two reads goes unseen. A read that fails is answered
    /// as its error, and the next call goes on from what was last answered.
    pub async fn next(&mut self) -> Result<Option<LeaderInfo>, LockError> {
        loop {
            let now = self.seat.observe().await?;
            let token = now.as_ref().map(|info| info.token.clone());
            if self.last.as_ref() != Some(&token) {
                self.last = Some(token);
                return Ok(now);
            }
            tokio::time::sleep(self.seat.poll).await;
        }
    }
}
