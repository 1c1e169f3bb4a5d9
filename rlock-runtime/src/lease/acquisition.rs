//! One acquisition that may wait: attempts, the queue in Redis, announcements and check
//! ins, within the caller's budget. WAITING.md is the protocol it keeps on the client's side.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Attempted, Engine, Grant, Hold, LeasePlan, Try};
use crate::backend::{Behind, Kind, LeaseStore as _, QueueCall, QueueEntry};
use crate::error::{LockError, Operation};
use crate::key::LockKey;
use crate::metrics::Count;
use crate::util::trace;
use crate::util::tuning::{
    HANDOFF_LEASE, WAIT_RETRY_MAX, WAIT_RETRY_MIN, WAITER_CHECK_INTERVAL, backoff,
};
use crate::wait::Ticket;
use crate::wait::timers::fallback_pause;

/// One acquisition, waiting within its budget.
pub(crate) struct Acquisition<'a> {
    pub(crate) engine: &'a Arc<Engine>,
    pub(crate) key: &'a LockKey,
    pub(crate) redis_key: &'a str,
    pub(crate) plan: LeasePlan,
    /// When the caller asked.
    pub(crate) started: Instant,
    /// How long it may wait.
    pub(crate) budget: Duration,
}

impl Acquisition<'_> {
    fn busy(&self) -> LockError {
        let waited = self.started.elapsed();
        self.engine.counters.add(Count::Busy, 1);
        crate::metrics::export::busy(self.plan.metrics_label(), waited);
        trace::debug_event!(key = self.key.as_str(), ?waited, "rlock: busy");
        LockError::Busy {
            key: self.key.as_str().to_owned(),
            waited,
        }
    }

    /// Takes the lock, waiting for it within the budget.
    pub(crate) async fn acquire(self) -> Result<Arc<Hold>, LockError> {
        let engine = self.engine;
        if self.budget.is_zero() {
            // One attempt, bounded by the command timeout alone.
            let once = Try {
                waiting: false,
                queue: None,
                deadline: None,
            };
            return match engine
                .attempt(self.key, self.redis_key, self.plan, once)
                .await?
            {
                Attempted::Granted(hold) => Ok(hold),
                Attempted::Busy { .. } => Err(self.busy()),
                // (Not without a deadline: the command timeout answers first.)
                Attempted::Unanswered => Err(self.unanswered()),
            };
        }
        if engine.backend.queues_in_redis() {
            self.queued().await
        } else {
            self.unqueued().await
        }
    }

    /// Waiting in the lock's queue in Redis: a release hands the lock over and names the
    /// waiter; it checks in on a timer meanwhile.
    async fn queued(self) -> Result<Arc<Hold>, LockError> {
        let engine = self.engine;
        let deadline = self.started + self.budget;
        let mut ticket = engine
            .queues
            .join(self.redis_key, engine.token_for(&self.plan));
        // When the holder's lease ends, as far as its last busy reply told.
        let mut holder_until: Option<Instant> = None;
        // Whether the waiter stands in the queue in Redis (not before its first attempt,
        // nor after an unanswered one or when the queue was full).
        let mut queued = false;
        // When the first attempt under the waiter's current token was sent: a release can
        // hand the lock to that token only afterwards, so a handed lease runs from then on at
        // the earliest. (Not the latest attempt: an announcement can be read after a later
        // attempt's answer, as when this process was stopped, and tell of a handoff older
        // than that attempt, whose lease may have ended since.)
        let mut token_since: Option<(String, Instant)> = None;
        let mut failures = 0;
        let mut last = LastAnswer::None;
        loop {
            let token = ticket.token();
            let sent_at = Instant::now();
            if token_since.as_ref().is_none_or(|(t, _)| *t != token) {
                token_since = Some((token.clone(), sent_at));
            }
            let mut queue = ticket.queue_ask(self.plan.fair, queued, sent_at);
            // After a failure, the script (which also follows a slot on the move).
            if failures > 0 && matches!(queue.call, QueueCall::Append { .. }) {
                queue.call = QueueCall::Arrive;
            }
            let attempt = Try {
                waiting: true,
                queue: Some((queue, &token)),
                deadline: Some(deadline),
            };
            ticket.queued_in_redis(QueueEntry {
                kind: self.plan.kind,
                ttl: self.plan.ttl,
                fenced: self.plan.fenced,
            });
            match engine
                .attempt(self.key, self.redis_key, self.plan, attempt)
                .await
            {
                Ok(Attempted::Granted(hold)) => {
                    if !queued {
                        ticket.granted_on_arrival();
                    }
                    return Ok(self.waited(ticket, hold));
                }
                Ok(Attempted::Busy { remaining, place }) => {
                    // From this answer alone: a deadline an earlier answer told may have
                    // passed while the holder renewed, and a waiter that kept it would check
                    // in on the pause's floor, hundreds of times a second.
                    holder_until = remaining.map(|left| sent_at + left);
                    ticket.answered(queue, sent_at, place);
                    queued = place.queued;
                    failures = 0;
                    last = LastAnswer::Busy;
                    ticket.listen();
                }
                // The budget ran out first, which changes nothing known of the lock; the
                // loop below gives up. The attempt's token is withdrawn in the background
                // (it may have queued again, or been granted), so nothing handed to it may be
                // adopted: the withdrawal hands it on.
                Ok(Attempted::Unanswered) => queued = false,
                Err(e) if e.is_backend() => {
                    self.failed(e, &mut failures, &mut last);
                    // The attempt may have landed or not: its token is withdrawn in the
                    // background, and this waiter queues again under a new one.
                    ticket.change_token(engine.token_for(&self.plan));
                    queued = false;
                }
                Err(e) => return Err(e),
            }
            loop {
                // Only a waiter standing in the queue can have been handed the lock.
                let since = token_since.as_ref().filter(|_| queued).map(|(_, at)| *at);
                if let (Some(handoff), Some(since)) = (ticket.handed(), since) {
                    let grant = Grant {
                        token: handoff.token,
                        fence: handoff.fence,
                        sent_at: since,
                        lease: self.plan.ttl.min(HANDOFF_LEASE),
                        behind: Behind::waiters(handoff.fence.is_some()),
                    };
                    match engine
                        .adopt(self.key, self.redis_key, self.plan, grant, deadline)
                        .await
                    {
                        Ok(Some(hold)) => return Ok(self.waited(ticket, hold)),
                        // Too little of the handoff lease left to count on (or a failure
                        // confirming it): the hand-off used up the waiter's entry, and the
                        // check in now takes the lock if it is still its own, or stands in
                        // the queue again.
                        Ok(None) => break,
                        Err(e) if e.is_backend() => break,
                        Err(e) => return Err(e),
                    }
                }
                let Some(pause) = pause(deadline, failures, holder_until, ticket.announced())
                else {
                    return Err(self.gave_up(last));
                };
                // A queued waiter checks in on time, whatever else it waits for.
                let pause = if queued && failures == 0 {
                    pause.min(WAITER_CHECK_INTERVAL)
                } else {
                    pause
                };
                tokio::select! {
                    () = ticket.woken() => {
                        // Handed the lock (checked above), or the key's announcements were
                        // just confirmed or lost: one may have gone unheard, so look.
                        if ticket.has_handoff() {
                            continue;
                        }
                    }
                    () = tokio::time::sleep(pause) => {}
                }
                break;
            }
        }
    }

    /// A backend failure an attempt met, which may pass: counted for the retry's backoff,
    /// traced, and kept as the last answer.
    fn failed(&self, e: LockError, failures: &mut u32, last: &mut LastAnswer) {
        *failures += 1;
        trace::debug_event!(
            key = self.key.as_str(),
            error = &e as &(dyn std::error::Error + 'static),
            "rlock: attempt failed; retrying within the wait budget"
        );
        *last = LastAnswer::Failed(e);
    }

    /// The budget ran out: `Busy` when Redis last said so, else what went wrong.
    fn gave_up(&self, last: LastAnswer) -> LockError {
        self.engine.counters.waited(self.started.elapsed());
        match last {
            LastAnswer::Busy => self.busy(),
            LastAnswer::Failed(e) => e,
            LastAnswer::None => self.unanswered(),
        }
    }

    /// No answer came within the budget: Redis is down or unreachable, not the lock busy.
    fn unanswered(&self) -> LockError {
        LockError::Timeout {
            operation: Operation::Acquire,
            timeout: self.started.elapsed(),
        }
    }

    /// Records a successful wait.
    fn waited(&self, ticket: Ticket, hold: Arc<Hold>) -> Arc<Hold> {
        ticket.leave_with_lock();
        self.engine.counters.waited(self.started.elapsed());
        hold
    }

    /// Waiting without a queue in Redis (Redlock, in process): a release wakes the first
    /// waiter of each client, which tries again.
    async fn unqueued(self) -> Result<Arc<Hold>, LockError> {
        let engine = self.engine;
        let deadline = self.started + self.budget;
        let attempt = Try {
            waiting: true,
            queue: None,
            deadline: Some(deadline),
        };
        // When the holder's lease ends, as far as its last busy reply told.
        let mut holder_until: Option<Instant> = None;
        let mut last = LastAnswer::None;
        // A request that may wait does not barge past this client's queued waiters of the
        // key (the task that just released it, looping back, would otherwise win every
        // time): it queues behind them.
        let mut try_now = !engine.queues.has_waiters(self.redis_key);
        if try_now {
            match engine
                .attempt(self.key, self.redis_key, self.plan, attempt)
                .await
            {
                Ok(Attempted::Granted(hold)) => return Ok(hold),
                Ok(Attempted::Busy { remaining, .. }) => {
                    holder_until = remaining.map(|l| Instant::now() + l);
                    last = LastAnswer::Busy;
                }
                Ok(Attempted::Unanswered) => {}
                // A backend failure (timeout, unreachable, too few masters or replicas) may
                // pass: retried below, once queued.
                Err(e) if e.is_backend() => last = LastAnswer::Failed(e),
                Err(e) => return Err(e),
            }
        }
        let ticket = engine.queues.join(self.redis_key, String::new());
        ticket.listen();
        // After joining, the head tries once its key's subscription is confirmed (which
        // wakes it) or on the short re-check timer; a release in between is not missed.
        try_now = false;
        let mut failures = 0;
        loop {
            if try_now {
                match engine
                    .attempt(self.key, self.redis_key, self.plan, attempt)
                    .await
                {
                    Ok(Attempted::Granted(hold)) => return Ok(self.waited(ticket, hold)),
                    Ok(Attempted::Busy { remaining, .. }) => {
                        holder_until = remaining.map(|l| Instant::now() + l);
                        failures = 0;
                        last = LastAnswer::Busy;
                    }
                    Ok(Attempted::Unanswered) => {}
                    Err(e) if e.is_backend() => self.failed(e, &mut failures, &mut last),
                    Err(e) => return Err(e),
                }
            }
            let Some(pause) = pause(deadline, failures, holder_until, ticket.announced()) else {
                return Err(self.gave_up(last));
            };
            tokio::select! {
                () = ticket.woken() => {}
                () = tokio::time::sleep(pause) => {}
            }
            try_now = ticket.is_head();
            if try_now {
                ticket.courtesy().await;
            }
        }
    }
}

/// What Redis last told a waiter: what it reports when its budget runs out. A dead Redis is
/// not a busy lock: `Busy` only when Redis said so, and no failure came after.
#[derive(Debug)]
enum LastAnswer {
    /// No attempt was answered.
    None,
    Busy,
    Failed(LockError),
}

/// How long a waiter sleeps before looking again (`None` once its budget is spent): a backoff
/// after `failures` failed attempts, else its fallback timer (see [`fallback_pause`]).
fn pause(
    deadline: Instant,
    failures: u32,
    holder_until: Option<Instant>,
    announced: bool,
) -> Option<Duration> {
    let now = Instant::now();
    let budget_left = deadline.saturating_duration_since(now);
    if budget_left.is_zero() {
        return None;
    }
    Some(if failures > 0 {
        backoff(WAIT_RETRY_MIN, WAIT_RETRY_MAX, failures).min(budget_left)
    } else {
        let holder_left = holder_until.map(|t| t.saturating_duration_since(now));
        fallback_pause(holder_left, announced, budget_left)
    })
}

/// A lease of `held`'s key as `kind` beside it, within `budget`: a read beside a write hold
/// (a downgrade), granted at once while the write holds, as nobody else's writer can be
/// beside it then; or the write beside an upgradeable read (an upgrade), granted once the
/// other readers are gone, before any other writer. The right to it travels with the held
/// hold, whichever task has its guard. `Lost` when that hold is lost.
pub(crate) async fn take_beside(
    held: &Arc<Hold>,
    kind: Kind,
    budget: Duration,
) -> Result<Arc<Hold>, LockError> {
    if held.is_lost() {
        return Err(LockError::Lost {
            key: held.key().as_str().to_owned(),
        });
    }
    Box::pin(
        Acquisition {
            engine: held.engine(),
            key: held.key(),
            redis_key: held.redis_key(),
            plan: held.beside_plan(kind),
            started: Instant::now(),
            budget,
        }
        .acquire(),
    )
    .await
}
