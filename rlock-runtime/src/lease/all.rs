//! Several lock keys taken at once, all or none (`lock_all`): one attempt at a group of keys
//! that the topology takes in one atomic call (a cluster slot; every key of one server). The
//! façade's loop over groups, and its waiting, are `api/multi.rs`.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Engine, Grant, Hold, LeasePlan, Resend, within};
use crate::backend::{AllAttempt, Behind, GroupLease, Kind, Lease, LeaseStore};
use crate::error::{LockError, Operation};
use crate::key::LockKey;

/// One key of a group: the key, as Redis stores it, and the caller's hold of it already, if
/// any (a key handed to it while it waited, or one its locked scope holds): that hold's
/// token is asked for, and its lease set anew while the key still holds it, instead of a new
/// token's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupKey<'a> {
    pub(crate) key: &'a LockKey,
    pub(crate) redis_key: &'a str,
    pub(crate) held: Option<&'a Arc<Hold>>,
}

/// What one attempt at a group came to.
#[derive(Debug)]
pub(crate) enum AttemptedAll {
    /// Every key is the caller's: a hold per key in the group's order (for a key held
    /// already, that hold).
    Granted(Vec<Arc<Hold>>),
    /// The key at `index` is another owner's: nothing was taken.
    Busy { index: usize },
    /// The key at `index`, which the caller held, is not its own any more (its hold is now
    /// marked lost): nothing was taken.
    NotHeld { index: usize },
    /// The deadline came before the answer: whatever Redis did is undone in the background.
    Unanswered,
}

impl Engine {
    /// One attempt at every key of `group` (one group of `taken_together`), returning by
    /// `deadline` if given (without one, within the command timeout). A key new to the caller gets a new token and hold; if the answer never
    /// comes (the deadline, a timeout, a cancelled caller), the new tokens are released in
    /// the background, as an orphan single acquisition's is.
    pub(crate) async fn attempt_all(
        self: &Arc<Self>,
        group: &[GroupKey<'_>],
        plan: LeasePlan,
        deadline: Option<Instant>,
    ) -> Result<AttemptedAll, LockError> {
        let tokens: Vec<String> = group
            .iter()
            .map(|key| {
                key.held
                    .map_or_else(|| self.token(), |h| h.token().to_owned())
            })
            .collect();
        let leases: Vec<GroupLease<'_>> = group
            .iter()
            .zip(&tokens)
            .map(|(key, token)| GroupLease {
                lease: Lease {
                    kind: Kind::Lock,
                    key: key.redis_key,
                    token,
                    ttl: plan.ttl,
                },
                held: key.held.is_some(),
            })
            .collect();
        let sent_at = Instant::now();
        // The new keys are taken back if the answer never comes. A held key needs no such
        // care: the call sets its lease anew only while it still holds its token, so it
        // cannot take back a key whose hold was released meanwhile (the caller cut, and the
        // hold released in the background, on another connection than this call's).
        let mut orphans: Vec<Resend<'_>> = leases
            .iter()
            .filter(|group| !group.held)
            .map(|group| Resend::orphan(self, group.lease, None))
            .collect();
        let disarm = |orphans: &mut Vec<Resend<'_>>| {
            for orphan in orphans {
                orphan.armed = false;
            }
        };
        let Some(outcome) = within(deadline, self.backend.acquire_all(&leases)).await else {
            return Ok(AttemptedAll::Unanswered);
        };
        match outcome? {
            AllAttempt::Taken => {}
            AllAttempt::Busy { index } => {
                disarm(&mut orphans);
                return Ok(AttemptedAll::Busy { index });
            }
            AllAttempt::NotHeld { index } => {
                disarm(&mut orphans);
                // Its lease ended, or it was released, whatever the watchdog has seen yet.
                if let Some(held) = group.get(index).and_then(|key| key.held) {
                    held.lose();
                }
                return Ok(AttemptedAll::NotHeld { index });
            }
            AllAttempt::Misfit { index, misfit } => {
                disarm(&mut orphans);
                let key = group.get(index).map_or("?", |key| key.key.as_str());
                return Err(misfit.error(Kind::Lock, key));
            }
        }
        if plan.min_replicas > 0 {
            // One confirmation covers the group: `WAIT` counts every write of the
            // connection so far. Unconfirmed, the new keys go back (the orphans, armed).
            let first = leases.first().map(|group| group.lease);
            let confirm = async {
                match first {
                    Some(lease) => {
                        self.confirm_replicas(group[0].key, lease, plan.min_replicas)
                            .await
                    }
                    None => Ok(()),
                }
            };
            match within(deadline, Box::pin(confirm)).await {
                None => return Ok(AttemptedAll::Unanswered),
                Some(Err(e)) => return Err(e),
                Some(Ok(())) => {}
            }
        }
        // As for one key: a grant confirmed after its lease could have ended is not handed
        // out (the orphans, armed, take the new keys back).
        if Instant::now() >= sent_at + plan.ttl {
            return Err(LockError::Timeout {
                operation: Operation::Acquire,
                timeout: plan.ttl,
            });
        }
        disarm(&mut orphans);
        drop(orphans);
        let holds = group
            .iter()
            .zip(&tokens)
            .map(|(key, token)| match key.held {
                Some(held) => held.clone(),
                None => self.hold(
                    key.key,
                    key.redis_key,
                    plan,
                    Grant {
                        token: token.clone(),
                        fence: None,
                        sent_at,
                        lease: plan.ttl,
                        behind: Behind::waiters(false),
                    },
                ),
            })
            .collect();
        Ok(AttemptedAll::Granted(holds))
    }
}
