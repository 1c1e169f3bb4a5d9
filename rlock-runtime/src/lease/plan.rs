//! A lease plan: how a hold is kept, and the checks every plan passes before its first
//! attempt (lease lengths within their limits, what the topology cannot give refused as a
//! configuration error).

use std::time::Duration;

use crate::backend::protocol::MOST_TAKEN;
use crate::backend::{Feature, Kind};
use crate::error::LockError;
use crate::key::LockKey;
use crate::metrics::export::Label;

use super::Engine;

/// The longest lease a lock may ask for: one day (the attribute's limit too, from the same
/// definition). With renewal, a lease is how long a crashed holder blocks others; longer ones
/// are nearly always a unit mistake.
pub const MAX_TTL: Duration = Duration::from_millis(rlock_macros::__limit!(MAX_TTL_MS));

/// The longest `max_hold` a lock may ask for: seven days (the attribute's limit too, from the
/// same definition); leave it unset for no cap.
pub const MAX_HOLD: Duration = Duration::from_millis(rlock_macros::__limit!(MAX_HOLD_MS));

/// How a hold is kept: filled in from a request's options by the façade, checked by
/// [`LeasePlan::checked`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeasePlan {
    /// What is leased.
    pub(crate) kind: Kind,
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) max_hold: Option<Duration>,
    /// The key stays taken this long after the grant, even if released sooner.
    pub(crate) min_hold: Option<Duration>,
    pub(crate) fenced: bool,
    /// Replicas that must confirm the grant before it counts.
    pub(crate) min_replicas: u32,
    /// Never taken past a live waiter that queued earlier.
    pub(crate) fair: bool,
    /// The lock's label in exported metrics: its key template.
    pub(crate) label: &'static str,
    /// A read-write lock's only: the number of this client's token of another role of the
    /// key beside which the lease is taken: a reader's own writer (a downgrade), a writer's
    /// own upgradeable reader (an upgrade); see [`AttemptAsks::beside_of`].
    pub(crate) beside_of: Option<u64>,
}

impl LeasePlan {
    /// The plan, if every check passes: lease lengths within their limits and one another,
    /// options that make sense for its kind, and nothing the topology cannot give (refused
    /// as a configuration error before any attempt).
    pub(crate) fn checked(self, engine: &Engine, key: &LockKey) -> Result<Self, LockError> {
        let kind = self.kind;
        check_ttl(key, self.ttl)?;
        let refused = |feature| {
            let why = engine.refuses(feature)?;
            Some(LockError::InvalidConfig(format!(
                "{} `{key}`: {why}",
                kind.name()
            )))
        };
        if let Kind::Permit { permits, take } = kind {
            if permits == 0 {
                return Err(LockError::InvalidConfig(format!(
                    "semaphore `{key}` has 0 permits: nobody could ever hold one; give it at \
                     least 1"
                )));
            }
            if take == 0 || take > permits || take > MOST_TAKEN {
                return Err(LockError::InvalidConfig(format!(
                    "semaphore `{key}`: `permits({take})` of {permits}: a hold takes from 1 \
                     to {} permits at once",
                    permits.min(MOST_TAKEN)
                )));
            }
            if self.fenced {
                return Err(LockError::InvalidConfig(format!(
                    "semaphore `{key}`: permits carry no fencing token (several holders at \
                     once have no order to fence); remove `fenced`"
                )));
            }
            if let Some(e) = refused(Feature::Semaphores) {
                return Err(e);
            }
        }
        if kind.is_read_write() {
            if kind.is_read() && self.fenced {
                return Err(LockError::InvalidConfig(format!(
                    "{} `{key}`: a read lease carries no fencing token (readers hold it \
                     together and have no order to fence); fence the write lock instead (an \
                     upgrade's always is)",
                    kind.name()
                )));
            }
            if let Some(e) = refused(Feature::ReadWrite) {
                return Err(e);
            }
        }
        let asked = [
            (self.fenced, Feature::Fences),
            (self.fair, Feature::FairWaiting),
            (self.min_replicas > 0, Feature::ReplicaAcks),
        ];
        if let Some(e) = asked
            .into_iter()
            .filter(|(asked, _)| *asked)
            .find_map(|(_, feature)| refused(feature))
        {
            return Err(e);
        }
        if let Some(cap) = self.max_hold {
            check_max_hold(key, self.ttl, cap)?;
        }
        if let Some(floor) = self.min_hold {
            check_min_hold(key, floor, self.max_hold)?;
        }
        Ok(self)
    }

    /// Its series' labels in exported metrics.
    pub(crate) fn metrics_label(&self) -> Label {
        Label {
            lock: self.label,
            kind: self.kind.name(),
        }
    }
}

/// A lease is at least 1 ms and at most [`MAX_TTL`].
pub(crate) fn check_ttl(key: &LockKey, ttl: Duration) -> Result<(), LockError> {
    if ttl < Duration::from_millis(1) {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has a ttl under 1ms; give it a lease of at least 1ms"
        )));
    }
    if ttl > MAX_TTL {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has a ttl of {ttl:?}, over the limit of {MAX_TTL:?}; keep the lease \
             short and let the watchdog renew it"
        )));
    }
    Ok(())
}

/// A `max_hold` is at most [`MAX_HOLD`] and no shorter than the ttl.
pub(crate) fn check_max_hold(key: &LockKey, ttl: Duration, cap: Duration) -> Result<(), LockError> {
    if cap > MAX_HOLD {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has max_hold {cap:?}, over the limit of {MAX_HOLD:?}; \
             leave max_hold unset for no cap"
        )));
    }
    if cap < ttl {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has max_hold {cap:?} shorter than its ttl {ttl:?}; \
             raise max_hold or lower the ttl"
        )));
    }
    Ok(())
}

/// A `min_hold` is at most [`MAX_TTL`] (Redis keeps the key that long after the body), and
/// at most the `max_hold` cap, if any (the cap ends the hold whatever happens).
pub(crate) fn check_min_hold(
    key: &LockKey,
    floor: Duration,
    cap: Option<Duration>,
) -> Result<(), LockError> {
    if floor > MAX_TTL {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has min_hold {floor:?}, over the limit of {MAX_TTL:?}; a job lock \
             kept longer than a day is better kept by the scheduler"
        )));
    }
    if let Some(cap) = cap.filter(|cap| floor > *cap) {
        return Err(LockError::InvalidConfig(format!(
            "lock `{key}` has min_hold {floor:?} longer than its max_hold {cap:?}; \
             lower min_hold or raise max_hold"
        )));
    }
    Ok(())
}
