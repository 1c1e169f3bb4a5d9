//! The lease engine: the client's core below the public façade. It connects a deployment
//! ([`Engine::connect`]), takes leases (one attempt at a time here; an acquisition that may
//! wait, over the waiting layer, in [`acquisition`]; several lock keys in [`all`]), decides
//! what the call chain's holds mean for a request ([`scope`]), owns every hold's state
//! ([`hold`]), keeps holds alive and watched ([`watchdog`]), and answers operators'
//! reads and force-unlocks ([`admin`]).

pub(crate) mod acquisition;
pub(crate) mod admin;
pub(crate) mod all;
pub(crate) mod card;
pub(crate) mod hold;
pub(crate) mod plan;
pub(crate) mod scope;
pub(crate) mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::backend::connection::CallerConnection;
use crate::backend::deployment::Deployment;
use crate::backend::memory::MemoryBackend;
use crate::backend::{
    Attempt, AttemptAsks, Backend, Behind, Kind, Lease, LeaseStore, QueueAsk, QueueEntry,
};
use crate::error::{LockError, Operation};
use crate::key::LockKey;
use crate::metrics::{Count, Counters};
use crate::util::lateness::Lateness;
use crate::util::token::TokenSource;
use crate::util::tuning::{
    ORPHAN_HORIZON, ORPHAN_RETRY_MAX, ORPHAN_RETRY_MIN, ORPHAN_SETTLE, backoff,
};
use crate::wait::{Place, WaitQueues};

use card::Card;
pub(crate) use hold::Hold;
pub(crate) use plan::LeasePlan;
use watchdog::Watchdog;

/// What one attempt asks for besides the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Try<'a> {
    /// The caller will wait if the lock is busy (it needs the holder's remaining lease).
    pub(crate) waiting: bool,
    /// Wait in the lock's queue in Redis, under this owner token.
    pub(crate) queue: Option<(QueueAsk, &'a str)>,
    /// Return by then, whatever Redis does.
    pub(crate) deadline: Option<Instant>,
}

/// What an attempt came to.
#[derive(Debug)]
pub(crate) enum Attempted {
    Granted(Arc<Hold>),
    /// Another owner holds it, with this much lease left when known; `place` tells the
    /// waiter where it stands in the lock's queue in Redis (see [`Attempt::Busy`]).
    Busy {
        remaining: Option<Duration>,
        place: Place,
    },
    /// The caller's deadline came before the answer (and before any replicas confirmed a
    /// grant): nothing is known of the lock. Whatever Redis did is undone in the background.
    Unanswered,
}

/// A lock granted to this client: under `token`, by a request sent at `sent_at` (or after),
/// for a lease of `lease`; its release expects `behind` it what a caller that took it this
/// way finds most often.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) token: String,
    pub(crate) fence: Option<u64>,
    pub(crate) sent_at: Instant,
    pub(crate) lease: Duration,
    pub(crate) behind: Behind,
}

/// What every clone of a client shares below the façade.
#[derive(Debug)]
pub(crate) struct Engine {
    backend: Backend,
    tokens: TokenSource,
    pub(crate) counters: Counters,
    pub(crate) queues: Arc<WaitQueues>,
    /// Shared with its task, which holds the engine itself only during a pass.
    pub(crate) watchdog: Arc<Watchdog>,
    /// How late this client's timers fire; the holds' margins follow it.
    pub(crate) lateness: Lateness,
    /// The card that names this client and its long holds to operators' tools.
    pub(crate) card: Card,
}

impl Engine {
    /// Every server's answers to the probes of `names` (`backend::doctor`).
    pub(crate) async fn diagnose(
        &self,
        names: &crate::backend::doctor::ProbeNames,
    ) -> (
        crate::backend::doctor::Deployment,
        Vec<crate::backend::doctor::ServerReport>,
    ) {
        self.backend.diagnose(names).await
    }

    /// An engine on `backend` whose holder card lives in `namespace` and names the client
    /// as `name` (service, host, pid).
    pub(crate) fn new(backend: Backend, namespace: Option<&str>, name: [String; 3]) -> Arc<Self> {
        let tokens = TokenSource::new();
        let queues = WaitQueues::new(&backend, &tokens.client_id().simple().to_string());
        let card = Card::new(namespace, tokens.client_id(), name);
        Arc::new(Self {
            card,
            backend,
            tokens,
            counters: Counters::default(),
            queues,
            watchdog: Arc::default(),
            lateness: Lateness::default(),
        })
    }

    /// An engine connected to the deployment `url` names, each command bounded by `timeout`,
    /// trusting the PEM `roots` for TLS when given (see [`new`](Self::new) for the rest).
    pub(crate) async fn connect(
        url: &str,
        timeout: Duration,
        roots: Option<&[u8]>,
        namespace: Option<&str>,
        name: [String; 3],
    ) -> Result<Arc<Self>, LockError> {
        let backend = Deployment::of(url)?.connect(timeout, roots).await?;
        Ok(Self::new(backend, namespace, name))
    }

    /// An engine whose locks live in this process (see [`new`](Self::new)).
    pub(crate) fn in_memory(namespace: Option<&str>, name: [String; 3]) -> Arc<Self> {
        Self::new(Backend::Memory(MemoryBackend::default()), namespace, name)
    }

    /// Another client's engine on this one's backend: its own holds, tokens and waiters, the
    /// same locks (see [`new`](Self::new)).
    pub(crate) fn sibling(&self, namespace: Option<&str>, name: [String; 3]) -> Arc<Self> {
        Self::new(self.backend.clone(), namespace, name)
    }

    /// The client's identity (reentrancy is per client).
    pub(crate) fn id(&self) -> Uuid {
        self.tokens.client_id()
    }

    /// A fresh owner token.
    pub(crate) fn token(&self) -> String {
        self.tokens.next()
    }

    /// A fresh owner token for a lease of `plan`: a semaphore's hold of several permits
    /// says how many in it, and an upgrade which upgradeable read it upgrades.
    pub(crate) fn token_for(&self, plan: &LeasePlan) -> String {
        match (plan.kind, plan.beside_of) {
            (Kind::Permit { take, .. }, _) => self.tokens.next_taking(take),
            (Kind::Write, Some(of)) => self.tokens.next_upgrading(of),
            (Kind::Lock | Kind::Read | Kind::UpgradeableRead | Kind::Write, _) => {
                self.tokens.next()
            }
        }
    }

    /// One attempt at `redis_key`, returning by `deadline` if given. On success the hold is
    /// watched; `Busy` tells how long the holder's lease has left, when known; an attempt cut
    /// short by the deadline is `Unanswered` (nothing is known: not "busy").
    /// If the reply never comes (timeout, deadline, cancelled caller), Redis may still have
    /// granted it: the token is released (and its queue entry withdrawn) in the background,
    /// so no orphan blocks others.
    pub(crate) async fn attempt(
        self: &Arc<Self>,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        ask: Try<'_>,
    ) -> Result<Attempted, LockError> {
        let token = match ask.queue {
            Some((_, token)) => token.to_owned(),
            None => self.token_for(&plan),
        };
        let sent_at = Instant::now();
        let lease = Lease {
            kind: plan.kind,
            key: redis_key,
            token: &token,
            ttl: plan.ttl,
        };
        let asks = AttemptAsks {
            fence: plan.fenced,
            remaining: ask.waiting,
            queue: ask.queue.map(|(queue, _)| queue),
            beside_of: plan.beside_of,
        };
        let entry = QueueEntry {
            kind: plan.kind,
            ttl: plan.ttl,
            fenced: plan.fenced,
        };
        let mut orphan = Resend::orphan(self, lease, ask.queue.map(|_| entry));
        // The call is built in each arm: built before, it would take room in this future
        // beside the timeout that wraps it.
        let outcome = match ask.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, self.backend.acquire(lease, asks))
                .await
                .ok(),
            None => Some(self.backend.acquire(lease, asks).await),
        };
        let Some(outcome) = outcome else {
            return Ok(Attempted::Unanswered);
        };
        let (fence, granted) = match outcome {
            Err(e) => return Err(e),
            Ok(Attempt::Acquired { fence }) => (fence, plan.ttl),
            Ok(Attempt::Handed { fence, left }) => (fence, left),
            Ok(Attempt::Busy {
                remaining,
                queued,
                standing,
            }) => {
                orphan.armed = false;
                return Ok(Attempted::Busy {
                    remaining,
                    place: Place { queued, standing },
                });
            }
            Ok(Attempt::Misfit(misfit)) => {
                orphan.armed = false;
                return Err(misfit.error(plan.kind, key));
            }
            Ok(Attempt::NoQuorum { granted, needed }) => {
                return Err(LockError::QuorumNotReached {
                    key: key.as_str().to_owned(),
                    granted,
                    needed,
                });
            }
        };
        if plan.min_replicas > 0 {
            // Within the caller's deadline too: replicas that confirm after it are too late.
            // The still-armed guard takes the grant back in the background if the take-back
            // failed, if the deadline came first, or if this future is dropped meanwhile.
            let confirm =
                Box::pin(self.confirm_or_take_back(key, redis_key, lease, plan.min_replicas));
            match within(ask.deadline, confirm).await {
                None => return Ok(Attempted::Unanswered),
                Some(Err((e, taken_back))) => {
                    orphan.armed = !taken_back;
                    return Err(e);
                }
                Some(Ok(())) => {}
            }
        }
        // A grant confirmed after its lease could have ended (a stalled process, a slow
        // network) is not handed out: the lock may be another holder's by now, and this one
        // would run unprotected with `lost()` silent. The still-armed orphan guard releases
        // it in case it is still ours; a waiter retries within its budget.
        if Instant::now() >= sent_at + granted {
            return Err(LockError::Timeout {
                operation: Operation::Acquire,
                timeout: granted,
            });
        }
        orphan.armed = false;
        drop(orphan);
        let grant = Grant {
            token,
            fence,
            sent_at,
            lease: granted,
            // A caller that would not wait takes a key that nobody waits for, most often.
            behind: if ask.waiting {
                Behind::waiters(fence.is_some())
            } else {
                Behind::Nobody
            },
        };
        Ok(Attempted::Granted(self.hold(key, redis_key, plan, grant)))
    }

    /// A lock a release handed to a waiter of this client, named in its announcement: the
    /// lease was set after `since` (the waiter's last check found another holder), for
    /// `lease`. `None` when too little of it is left to count on, or when the commands it
    /// needs do not answer by `deadline`: the waiter then asks Redis (and its ticket, if it
    /// gives up, hands the lock on). With `min_replicas`, the grant is first written again
    /// from this client's connection (an extend to the full ttl) so that `WAIT` covers it,
    /// and confirmed like any other; without renewal, the short handoff lease is extended to
    /// the ttl the same way.
    pub(crate) async fn adopt(
        self: &Arc<Self>,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        grant: Grant,
        deadline: Instant,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let left = (grant.sent_at + grant.lease).saturating_duration_since(Instant::now());
        if left < grant.lease / 2 {
            return Ok(None);
        }
        if plan.min_replicas == 0 && (plan.renew || grant.lease >= plan.ttl) {
            return Ok(self.hold_if_current(key, redis_key, plan, grant));
        }
        // Boxed: a rare path, whose commands' state would ride inline in every waiter.
        let rewritten = Box::pin(self.rewrite_handoff(key, redis_key, plan, grant));
        match within(Some(deadline), rewritten).await {
            Some(Ok(Some(grant))) => Ok(self.hold_if_current(key, redis_key, plan, grant)),
            Some(Ok(None)) | None => Ok(None),
            Some(Err(e)) => Err(e),
        }
    }

    /// A handed lock's lease written again to the full ttl from this client (and, with
    /// `min_replicas`, confirmed): the grant to hold, or `None` when it is no longer ours.
    async fn rewrite_handoff(
        self: &Arc<Self>,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        grant: Grant,
    ) -> Result<Option<Grant>, LockError> {
        let lease = Lease {
            kind: plan.kind,
            key: redis_key,
            token: &grant.token,
            ttl: plan.ttl,
        };
        let sent_at = Instant::now();
        if !self.backend.extend(lease).await? {
            return Ok(None);
        }
        // A grant not taken back is left to the waiter's ticket, which withdraws it.
        if plan.min_replicas > 0
            && let Err((e, _)) = self
                .confirm_or_take_back(key, redis_key, lease, plan.min_replicas)
                .await
        {
            return Err(e);
        }
        Ok(Some(Grant {
            sent_at,
            lease: plan.ttl,
            ..grant
        }))
    }

    /// A hold of `grant`, unless its lease may have ended meanwhile (as for an attempt: such
    /// a grant is not handed out).
    fn hold_if_current(
        self: &Arc<Self>,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        grant: Grant,
    ) -> Option<Arc<Hold>> {
        if Instant::now() >= grant.sent_at + grant.lease {
            return None;
        }
        Some(self.hold(key, redis_key, plan, grant))
    }

    /// A hold another process handed over ([`Hold::hand_over`]): in one step its lease,
    /// still `token`'s, is set to the plan's ttl and given a token of this client in its
    /// place (so `token` owns nothing any more: a second take-over of it finds nothing), then
    /// watched from now on like any grant. [`LockError::Lost`] when it is no longer
    /// `token`'s.
    pub(crate) async fn take_over(
        self: &Arc<Self>,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        token: String,
        fence: Option<u64>,
    ) -> Result<Arc<Hold>, LockError> {
        let sent_at = Instant::now();
        let lease = Lease {
            kind: plan.kind,
            key: redis_key,
            token: &token,
            ttl: plan.ttl,
        };
        let successor = self.token_for(&LeasePlan {
            beside_of: None,
            ..plan
        });
        if !self.backend.succeed(lease, &successor).await? {
            return Err(LockError::Lost {
                key: key.as_str().to_owned(),
            });
        }
        let grant = Grant {
            token: successor,
            fence,
            sent_at,
            lease: plan.ttl,
            behind: Behind::waiters(fence.is_some()),
        };
        Ok(self.hold(key, redis_key, plan, grant))
    }

    /// A new hold, watched from now on.
    fn hold(
        self: &Arc<Self>,
        key: &LockKey,
        redis_key: &str,
        plan: LeasePlan,
        grant: Grant,
    ) -> Arc<Hold> {
        let hold = Hold::new(self.clone(), key.clone(), redis_key.to_owned(), grant, plan);
        self.counters.add(Count::Acquired, 1);
        self.watchdog.watch(self, &hold);
        self.card.wake(self);
        crate::util::trace::debug_event!(key = key.as_str(), fence = ?hold.fence(), "rlock: acquired");
        hold
    }

    /// Waits until `replicas` replicas confirm the grant of `lease`; when they do not, the
    /// grant does not count and is taken back at once. The error comes with whether the
    /// take-back reached Redis. (Callers box it: it is a rare path, and two commands' state
    /// inline would double the size of every attempt's future.)
    async fn confirm_or_take_back(
        &self,
        key: &LockKey,
        redis_key: &str,
        lease: Lease<'_>,
        replicas: u32,
    ) -> Result<(), (LockError, bool)> {
        let Err(e) = self.confirm_replicas(key, lease, replicas).await else {
            return Ok(());
        };
        let taken_back = self.backend.release(lease, Behind::waiters(false)).await;
        if matches!(taken_back, Ok(true)) {
            self.released(redis_key, Count::OrphanReleased);
        }
        Err((e, taken_back.is_ok()))
    }

    /// Waits until `needed` replicas confirm the grant of `lease`.
    async fn confirm_replicas(
        &self,
        key: &LockKey,
        lease: Lease<'_>,
        needed: u32,
    ) -> Result<(), LockError> {
        match self.backend.confirm_replicas(lease, needed).await? {
            acked if acked >= needed => Ok(()),
            acked => Err(LockError::NotReplicated {
                key: key.as_str().to_owned(),
                acked,
                needed,
            }),
        }
    }

    /// A release of ours deleted `redis_key`.
    fn released(&self, redis_key: &str, count: Count) {
        self.queues.released_here(redis_key);
        self.counters.add(count, 1);
        crate::util::trace::debug_event!(key = redis_key, "rlock: released");
    }
}

/// `future`'s output, or `None` when `deadline` (if any) comes first.
pub(crate) async fn within<F: Future>(deadline: Option<Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

/// Sends a compare-and-delete again in the background when dropped armed: an acquisition or
/// release whose reply never came (timeout, error, cancelled caller) may still be carried out
/// or not, so the delete (which can remove nothing but ours) is retried a few times, also
/// after a "not ours" for an acquisition, whose `SET` may land after the first delete, and
/// after an "ours" for a waiter's, whose token a release may have handed the lock first.
pub(crate) struct Resend<'a> {
    engine: &'a Arc<Engine>,
    kind: Kind,
    redis_key: &'a str,
    token: &'a str,
    /// Counted as a hold's release, or as an orphan acquisition's.
    count: Count,
    /// What the hold's release expected behind it (see [`LeaseStore::release`]).
    behind: Behind,
    /// The token may also be queued in Redis: its entry is withdrawn too.
    queued: Option<QueueEntry>,
    pub(crate) armed: bool,
}

impl<'a> Resend<'a> {
    /// For a hold's release.
    pub(crate) fn release(engine: &'a Arc<Engine>, lease: Lease<'a>, behind: Behind) -> Self {
        let mut resend = Self::armed(engine, lease, Count::Released);
        resend.behind = behind;
        resend
    }

    /// For an acquisition (an orphan if its reply never comes), queued in Redis or not.
    fn orphan(engine: &'a Arc<Engine>, lease: Lease<'a>, queued: Option<QueueEntry>) -> Self {
        let mut resend = Self::armed(engine, lease, Count::OrphanReleased);
        resend.queued = queued;
        resend
    }

    // (Built field by field: struct-update syntax from another value would drop that value,
    // armed.)
    fn armed(engine: &'a Arc<Engine>, lease: Lease<'a>, count: Count) -> Self {
        Self {
            engine,
            kind: lease.kind,
            redis_key: lease.key,
            token: lease.token,
            count,
            behind: Behind::waiters(false),
            queued: None,
            armed: true,
        }
    }
}

impl Drop for Resend<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let engine = self.engine.clone();
        let (kind, key, token, count) = (
            self.kind,
            self.redis_key.to_owned(),
            self.token.to_owned(),
            self.count,
        );
        let (queued, behind) = (self.queued, self.behind);
        // One send: the token's withdrawal from the queue (which also hands on a lock handed
        // to it), or its release.
        let send = move || {
            let (engine, key, token) = (engine.clone(), key.clone(), token.clone());
            async move {
                let released = match queued {
                    Some(entry) => {
                        let lease = Lease {
                            kind: entry.kind,
                            key: &key,
                            token: &token,
                            ttl: entry.ttl,
                        };
                        engine.backend.withdraw(lease, entry.fenced).await
                    }
                    None => {
                        let lease = Lease {
                            kind,
                            key: &key,
                            token: &token,
                            ttl: Duration::ZERO,
                        };
                        engine.backend.release(lease, behind).await
                    }
                };
                if let Ok(true) = released {
                    engine.released(&key, count);
                }
                released
            }
        };
        // Once behind the call it cleans up, on that call's connection: a waiter's check in
        // still on its way there runs first, however long the network holds it back.
        let behind = send();
        CallerConnection::spawn_behind_caller(async move {
            let _ = behind.await;
        });
        crate::util::background::spawn(async move {
            let started = Instant::now();
            // When Redis first answered that the token is not (or no longer) there.
            let mut answered = None;
            for attempt in 1.. {
                if attempt > 1 {
                    tokio::time::sleep(backoff(ORPHAN_RETRY_MIN, ORPHAN_RETRY_MAX, attempt - 1))
                        .await;
                }
                let released = send().await;
                match released {
                    Ok(true) => {
                        // A fresh token is granted by its own attempt alone: that one landed.
                        // A waiter's token may instead have been handed the lock by a release
                        // while its attempt is still on its way (on the caller's connection,
                        // whose own send covers that, unless it is gone), to take the lock
                        // afresh after this withdrawal.
                        if queued.is_none() {
                            return;
                        }
                    }
                    // A release's first send landed.
                    Ok(false) if matches!(count, Count::Released) => return,
                    Ok(false) | Err(_) => {}
                }
                // An acquisition's script may yet run: sent on another connection, or on one
                // that was cut, it can wait in Redis's input (a stopped Redis runs it when it
                // resumes, at about the time of the first answer here). Once Redis has
                // answered for a while, it has run or never will.
                if released.is_ok() {
                    let first = *answered.get_or_insert_with(Instant::now);
                    if first.elapsed() >= ORPHAN_SETTLE {
                        return;
                    }
                }
                // Redis down for longer than any stop worth waiting out: a restart lost the
                // `SET` with everything else.
                if started.elapsed() >= ORPHAN_HORIZON {
                    return;
                }
            }
        });
    }
}
