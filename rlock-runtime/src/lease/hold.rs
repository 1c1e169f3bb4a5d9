//! One hold of one key: the only owner of its lease's state.
//!
//! ```text
//!            renewal sent ──► Renewing ──► reply ──┐
//!           ╱                                      ▼
//! acquired ─► Held ◄────────────────────────── (back to Held)
//!           ╲ extend sent ──► Extending ──► reply ─┘
//!  Held ──release──► Releasing ──► Released | Lost
//!  Held ──token gone, lease ended unproven, max_hold──► Lost
//! ```
//!
//! At most one renewal or extend is in flight, and it remembers the ttl it asked for. The
//! client's expiry, [`State::expires`], is always a lower bound of Redis's: it moves forward
//! only when a reply proves the key was ours when the request was *sent* plus the lease it
//! set, less a margin ([`lease_margin`]); an extend counts from the moment it is sent (it may
//! shorten the lease); an extend whose reply never came may still land, so its ttl caps every
//! later estimate. Renewals never shorten a lease in Redis (the renew script only lengthens),
//! so a late renewal cannot undo an extend. When the lower bound passes, the hold is lost:
//! `lost()` fires before any other client can have been granted the key, whether or not a
//! renewal is still on its way.
//!
//! The watchdog, the guard and `with_lock` call these methods; nobody else touches the state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::{Engine, Grant, LeasePlan, Resend};
use crate::backend::{Behind, Kind, Lease, LeaseStore};
use crate::error::LockError;
use crate::key::LockKey;
use crate::metrics::Count;
use crate::metrics::export::Label;
use crate::util::fence::Fence;
use crate::util::stripe::Numbers;
use crate::util::token::Token;
use crate::util::tuning::{lease_margin, renew_after, renew_retry, renew_window};

/// Hold ids, drawn per thread (every acquisition takes one).
static HOLD_IDS: Numbers = Numbers::new();

/// Where a hold is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Ours, as far as the client can prove.
    Held,
    /// The last guard asked for the release; its reply is on its way.
    Releasing,
    /// Released by its owner.
    Released,
    /// Known lost: `lost()` has fired.
    Lost,
}

/// A request that may change the lease in Redis, on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    Renewal { sent_at: Instant, ttl: Duration },
    Extend { sent_at: Instant, ttl: Duration },
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// The lease renewals ask for (the last confirmed `extend`, else the acquired one).
    ttl: Duration,
    /// The lease last set in Redis: the ttl, or a shorter handoff lease until the first
    /// renewal. Renewals may go out early by a share of it.
    lease: Duration,
    renew: bool,
    /// Lower bound of when Redis ends the lease.
    expires: Instant,
    /// When the next renewal is due.
    renew_at: Instant,
    /// Consecutive failed renewals (0: the next one may go out early to share a batch).
    renew_failures: u32,
    /// `max_hold`: when the hold ends whatever happens.
    hold_until: Option<Instant>,
    /// `min_hold` (or a later `extend_min_hold`): a release before then leaves the key taken
    /// until then.
    keep_until: Option<Instant>,
    in_flight: Option<InFlight>,
    /// The shortest ttl of an extend whose reply never came: it may land at any time.
    unsettled_extend: Option<Duration>,
    /// How late the client's timers may fire (its [`Lateness`](crate::util::lateness::Lateness)
    /// allowance when a reply was last counted): the margin grows by it, and renewals go out
    /// as much earlier.
    lateness: Duration,
}

impl State {
    /// The lease that can be counted on when a request asking `ttl` is applied.
    fn countable(&self, ttl: Duration) -> Duration {
        self.unsettled_extend.map_or(ttl, |u| u.min(ttl))
    }

    /// The lower bound of the expiry set by a request sent at `sent_at` asking `ttl`: less
    /// the margin for clock drift, and for how late this process's timers fire (up to a
    /// quarter of the lease: beyond that the process is stalled, which no margin covers).
    fn counted_until(&self, sent_at: Instant, ttl: Duration) -> Instant {
        let ttl = self.countable(ttl);
        let margin = lease_margin(ttl) + self.lateness.min(ttl / 4);
        sent_at + ttl.saturating_sub(margin)
    }

    /// When a renewal of a lease of `ttl` set by a request sent at `sent_at` is due, before
    /// the timers' lateness is counted (see [`renewal`](Self::renewal)): a third of the lease
    /// on.
    fn renewal_due(&self, sent_at: Instant, ttl: Duration) -> Instant {
        sent_at + renew_after(ttl)
    }

    /// When the next renewal may go out to share a batch, and when it is due, if one may go.
    fn renewal(&self) -> Option<(Instant, Instant)> {
        if self.phase != Phase::Held || !self.renew || self.in_flight.is_some() {
            return None;
        }
        // A retry after a failure waits for its own moment; a regular renewal may go early,
        // and is due earlier by as much as the timers run late, but never before the early
        // window opens (half a third of the lease after the last renewal was sent): brought
        // forward any further, each renewal would go out as soon as the last one returned.
        let (window, advance) = if self.renew_failures == 0 {
            let window = renew_window(self.countable(self.lease));
            (window, self.lateness.min(window))
        } else {
            (Duration::ZERO, Duration::ZERO)
        };
        let early = self.renew_at.checked_sub(window).unwrap_or(self.renew_at);
        let due = self.renew_at.checked_sub(advance).unwrap_or(self.renew_at);
        Some((early, due))
    }

    /// The next moment the watchdog must look at this hold.
    fn next_event(&self) -> Option<Instant> {
        if self.phase != Phase::Held {
            return None;
        }
        let due = self.renewal().map(|(_, due)| due);
        [Some(self.expires), self.hold_until, due]
            .into_iter()
            .flatten()
            .min()
    }
}

/// What the watchdog must do with a hold now.
#[derive(Debug)]
pub(crate) enum Due {
    /// Nothing until this moment (or never).
    Later(Option<Instant>),
    /// Renew now, asking for this lease; look again at the given moment.
    Renew(Duration, Option<Instant>),
    /// Its lease can no longer be proven: it was marked lost.
    Lost,
    /// `max_hold` passed: it was marked lost and must be released.
    Capped,
    /// Released or lost: stop watching.
    Done,
}

#[derive(Debug)]
pub(crate) struct Hold {
    id: u64,
    engine: Arc<Engine>,
    kind: Kind,
    key: LockKey,
    redis_key: String,
    token: String,
    fence: Option<Fence>,
    /// What its release expects behind it.
    behind: Behind,
    /// Its label in exported metrics, and when it was granted (for its hold time).
    label: Label,
    granted_at: Instant,
    /// Guards alive for this hold; the one that takes it to zero releases.
    guards: AtomicUsize,
    state: Mutex<State>,
    /// Wakes every waiter of `lost()` when the hold is lost. (Kept inline: unlike a channel,
    /// it costs no allocation per hold.)
    lost: Notify,
    /// Woken when an in-flight request settles (an extend waits for a renewal).
    settled: Notify,
}

impl Hold {
    /// A hold from `grant`: its lease runs from `grant.sent_at` (or later) for `grant.lease`
    /// (the plan's ttl, or less for a lock handed on by a release); renewals ask for the
    /// plan's ttl.
    pub(crate) fn new(
        engine: Arc<Engine>,
        key: LockKey,
        redis_key: String,
        grant: Grant,
        plan: LeasePlan,
    ) -> Arc<Self> {
        let Grant {
            token,
            fence,
            sent_at,
            lease,
            behind,
        } = grant;
        let fence = fence.map(Fence);
        let mut state = State {
            phase: Phase::Held,
            ttl: plan.ttl,
            renew: plan.renew,
            expires: sent_at,
            lease,
            renew_at: sent_at,
            renew_failures: 0,
            // A cap too far to represent is no cap.
            hold_until: plan.max_hold.and_then(|cap| sent_at.checked_add(cap)),
            // From now, when the grant's reply is in: never before the grant itself.
            keep_until: plan
                .min_hold
                .and_then(|floor| Instant::now().checked_add(floor)),
            in_flight: None,
            unsettled_extend: None,
            lateness: engine.lateness.allowance(),
        };
        state.renew_at = state.renewal_due(sent_at, lease);
        state.expires = state.counted_until(sent_at, lease);
        Arc::new(Self {
            id: HOLD_IDS.next(),
            engine,
            kind: plan.kind,
            key,
            redis_key,
            token,
            fence,
            behind,
            label: plan.metrics_label(),
            granted_at: sent_at,
            guards: AtomicUsize::new(1),
            state: Mutex::new(state),
            lost: Notify::new(),
            settled: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is a few field writes with no call that can panic between them.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn client_id(&self) -> Uuid {
        self.engine.id()
    }

    pub(crate) fn key(&self) -> &LockKey {
        &self.key
    }

    /// What it leases.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn redis_key(&self) -> &str {
        &self.redis_key
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn fence(&self) -> Option<Fence> {
        self.fence
    }

    /// The engine that holds it.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The plan of a lease of this hold's key as `kind` taken beside it: a read beside
    /// this write hold (a downgrade), or a write beside this upgradeable read (an upgrade,
    /// always fenced); this hold's ttl, renewal and cap.
    pub(crate) fn beside_plan(&self, kind: Kind) -> LeasePlan {
        let state = self.state();
        LeasePlan {
            kind,
            ttl: state.ttl,
            renew: state.renew,
            max_hold: state
                .hold_until
                .map(|cap| cap.saturating_duration_since(Instant::now())),
            min_hold: None,
            fenced: kind == Kind::Write,
            min_replicas: 0,
            fair: false,
            label: self.label.lock,
            beside_of: Token::parse(&self.token).map(|token| token.number),
        }
    }

    /// When its acquire request was sent: the grant came no earlier.
    pub(crate) fn granted_at(&self) -> Instant {
        self.granted_at
    }

    /// The next moment the watchdog must look at this hold.
    pub(crate) fn next_event(&self) -> Option<Instant> {
        self.state().next_event()
    }

    /// Whether the hold is lost. The clock decides as well as the watchdog: when the lower
    /// bound of the lease's end has passed, the hold is lost now, even if the watchdog has not
    /// run yet (this process was stopped past the lease, or its runtime was busy).
    pub(crate) fn is_lost(&self) -> bool {
        let expired = {
            let state = self.state();
            match state.phase {
                Phase::Lost => return true,
                Phase::Held => state.expires <= Instant::now(),
                _ => false,
            }
        };
        if expired {
            self.lose();
        }
        expired
    }

    /// Its lease as the backend sees it, asking for `ttl`.
    pub(crate) fn lease(&self, ttl: Duration) -> Lease<'_> {
        Lease {
            kind: self.kind,
            key: &self.redis_key,
            token: &self.token,
            ttl,
        }
    }

    pub(crate) fn lost_error(&self) -> LockError {
        LockError::Lost {
            key: self.key.as_str().to_owned(),
        }
    }

    /// Resolves once the hold is lost.
    pub(crate) async fn lost(&self) {
        loop {
            // Registered before the phase is read, so a loss after the read still wakes it.
            let notified = self.lost.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            // Also wakes by itself at the lease's lower bound, not only when the watchdog
            // tells (it may run late); a renewal meanwhile moves the bound, and it looks again.
            let held_until = {
                let state = self.state();
                (state.phase == Phase::Held).then_some(state.expires)
            };
            match held_until {
                Some(until) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(until) => {
                            self.engine.lateness.record(until, Instant::now());
                        }
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks the hold lost if it is held or being released; the first call counts it and
    /// wakes `lost()`.
    pub(crate) fn lose(&self) {
        let first = {
            let mut state = self.state();
            let live = matches!(state.phase, Phase::Held | Phase::Releasing);
            if live {
                // Counted before the loss can be seen: whoever finds the hold lost (its
                // phase, under this lock) finds it counted too.
                self.engine.counters.add(Count::Lost, 1);
                state.phase = Phase::Lost;
            }
            live
        };
        if first {
            crate::metrics::export::ended(self.label, self.granted_at, true);
            self.lost.notify_waiters();
            crate::util::trace::warn_event!(
                key = self.key.as_str(),
                fence = ?self.fence,
                "rlock: lease lost"
            );
        }
    }

    /// How many guards share this hold (1, plus one per reentry).
    pub(crate) fn guard_count(&self) -> usize {
        self.guards.load(Ordering::Acquire)
    }

    /// One more guard for this hold (reentry).
    pub(crate) fn add_guard(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// One guard fewer; `true` when it was the last, so the hold must now be released.
    pub(crate) fn drop_guard(&self) -> bool {
        self.guards.fetch_sub(1, Ordering::AcqRel) == 1
    }

    // ----- the watchdog's side -----

    /// Decides what the watchdog must do now; starts a renewal when one is due.
    pub(crate) fn survey(&self, now: Instant) -> Due {
        let due = {
            let mut state = self.state();
            if state.phase != Phase::Held {
                return Due::Done;
            }
            if state.hold_until.is_some_and(|cap| cap <= now) {
                Due::Capped
            } else if state.expires <= now {
                Due::Lost
            } else if state.renewal().is_some_and(|(early, _)| early <= now) {
                let ttl = state.ttl;
                state.in_flight = Some(InFlight::Renewal { sent_at: now, ttl });
                Due::Renew(ttl, state.next_event())
            } else {
                Due::Later(state.next_event())
            }
        };
        if matches!(due, Due::Lost | Due::Capped) {
            self.lose();
        }
        due
    }

    /// The renewal sent at `sent_at` asking `ttl` came back: `Some(ours)`, or `None` when
    /// no reply came. Returns the hold's next event.
    pub(crate) fn renewal_settled(
        &self,
        sent_at: Instant,
        ttl: Duration,
        ours: Option<bool>,
        now: Instant,
    ) -> Option<Instant> {
        let (lost, next) = {
            let mut state = self.state();
            if state.in_flight == Some(InFlight::Renewal { sent_at, ttl }) {
                state.in_flight = None;
            }
            let held = state.phase == Phase::Held;
            state.lateness = self.engine.lateness.allowance();
            match ours {
                Some(true) if held => {
                    let until = state.counted_until(sent_at, ttl);
                    // With an unsettled extend in the air, this reply's bound is the bound;
                    // otherwise the lease only grows (renewals never shorten it).
                    state.expires = if state.unsettled_extend.is_some() {
                        until
                    } else {
                        state.expires.max(until)
                    };
                    state.renew_at = state.renewal_due(sent_at, state.countable(ttl));
                    state.lease = ttl;
                    state.renew_failures = 0;
                }
                Some(false) => {}
                _ => {
                    state.renew_failures += 1;
                    state.renew_at = now + renew_retry(state.countable(state.ttl));
                }
            }
            (ours == Some(false) && held, state.next_event())
        };
        self.settled.notify_waiters();
        if lost {
            self.lose();
        }
        next
    }

    // ----- the guard's side -----

    /// Sets the lease to `ttl` from now, if still ours. Waits for a renewal on its way to
    /// settle first, so that at most one request is in flight.
    /// Gives the hold up without releasing it, for another process to take over: nothing is
    /// renewed or released from here any more. The lease renewals asked for, or `None` when
    /// the hold is no longer held (lost, or released).
    pub(crate) fn hand_over(&self) -> Option<Duration> {
        let ttl = {
            let mut state = self.state();
            if state.phase != Phase::Held || state.expires <= Instant::now() {
                return None;
            }
            state.phase = Phase::Released;
            state.ttl
        };
        self.engine.watchdog.forget(self.id);
        Some(ttl)
    }

    /// Keeps the key taken at least `at_least` from now, even when released sooner (it never
    /// shortens an earlier `min_hold`). A lost hold is [`LockError::Lost`]; one that would
    /// be kept past its `max_hold` is `InvalidConfig`.
    pub(crate) fn extend_min_hold(&self, at_least: Duration) -> Result<(), LockError> {
        let mut state = self.state();
        if state.phase != Phase::Held {
            drop(state);
            return Err(self.lost_error());
        }
        let until = Instant::now().checked_add(at_least);
        if let (Some(until), Some(cap)) = (until, state.hold_until)
            && until > cap
        {
            return Err(LockError::InvalidConfig(format!(
                "lock `{}`: min_hold extended by {at_least:?} would keep it past its max_hold, \
                 which ends it in {:?}; extend it by less, or set a longer max_hold",
                self.key,
                cap.saturating_duration_since(Instant::now())
            )));
        }
        state.keep_until = state.keep_until.max(until);
        Ok(())
    }

    pub(crate) async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let sent_at = loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            {
                let mut state = self.state();
                if state.phase != Phase::Held {
                    return Err(self.lost_error());
                }
                if state.in_flight.is_none() {
                    let now = Instant::now();
                    state.lateness = self.engine.lateness.allowance();
                    state.in_flight = Some(InFlight::Extend { sent_at: now, ttl });
                    // From now on Redis may apply it at any moment, shortening the lease.
                    let until = state.counted_until(now, ttl);
                    state.expires = state.expires.min(until);
                    break now;
                }
            }
            // The renewal is bounded by its own timeout, so this wait is too.
            settled.await;
        };
        let mut unanswered = ExtendUnanswered {
            hold: self,
            sent_at,
            ttl,
            armed: true,
        };
        let outcome = self.engine.backend.extend(self.lease(ttl)).await;
        unanswered.armed = false;
        self.extend_settled(sent_at, ttl, outcome.as_ref().ok().copied());
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.lost_error()),
            Err(e) => Err(e),
        }
    }

    /// The extend sent at `sent_at` came back (`Some(ours)`) or never will (`None`: it may
    /// still land, so its lease caps every later estimate).
    fn extend_settled(&self, sent_at: Instant, ttl: Duration, ours: Option<bool>) {
        let lost = {
            let mut state = self.state();
            if state.in_flight == Some(InFlight::Extend { sent_at, ttl }) {
                state.in_flight = None;
            }
            let held = state.phase == Phase::Held;
            state.lateness = self.engine.lateness.allowance();
            match ours {
                Some(true) if held => {
                    state.ttl = ttl;
                    state.lease = ttl;
                    // An extend sets the lease exactly (it may shorten it).
                    state.expires = state.counted_until(sent_at, ttl);
                    state.renew_at = state.renewal_due(sent_at, state.countable(ttl));
                    state.lease = ttl;
                    state.renew_failures = 0;
                }
                Some(_) => {}
                None => {
                    state.unsettled_extend = Some(state.countable(ttl));
                }
            }
            ours == Some(false) && held
        };
        self.settled.notify_waiters();
        let next = self.state().next_event();
        self.engine.watchdog.due_at(next);
        if lost {
            self.lose();
        }
    }

    /// Releases the hold: compare-and-delete of our token. `Err(Lost)` when the key was not
    /// ours any more, or the hold had already been found lost.
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        let was = {
            let mut state = self.state();
            let was = state.phase;
            if was == Phase::Held {
                state.phase = Phase::Releasing;
            }
            was
        };
        self.engine.watchdog.forget(self.id);
        if matches!(was, Phase::Releasing | Phase::Released) {
            return Ok(());
        }
        if let Some(left) = self.min_hold_left() {
            return self.release_kept(was, left).await;
        }
        // If this future is dropped while the release is on its way, or the release fails,
        // it is sent again in the background: a dropped future leaves no lock behind.
        let behind = self.behind;
        let mut unanswered = Resend::release(&self.engine, self.lease(Duration::ZERO), behind);
        let outcome = self
            .engine
            .backend
            .release(self.lease(Duration::ZERO), behind)
            .await;
        unanswered.armed = outcome.is_err();
        drop(unanswered);
        self.released(was, outcome, Freed::Yes)
    }

    /// Settles a release that Redis answered with `outcome` (`Ok(true)`: it was ours), of a
    /// hold that was `was` before, which `freed` the key or left it taken.
    fn released(
        &self,
        was: Phase,
        outcome: Result<bool, LockError>,
        freed: Freed,
    ) -> Result<(), LockError> {
        match outcome {
            Ok(true) => {
                match freed {
                    Freed::Yes => self.engine.released(&self.redis_key, Count::Released),
                    Freed::No => self.engine.counters.add(Count::Released, 1),
                }
                crate::metrics::export::ended(self.label, self.granted_at, false);
                self.finish_release();
                if was == Phase::Lost {
                    Err(self.lost_error())
                } else {
                    Ok(())
                }
            }
            Ok(false) => {
                self.lose();
                Err(self.lost_error())
            }
            Err(e) => {
                self.finish_release();
                // A hold already found lost reports that, as its docs say: the failed send
                // (retried in the background) changes nothing the caller can act on.
                if was == Phase::Lost {
                    Err(self.lost_error())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// What is left of `min_hold`, if a release now must leave the key taken (by at least a
    /// millisecond, the smallest lease Redis sets).
    fn min_hold_left(&self) -> Option<Duration> {
        let left = self
            .state()
            .keep_until?
            .saturating_duration_since(Instant::now());
        (left >= Duration::from_millis(1)).then_some(left)
    }

    /// Releases before `min_hold` has passed: the key's lease is set, if still ours, to the
    /// `left` of it, and the key ends on Redis's clock, handed to nobody. A renewal or extend
    /// on its way settles first, so that it cannot land after this and lengthen the lease
    /// again. Not resent in the background: if Redis cannot be reached, the key ends with its
    /// current lease.
    async fn release_kept(&self, was: Phase, left: Duration) -> Result<(), LockError> {
        self.in_flight_settled().await;
        let outcome = self.engine.backend.extend(self.lease(left)).await;
        self.released(was, outcome, Freed::No)
    }

    /// Returns once no renewal or extend of this hold is on its way (each is bounded by its
    /// own timeout), or at the latest when the lease it counts on ends. No new one starts
    /// once the hold is releasing.
    async fn in_flight_settled(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let expires = {
                let state = self.state();
                if state.in_flight.is_none() {
                    return;
                }
                state.expires
            };
            if tokio::time::timeout_at(expires, settled).await.is_err() {
                return;
            }
        }
    }

    /// Counts a release that deleted our lock, in the counters and the exported metrics.
    fn count_release(&self) {
        self.engine.released(&self.redis_key, Count::Released);
        crate::metrics::export::ended(self.label, self.granted_at, false);
    }

    /// A hold not yet finished is released now. One already lost stays lost: `lost()` has
    /// fired and `is_lost()` must not take it back.
    fn finish_release(&self) {
        let mut state = self.state();
        if matches!(state.phase, Phase::Held | Phase::Releasing) {
            state.phase = Phase::Released;
        }
    }

    /// Releases without waiting (the last guard was dropped, or `max_hold` passed): in process at
    /// once, otherwise on the background runtime. If even that cannot run, the lease expires.
    pub(crate) fn release_in_background(self: &Arc<Self>) {
        if let Some(memory) = self.engine.backend.in_process()
            && self.min_hold_left().is_none()
        {
            self.finish_release();
            self.engine.watchdog.forget(self.id);
            if memory.release_now(self.kind(), &self.redis_key, &self.token) {
                self.count_release();
            }
            return;
        }
        let hold = self.clone();
        crate::util::background::spawn(async move {
            let _ = hold.release().await;
        });
    }
}

/// Whether a release freed the key, for waiters to take (or, for `min_hold`, left it taken
/// until it ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freed {
    Yes,
    No,
}

/// Marks an extend unanswered when its future is dropped before the reply (or it failed).
struct ExtendUnanswered<'a> {
    hold: &'a Hold,
    sent_at: Instant,
    ttl: Duration,
    armed: bool,
}

impl Drop for ExtendUnanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.hold.extend_settled(self.sent_at, self.ttl, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::{AttemptAsks, Backend};

    const TTL: Duration = Duration::from_secs(3);

    /// A hold of `k` (ttl 3 s, renewal on) taken at `t0` in an in-process backend, not watched
    /// by any watchdog: the test drives it.
    async fn hold(t0: Instant) -> Arc<Hold> {
        let engine = Engine::new(
            Backend::Memory(MemoryBackend::default()),
            None,
            Default::default(),
        );
        let lease = Lease {
            kind: Kind::Lock,
            key: "k",
            token: "t",
            ttl: TTL,
        };
        let ask = AttemptAsks {
            fence: false,
            remaining: false,
            queue: None,
            beside_of: None,
        };
        engine.backend.acquire(lease, ask).await.unwrap();
        let plan = LeasePlan {
            kind: Kind::Lock,
            ttl: TTL,
            renew: true,
            max_hold: None,
            min_hold: None,
            fenced: false,
            min_replicas: 0,
            fair: false,
            label: "k",
            beside_of: None,
        };
        let key = LockKey::new("k").unwrap();
        let grant = Grant {
            token: "t".into(),
            fence: None,
            sent_at: t0,
            lease: plan.ttl,
            behind: Behind::Nobody,
        };
        Hold::new(engine, key, "k".into(), grant, plan)
    }

    fn expires(hold: &Hold) -> Instant {
        hold.state().expires
    }

    fn bound(sent: Instant, ttl: Duration) -> Instant {
        sent + ttl - lease_margin(ttl)
    }

    #[tokio::test]
    async fn an_extend_waits_for_the_renewal_on_its_way_then_counts_from_its_own_send() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        let renewal_sent = t0 + renew_after(TTL);
        assert!(matches!(hold.survey(renewal_sent), Due::Renew(TTL, _)));

        // The extend may not go out while the renewal is in flight.
        let extend = hold.extend(Duration::from_secs(60));
        tokio::pin!(extend);
        let early = tokio::time::timeout(Duration::from_millis(50), extend.as_mut()).await;
        assert!(early.is_err(), "sent while a renewal was in flight");
        assert_eq!(expires(&hold), bound(t0, TTL), "nothing changed yet");

        // The renewal comes back; then the extend is sent, answered, and sets the lease.
        hold.renewal_settled(renewal_sent, TTL, Some(true), renewal_sent);
        let sent = Instant::now();
        extend.await.unwrap();
        let e = expires(&hold);
        assert!(
            e >= bound(sent, Duration::from_secs(60))
                && e <= bound(Instant::now(), Duration::from_secs(60))
        );
        assert_eq!(hold.state().ttl, Duration::from_secs(60));
    }

    /// On a host whose timers fire 20 ms late, the lease's lower bound keeps 20 ms more
    /// margin and renewals go out 20 ms earlier, so that `lost()`, firing as late, still
    /// comes before Redis can grant the key to anyone else.
    #[tokio::test]
    async fn the_margin_and_the_renewals_follow_the_timers_lateness() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        assert_eq!(expires(&hold), bound(t0, TTL), "on time: the base margin");
        for _ in 0..100 {
            hold.engine
                .lateness
                .record(t0, t0 + Duration::from_millis(20));
        }
        let late = hold.engine.lateness.allowance();
        assert!(late >= Duration::from_millis(19), "{late:?}");
        let sent = t0 + renew_after(TTL);
        hold.state().in_flight = Some(InFlight::Renewal {
            sent_at: sent,
            ttl: TTL,
        });
        hold.renewal_settled(sent, TTL, Some(true), sent);
        let state = hold.state();
        assert_eq!(state.expires, bound(sent, TTL) - late);
        let (early, due) = state.renewal().unwrap();
        assert_eq!(due, sent + renew_after(TTL) - late);
        assert_eq!(early, sent + renew_after(TTL) - renew_window(TTL));
        drop(state);
        // However late the timers, no renewal may go out before the early window opens
        // (a renewal sent as soon as the last one returned would loop).
        for _ in 0..100 {
            hold.engine
                .lateness
                .record(t0, t0 + Duration::from_secs(10));
        }
        let sent = sent + renew_after(TTL);
        hold.state().in_flight = Some(InFlight::Renewal {
            sent_at: sent,
            ttl: TTL,
        });
        hold.renewal_settled(sent, TTL, Some(true), sent);
        let (early, due) = hold.state().renewal().unwrap();
        assert!(
            due >= early && early >= sent + renew_after(TTL) / 2,
            "{:?}",
            due - sent
        );
    }

    #[tokio::test]
    async fn a_late_renewal_reply_never_moves_the_expiry_back() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        hold.extend(Duration::from_secs(60)).await.unwrap();
        let extended = expires(&hold);
        // A renewal with the old ttl (sent before the extend, answered after it).
        hold.state().in_flight = Some(InFlight::Renewal {
            sent_at: t0,
            ttl: TTL,
        });
        hold.renewal_settled(t0, TTL, Some(true), Instant::now());
        assert_eq!(expires(&hold), extended);
    }

    #[tokio::test]
    async fn an_unanswered_extend_caps_every_later_estimate() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        // An extend to 500 ms whose reply never came: it may land at any time.
        let short = Duration::from_millis(500);
        hold.state().in_flight = Some(InFlight::Extend {
            sent_at: t0,
            ttl: short,
        });
        hold.extend_settled(t0, short, None);
        // A later renewal asking 3 s is confirmed: only 500 ms from its send can be counted on.
        let sent = t0 + Duration::from_millis(100);
        hold.state().in_flight = Some(InFlight::Renewal {
            sent_at: sent,
            ttl: TTL,
        });
        hold.renewal_settled(sent, TTL, Some(true), sent);
        assert_eq!(expires(&hold), bound(sent, short));
        assert_eq!(hold.state().renew_at, sent + renew_after(short));
    }

    #[tokio::test]
    async fn the_hold_is_lost_at_its_bound_even_with_a_renewal_in_flight() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        assert!(matches!(hold.survey(t0 + renew_after(TTL)), Due::Renew(..)));
        assert!(matches!(hold.survey(bound(t0, TTL)), Due::Lost));
        assert!(hold.is_lost());
        // Its reply, arriving late and positive, does not revive it.
        hold.renewal_settled(t0 + renew_after(TTL), TTL, Some(true), Instant::now());
        assert!(hold.is_lost());
        assert!(hold.extend(TTL).await.unwrap_err().is_lost());
    }

    #[tokio::test]
    async fn a_failed_renewal_is_retried_soon_and_a_refused_one_loses_the_hold() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        let sent = t0 + renew_after(TTL);
        assert!(matches!(hold.survey(sent), Due::Renew(..)));
        hold.renewal_settled(sent, TTL, None, sent);
        assert_eq!(hold.state().renew_at, sent + renew_retry(TTL));
        assert!(!hold.is_lost());
        let again = sent + renew_retry(TTL);
        assert!(matches!(hold.survey(again), Due::Renew(..)));
        hold.renewal_settled(again, TTL, Some(false), again);
        assert!(hold.is_lost());
        assert_eq!(hold.engine.counters.snapshot().lost, 1);
    }

    #[tokio::test]
    async fn a_loss_stays_reported_after_the_key_is_released() {
        let releasing = hold(Instant::now()).await;
        releasing.state().phase = Phase::Releasing;
        // The watchdog finds the lease unproven while the release is on its way...
        releasing.lose();
        // ...and the release, which found our token, settles afterwards.
        releasing.finish_release();
        assert!(
            releasing.is_lost(),
            "lost() fired; is_lost() must not take it back"
        );
        // The same when the last guard of a lost hold is dropped (in process: released at once).
        let dropped = hold(Instant::now()).await;
        dropped.lose();
        dropped.release_in_background();
        assert!(dropped.is_lost());
        assert_eq!(
            dropped.engine.counters.snapshot().released,
            1,
            "the key was deleted"
        );
    }

    #[tokio::test]
    async fn release_reports_a_loss_found_before_and_counts_once() {
        let t0 = Instant::now();
        let hold = hold(t0).await;
        hold.lose();
        hold.lose();
        assert!(hold.release().await.unwrap_err().is_lost());
        let m = hold.engine.counters.snapshot();
        assert_eq!(
            (m.lost, m.released),
            (1, 1),
            "the key was still ours: deleted"
        );
    }
}
