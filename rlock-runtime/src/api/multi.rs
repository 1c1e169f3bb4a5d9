//! All of several keys or none ([`LockClient::lock_all`]): each key an ordinary lock, taken
//! one after the other in one canonical order, so that two callers naming the same keys in
//! different orders never hold one each while waiting for the other's.

use std::sync::Arc;

use tokio::time::Instant;

use crate::api::acquire::{acquire_one, plan};
use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::options::LockOptions;
use crate::backend::Kind;
use crate::error::{LockError, Operation};
use crate::key::LockKey;
use crate::lease::all::{AttemptedAll, GroupKey};
use crate::lease::scope;
use crate::lease::{Engine, Hold, within};
use crate::util::tuning::WAIT_FOREVER;

/// Takes every key of `keys`, all or none, within the options' one wait budget.
///
/// The keys are put in their canonical order (their Redis keys' byte order) and split into
/// the groups the topology takes in one atomic call (every key of one server; a cluster
/// slot; each key alone on Redlock), and the groups are tried in that order. When one finds
/// a key busy, every key taken so far is given back and the caller waits for that key alone,
/// queued like any waiter of it (herd-free); once handed it, it tries every group again with
/// that key already its own. So a waiting `lock_all` holds none of its keys: users of one of
/// them never queue behind a multi-lock that is not running.
pub(crate) async fn acquire_all(
    client: &LockClient,
    keys: Vec<LockKey>,
    options: LockOptions,
) -> Result<LockGuard, LockError> {
    let mut keys: Vec<(String, LockKey)> = keys
        .into_iter()
        .map(|key| (client.redis_key(&key), key))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = keys.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(LockError::InvalidConfig(format!(
            "lock_all names `{}` twice; name each key once",
            pair[0].1
        )));
    }
    let Some((_, first)) = keys.first() else {
        return Err(LockError::InvalidConfig(
            "lock_all needs at least one key".to_owned(),
        ));
    };
    if options.fenced {
        return Err(LockError::InvalidConfig(format!(
            "lock_all of `{first}` and more: one fence cannot stand for several keys; lock each \
             key on its own for its fence"
        )));
    }
    let plan = plan(client, Kind::Lock, first, &options)?;
    let started = Instant::now();
    let budget = options
        .wait
        .unwrap_or(client.shared().default_wait)
        .min(WAIT_FOREVER);
    let deadline = started + budget;
    // Without a budget, one attempt per group, each bounded by the command timeout alone.
    let attempt_deadline = (!budget.is_zero()).then_some(deadline);
    let engine = &client.shared().engine;
    let groups = groups(engine, &keys);
    // Keys the call chain's locked scopes hold: re-entered, never given back here.
    let scoped: Vec<Option<Arc<Hold>>> = keys
        .iter()
        .map(|(redis_key, _)| scope::find(client.id(), Kind::Lock, redis_key))
        .collect();
    // The key this call was last handed while it waited, by index.
    let mut waited: Option<(usize, LockGuard)> = None;
    // Bounded by the deadline: each pass waits for a busy key, or ends.
    loop {
        let mut taken: Vec<(usize, LockGuard)> = Vec::with_capacity(keys.len());
        let mut busy = None;
        for group in &groups {
            let held: Vec<Option<&Arc<Hold>>> = group
                .iter()
                .map(|&i| {
                    scoped[i].as_ref().or(waited
                        .as_ref()
                        .filter(|(w, _)| *w == i)
                        .and_then(|(_, guard)| guard.holds().next()))
                })
                .collect();
            let members: Vec<GroupKey<'_>> = group
                .iter()
                .zip(&held)
                .map(|(&i, held)| GroupKey {
                    key: &keys[i].1,
                    redis_key: &keys[i].0,
                    held: *held,
                })
                .collect();
            match engine.attempt_all(&members, plan, attempt_deadline).await {
                Ok(AttemptedAll::Granted(holds)) => {
                    for (&i, hold) in group.iter().zip(holds) {
                        let guard = match waited.take() {
                            Some((w, guard)) if w == i => guard,
                            other => {
                                waited = other;
                                if scoped[i].is_some() {
                                    hold.add_guard();
                                }
                                LockGuard::new(hold, scoped[i].is_some())
                            }
                        };
                        taken.push((i, guard));
                    }
                }
                Ok(AttemptedAll::Busy { index, .. }) => {
                    busy = group.get(index).copied();
                    break;
                }
                // A key this call held is not its own any more: the call chain's hold of it
                // is lost, which the caller is told; one handed to it while it waited is
                // waited for again, as a busy key is.
                Ok(AttemptedAll::NotHeld { index }) => {
                    busy = group.get(index).copied();
                    if let Some(i) = busy.filter(|&i| scoped[i].is_some()) {
                        give_back(taken, waited, attempt_deadline).await;
                        return Err(LockError::Lost {
                            key: keys[i].1.as_str().to_owned(),
                        });
                    }
                    break;
                }
                Ok(AttemptedAll::Unanswered) => {
                    give_back(taken, waited, attempt_deadline).await;
                    return Err(LockError::Timeout {
                        operation: Operation::Acquire,
                        timeout: budget,
                    });
                }
                Err(e) => {
                    give_back(taken, waited, attempt_deadline).await;
                    return Err(e);
                }
            }
        }
        let Some(busy) = busy else {
            taken.sort_by_key(|(i, _)| *i);
            return LockGuard::all_of(taken.into_iter().map(|(_, guard)| guard).collect())
                .ok_or_else(|| {
                    LockError::InvalidConfig("lock_all needs at least one key".to_owned())
                });
        };
        // Holding none while it waits: every key goes back, the one handed before too.
        give_back(taken, waited.take(), attempt_deadline).await;
        let left = deadline.saturating_duration_since(Instant::now());
        let key = keys[busy].1.clone();
        if left.is_zero() {
            return Err(LockError::Busy {
                key: key.as_str().to_owned(),
                waited: started.elapsed(),
            });
        }
        let mut wait_for = options.clone();
        wait_for.wait = Some(left);
        match acquire_one(client, Kind::Lock, key, wait_for).await {
            Ok(guard) => waited = Some((busy, guard)),
            Err(LockError::Busy { key, .. }) => {
                return Err(LockError::Busy {
                    key,
                    waited: started.elapsed(),
                });
            }
            Err(e) => return Err(e),
        }
    }
}

/// The indexes of `keys` (in canonical order) in the groups their topology takes in one
/// call, each group in canonical order, the groups in the order of their first keys.
fn groups(engine: &Engine, keys: &[(String, LockKey)]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
    for (i, (redis_key, _)) in keys.iter().enumerate() {
        let together = engine.taken_together(redis_key);
        match groups
            .iter_mut()
            .find(|(group, _)| together.is_some() && *group == together)
        {
            Some((_, members)) => members.push(i),
            None => groups.push((together, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// Gives back every guard of `taken` and `waited`, waiting for the releases at most until
/// `deadline` if given (those still on their way go on in the background).
async fn give_back(
    taken: Vec<(usize, LockGuard)>,
    waited: Option<(usize, LockGuard)>,
    deadline: Option<Instant>,
) {
    let guards = taken.into_iter().chain(waited).map(|(_, guard)| guard);
    let releases = futures_util::future::join_all(guards.map(LockGuard::release));
    // The error that stopped the acquisition is the answer, whatever the releases say.
    let _ = within(deadline, releases).await;
}
