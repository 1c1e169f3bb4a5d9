//! The watchdog: one task per client, on the background runtime, that keeps every hold alive and
//! watched.
//!
//! Each lease is renewed about every ttl/3 ([`renew_after`](crate::util::tuning::renew_after)). To
//! batch, a round renews every lease due within the next ttl/6 too, in calls of up to
//! [`RENEW_BATCH`] keys, all sent at once, so thousands of locks cost a few dozen commands per
//! period. The task also watches deadlines: a hold whose lease can no longer be proven
//! ([`Hold::survey`]) is marked lost, and one past its `max_hold` is marked lost and released.
//!
//! It runs on the background runtime, not on the runtime of whoever acquired first, so a
//! runtime that ends takes no hold's renewal with it. If it cannot run at all, the holds it
//! would watch are reported lost at once.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Engine;
use super::hold::{Due, Hold};
use crate::backend::{Lease, LeaseStore};
use crate::metrics::Count;
use crate::util::tuning::{RENEW_BATCH, RENEW_REPLY_DIVISOR};

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    holds: HashMap<u64, Weak<Hold>, BuildHasherDefault<IdHasher>>,
    /// Whether the task is alive.
    running: bool,
    /// When the task plans to look next; it is woken early only for a hold due before.
    next_pass: Option<Instant>,
}

impl Watchdog {
    fn state(&self) -> MutexGuard<'_, State> {
        // Single inserts, removals and flag writes: a poisoned map is intact.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts watching `hold`, starting the task if it is not running.
    pub(crate) fn watch(&self, engine: &Arc<Engine>, hold: &Arc<Hold>) {
        let next = hold.next_event();
        // One lock for the registration and the plan (every acquisition comes here).
        let (start, wake) = {
            let mut state = self.state();
            state.holds.insert(hold.id(), Arc::downgrade(hold));
            let start = !std::mem::replace(&mut state.running, true);
            (start, !start && state.plan(next))
        };
        if start {
            let task = run(Arc::downgrade(engine), engine.watchdog.clone());
            if !crate::util::background::spawn(task) {
                self.state().running = false;
                hold.lose();
            }
        } else if wake {
            self.changed.notify_one();
        }
    }

    /// The live holds of `redis_key` (at most one per client, unless a lease was lost and
    /// the key taken again).
    pub(crate) fn holds_of(&self, redis_key: &str) -> Vec<Arc<Hold>> {
        self.state()
            .holds
            .values()
            .filter_map(Weak::upgrade)
            .filter(|hold| hold.redis_key() == redis_key)
            .collect()
    }

    /// Every live hold of the client.
    pub(crate) fn holds(&self) -> Vec<Arc<Hold>> {
        self.state()
            .holds
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Stops watching a hold (it was released).
    pub(crate) fn forget(&self, id: u64) {
        self.state().holds.remove(&id);
    }

    /// A hold's next event is now `at`: the task looks again if that is before its plan.
    pub(crate) fn due_at(&self, at: Option<Instant>) {
        if at.is_some() && self.state().plan(at) {
            self.changed.notify_one();
        }
    }
}

impl State {
    /// Moves the task's next pass to `at` if that is earlier; whether it did (the task must
    /// then be woken).
    fn plan(&mut self, at: Option<Instant>) -> bool {
        let Some(at) = at else { return false };
        let earlier = self.next_pass.is_none_or(|planned| at < planned);
        if earlier {
            self.next_pass = Some(at);
        }
        earlier
    }
}

/// Hashes a hold's id, a counter, with one multiplication: ids are not chosen by anyone who
/// could aim them at one bucket, and SipHash cost every acquisition and release a few
/// hundred instructions.
#[derive(Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (the key is a `u64`); any other input still hashes.
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Fibonacci hashing mixes every bit of the id into the high bits; folding them down
        // mixes the low bits too (hashbrown picks buckets by the low ones, and ids drawn by
        // one thread all share their lowest bits: see `stripe::Numbers`).
        let mixed = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = mixed ^ (mixed >> 32);
    }
}

/// If the task ends abnormally (a panic), its holds cannot be watched: they are lost.
struct Running {
    watchdog: Arc<Watchdog>,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            let holds: Vec<_> = {
                let mut state = self.watchdog.state();
                state.running = false;
                state
                    .holds
                    .drain()
                    .filter_map(|(_, h)| h.upgrade())
                    .collect()
            };
            for hold in holds {
                hold.lose();
            }
        }
    }
}

/// The task. Between passes it keeps only a weak reference to the engine: every hold keeps
/// the engine alive, so once the client and its last hold are dropped, the engine (and its
/// connections) goes at once, not when the task next wakes (up to a renewal period later),
/// and the task ends when it does.
async fn run(engine: Weak<Engine>, watchdog: Arc<Watchdog>) {
    let mut running = Running {
        watchdog: watchdog.clone(),
        armed: true,
    };
    loop {
        let now = Instant::now();
        // Listen before surveying, so a change made during the survey is not missed.
        let changed = watchdog.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let strong = engine.upgrade();
        let holds: Vec<Arc<Hold>> = {
            let mut state = watchdog.state();
            state.holds.retain(|_, h| h.strong_count() > 0);
            // (No engine: the client and all its holds are gone.)
            if state.holds.is_empty() || strong.is_none() {
                // Cleared under the lock `watch` takes, so a hold registered right after this
                // starts a new task.
                state.running = false;
                running.armed = false;
                return;
            }
            state.holds.values().filter_map(Weak::upgrade).collect()
        };
        let mut next: Option<Instant> = None;
        let mut renew = Vec::new();
        let mut done = Vec::new();
        for hold in holds {
            let at = match hold.survey(now) {
                Due::Later(at) => at,
                Due::Renew(ttl, at) => {
                    renew.push((hold, ttl));
                    at
                }
                Due::Capped => {
                    hold.release_in_background();
                    done.push(hold.id());
                    None
                }
                Due::Lost | Due::Done => {
                    done.push(hold.id());
                    None
                }
            };
            next = match (next, at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        {
            let mut state = watchdog.state();
            for id in done {
                state.holds.remove(&id);
            }
            state.next_pass = next;
        }
        if let Some(strong) = strong {
            for chunk in renew.chunks(RENEW_BATCH) {
                tokio::spawn(renew_batch(strong.clone(), chunk.to_vec(), now));
            }
        }
        // Nothing strong across the wait: a hold keeps its engine.
        drop(renew);
        match next {
            Some(next) => {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {
                        if let Some(engine) = engine.upgrade() {
                            engine.lateness.record(next, Instant::now());
                        }
                    }
                    () = changed => {}
                }
            }
            None => changed.await,
        }
    }
}

/// Renews one batch and hands each hold its outcome.
async fn renew_batch(engine: Arc<Engine>, batch: Vec<(Arc<Hold>, Duration)>, sent_at: Instant) {
    let leases: Vec<Lease<'_>> = batch.iter().map(|(hold, ttl)| hold.lease(*ttl)).collect();
    let shortest = batch
        .iter()
        .map(|(_, ttl)| *ttl)
        .min()
        .unwrap_or(Duration::MAX);
    let result = engine
        .backend
        .renew(&leases, shortest / RENEW_REPLY_DIVISOR)
        .await;
    let now = Instant::now();
    let mut earliest: Option<Instant> = None;
    let mut settled = |hold: &Hold, ttl: Duration, ours: Option<bool>| {
        if let Some(at) = hold.renewal_settled(sent_at, ttl, ours, now) {
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
    };
    match &result {
        Ok(ours) => {
            for ((hold, ttl), &ours) in batch.iter().zip(ours) {
                settled(hold, *ttl, ours);
            }
            let n = ours.iter().filter(|&&ok| ok == Some(true)).count();
            engine.counters.add(Count::Renewed, n as u64);
            crate::util::trace::debug_event!(renewed = n, "rlock: leases renewed");
        }
        Err(_e) => {
            for (hold, ttl) in &batch {
                settled(hold, *ttl, None);
            }
            engine.counters.add(Count::RenewFailure, 1);
            crate::metrics::export::renew_failed();
            crate::util::trace::warn_event!(
                error = _e as &(dyn std::error::Error + 'static),
                leases = batch.len(),
                "rlock: lease renewal failed"
            );
        }
    }
    // The task planned its next pass while these were in flight, without their next
    // renewal; make sure it comes back in time for it.
    engine.watchdog.due_at(earliest);
}
