//! The watchdog: one task per client that keeps every held lease alive and notices losses.
//!
//! Each lease is renewed about every ttl/3. To batch, a round renews every lease due within
//! the next ttl/6 too, in calls of up to [`BATCH`] keys (Redisson renews 100 per call), all
//! sent at once, so that thousands of locks cost a few dozen commands per period. The task
//! also watches deadlines: a lease whose last confirmed renewal is a full ttl old, with no
//! renewal on its way, is marked lost (Redis has been unreachable too long, or renewal is
//! off), and a lease past its
//! `max_hold` is marked lost and released. Times are measured from when a request was *sent*,
//! so the client's idea of the lease never outlives Redis's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::{ClientShared, LockClient};
use crate::guard::HeldLock;
use crate::metrics::Count;

/// Most keys renewed by one script call.
pub(crate) const BATCH: usize = 200;

static NEXT_LEASE_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh identity for a hold, unique in the process.
pub(crate) fn next_lease_id() -> u64 {
    NEXT_LEASE_ID.fetch_add(1, Ordering::Relaxed)
}

/// How a hold is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeasePlan {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) fenced: bool,
}

#[derive(Debug)]
struct Lease {
    lock: Weak<HeldLock>,
    ttl: Duration,
    renew: bool,
    /// When the lease ends unless renewed, as far as we can prove.
    expires: Instant,
    /// When to renew next.
    renew_at: Instant,
    hold_until: Option<Instant>,
    /// A renewal is on its way (don't send another): when it was sent, and with what lease.
    in_flight: Option<(Instant, Duration)>,
    /// Bumped by every manual `extend`, so a renewal that overlapped one can tell.
    extensions: u64,
}

impl Lease {
    /// A renewal sent at `sent_at` with lease `ttl`, while `extensions` was as given, came
    /// back confirmed.
    fn renewed(&mut self, sent_at: Instant, ttl: Duration, extensions: u64, now: Instant) {
        self.in_flight = None;
        if extensions == self.extensions {
            self.expires = sent_at + ttl;
            self.renew_at = sent_at + self.ttl / 3;
        } else {
            // A manual extend ran while this renewal was on its way, and which of the two
            // reached Redis last is unknown: keep the earlier expiry, and renew at once so
            // that the extended lease is what Redis holds.
            self.expires = self.expires.min(sent_at + ttl);
            self.renew_at = now;
        }
    }

    /// The next moment the watchdog must look at this lease, if any. While a renewal is in
    /// flight only the `max_hold` cap is, since the renewal's outcome wakes the watchdog.
    fn next_event(&self) -> Option<Instant> {
        let due = if self.in_flight.is_some() {
            None
        } else if self.renew {
            Some(self.expires.min(self.renew_at))
        } else {
            Some(self.expires)
        };
        match (due, self.hold_until) {
            (Some(due), Some(cap)) => Some(due.min(cap)),
            (due, cap) => due.or(cap),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Leases {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<u64, Lease>,
    /// Whether a watchdog task is alive for this client.
    running: bool,
    /// When the watchdog will look next; it is woken early only for a lease due before.
    next_pass: Option<Instant>,
}

impl State {
    /// Whether a lease whose next event is `at` needs the watchdog sooner than planned.
    fn needs_earlier_pass(&self, at: Instant) -> bool {
        self.next_pass.is_none_or(|planned| at < planned)
    }
}

impl Leases {
    fn state(&self) -> MutexGuard<'_, State> {
        // Updates are single inserts, removals or field writes: a poisoned map is intact.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts watching a hold granted by a request sent at `sent_at`.
    pub(crate) fn watch(
        &self,
        client: &LockClient,
        lock: &Arc<HeldLock>,
        plan: LeasePlan,
        sent_at: Instant,
    ) {
        let lease = Lease {
            lock: Arc::downgrade(lock),
            ttl: plan.ttl,
            renew: plan.renew,
            expires: sent_at + plan.ttl,
            renew_at: sent_at + plan.ttl / 3,
            // A cap too far to represent is no cap.
            hold_until: plan.max_hold.and_then(|cap| sent_at.checked_add(cap)),
            in_flight: None,
            extensions: 0,
        };
        let next_event = lease.next_event();
        let (start, wake) = {
            let mut state = self.state();
            let wake = next_event.is_some_and(|at| state.needs_earlier_pass(at));
            state.leases.insert(lock.lease_id(), lease);
            (!std::mem::replace(&mut state.running, true), wake)
        };
        if start {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(watchdog(client.clone()));
                }
                // Acquiring is async, so a runtime is there; if not, nothing can renew.
                Err(_) => self.state().running = false,
            }
        } else if wake {
            self.changed.notify_one();
        }
    }

    /// The hold was extended by hand to `ttl` by a request sent at `sent_at`.
    pub(crate) fn extended(&self, lease_id: u64, ttl: Duration, sent_at: Instant) {
        let wake = {
            let mut state = self.state();
            let Some(lease) = state.leases.get_mut(&lease_id) else {
                return;
            };
            lease.ttl = ttl;
            lease.extensions += 1;
            // Redis now holds this lease, unless a renewal still on its way lands after it
            // with the shorter lease it carries.
            lease.expires = match lease.in_flight {
                Some((renew_sent, renew_ttl)) => (sent_at + ttl).min(renew_sent + renew_ttl),
                None => sent_at + ttl,
            };
            lease.renew_at = sent_at + ttl / 3;
            let next_event = lease.next_event();
            next_event.is_some_and(|at| state.needs_earlier_pass(at))
        };
        if wake {
            self.changed.notify_one();
        }
    }

    /// Stops watching a hold (it was released).
    pub(crate) fn forget(&self, lease_id: u64) {
        self.state().leases.remove(&lease_id);
    }
}

/// Clears `running` if the task is dropped with its runtime, so the next hold restarts it.
struct Running {
    shared: Arc<ClientShared>,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            self.shared.leases.state().running = false;
        }
    }
}

/// One pass's findings, gathered under the lock and acted on after it.
/// One lease to renew, and what it looked like when the renewal was sent.
#[derive(Debug, Clone)]
pub(crate) struct Renewal {
    lease_id: u64,
    pub(crate) lock: Arc<HeldLock>,
    pub(crate) ttl: Duration,
    extensions: u64,
}

#[derive(Default)]
struct Pass {
    renew: Vec<Renewal>,
    expired: Vec<Arc<HeldLock>>,
    capped: Vec<Arc<HeldLock>>,
    next: Option<Instant>,
}

async fn watchdog(client: LockClient) {
    let shared = client.shared().clone();
    let mut running = Running {
        shared: shared.clone(),
        armed: true,
    };
    loop {
        let now = Instant::now();
        let pass = {
            let mut state = shared.leases.state();
            if state.leases.is_empty() {
                // Cleared under the same lock `watch` checks, so a hold registered right
                // after this starts a new task.
                state.running = false;
                running.armed = false;
                return;
            }
            let pass = survey(&mut state, now);
            state.next_pass = pass.next;
            pass
        };
        for lock in &pass.expired {
            lock.mark_lost();
        }
        for lock in pass.capped {
            lock.mark_lost();
            client.release_in_background(lock.redis_key().to_owned(), lock.token().to_owned());
        }
        for chunk in pass.renew.chunks(BATCH) {
            tokio::spawn(renew_batch(client.clone(), chunk.to_vec(), now));
        }
        let changed = shared.leases.changed.notified();
        match pass.next {
            Some(next) => {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = changed => {}
                }
            }
            None => changed.await,
        }
    }
}

/// Sorts every lease into renew-now, expired, capped or later, removing the finished ones.
fn survey(state: &mut State, now: Instant) -> Pass {
    let mut pass = Pass::default();
    state.leases.retain(|&id, lease| {
        let Some(lock) = lease.lock.upgrade() else {
            return false;
        };
        if lock.is_lost() {
            return false;
        }
        if lease.hold_until.is_some_and(|cap| cap <= now) {
            pass.capped.push(lock);
            return false;
        }
        // A renewal in flight decides for itself: if it finds our token, the key never
        // expired (nobody else has the token), and if it fails, the lease is lost on the next
        // pass. So a slow reply delays the verdict by at most the command timeout.
        if lease.expires <= now && lease.in_flight.is_none() {
            pass.expired.push(lock);
            return false;
        }
        if lease.renew && lease.in_flight.is_none() && lease.renew_at <= now + lease.ttl / 6 {
            lease.in_flight = Some((now, lease.ttl));
            pass.renew.push(Renewal {
                lease_id: id,
                lock,
                ttl: lease.ttl,
                extensions: lease.extensions,
            });
        }
        if let Some(next) = lease.next_event() {
            pass.next = Some(pass.next.map_or(next, |n| n.min(next)));
        }
        true
    });
    pass
}

/// Renews one batch and records the outcome of each lease.
async fn renew_batch(client: LockClient, batch: Vec<Renewal>, sent_at: Instant) {
    let result = client.renew_raw(&batch).await;
    let shared = client.shared();
    let mut lost = Vec::new();
    let mut wake = false;
    {
        let mut state = shared.leases.state();
        match &result {
            Ok(renewed) => {
                let mut earliest: Option<Instant> = None;
                let now = Instant::now();
                for (renewal, &ok) in batch.iter().zip(renewed) {
                    if ok {
                        if let Some(lease) = state.leases.get_mut(&renewal.lease_id) {
                            lease.renewed(sent_at, renewal.ttl, renewal.extensions, now);
                            if let Some(next) = lease.next_event() {
                                earliest = Some(earliest.map_or(next, |e| e.min(next)));
                            }
                        }
                    } else if state.leases.remove(&renewal.lease_id).is_some() {
                        // (A hold released while its renewal was on its way is gone from the
                        // map and was not lost.)
                        lost.push(renewal.lock.clone());
                    }
                }
                // The watchdog planned its next pass while these were in flight, without
                // their next renewal; make sure it comes back in time for it.
                if let Some(at) = earliest
                    && state.needs_earlier_pass(at)
                {
                    state.next_pass = None;
                    wake = true;
                }
            }
            Err(_) => {
                // Try again after a pause (past the early-renewal window, which would
                // otherwise resend at once); the lease's deadline decides when it is lost.
                let now = Instant::now();
                for renewal in &batch {
                    if let Some(lease) = state.leases.get_mut(&renewal.lease_id) {
                        lease.in_flight = None;
                        let pause = (lease.ttl / 10).min(Duration::from_millis(500));
                        lease.renew_at = now + lease.ttl / 6 + pause;
                    }
                }
                // The retries are due before whatever the watchdog planned.
                state.next_pass = None;
                wake = true;
            }
        }
    }
    if wake {
        shared.leases.changed.notify_one();
    }
    match result {
        Ok(renewed) => {
            let n = renewed.iter().filter(|&&ok| ok).count();
            shared.counters.add(Count::Renewed, n as u64);
            crate::trace::debug_event!(renewed = n, lost = lost.len(), "rlock: leases renewed");
        }
        Err(e) => {
            shared.counters.add(Count::RenewFailure, 1);
            crate::trace::warn_event!(error = %e, leases = batch.len(), "rlock: lease renewal failed");
        }
    }
    for lock in lost {
        lock.mark_lost();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(now: Instant) -> Lease {
        Lease {
            lock: Weak::new(),
            ttl: Duration::from_secs(3),
            renew: true,
            expires: now + Duration::from_secs(3),
            renew_at: now + Duration::from_secs(1),
            hold_until: None,
            in_flight: None,
            extensions: 0,
        }
    }

    #[test]
    fn an_extend_overlapping_a_renewal_keeps_the_earlier_expiry() {
        let t0 = Instant::now();
        let leases = Leases::default();
        let mut l = lease(t0);
        // The watchdog sent a 3 s renewal at t0 + 1 s; then the user extends to 60 s.
        let renewal_sent = t0 + Duration::from_secs(1);
        l.in_flight = Some((renewal_sent, Duration::from_secs(3)));
        leases.state().leases.insert(1, l);
        leases.extended(1, Duration::from_secs(60), renewal_sent);
        {
            let state = leases.state();
            let l = &state.leases[&1];
            // The renewal may land last and cut the lease back to 3 s.
            assert_eq!(l.expires, renewal_sent + Duration::from_secs(3));
            assert!(l.in_flight.is_some(), "the renewal is still on its way");
        }
        // It comes back confirmed: the earlier expiry stays, and the next renewal is due now.
        let now = t0 + Duration::from_millis(1100);
        let mut state = leases.state();
        let l = state.leases.get_mut(&1).unwrap();
        l.renewed(renewal_sent, Duration::from_secs(3), 0, now);
        assert_eq!(l.expires, renewal_sent + Duration::from_secs(3));
        assert_eq!(l.renew_at, now);
        assert_eq!(l.ttl, Duration::from_secs(60));
    }

    #[test]
    fn a_plain_renewal_moves_the_expiry() {
        let t0 = Instant::now();
        let mut l = lease(t0);
        let sent = t0 + Duration::from_secs(1);
        l.in_flight = Some((sent, Duration::from_secs(3)));
        l.renewed(sent, Duration::from_secs(3), 0, sent);
        assert_eq!(l.expires, sent + Duration::from_secs(3));
        assert_eq!(l.renew_at, sent + Duration::from_secs(1));
        assert!(l.in_flight.is_none());
    }
}
