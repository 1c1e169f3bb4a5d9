//! Taking one key: reentry through the call chain's scopes, or a lease plan checked from
//! the request's options and the lease layer's [`Acquisition`].

use tokio::time::Instant;

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::options::{LockOptions, check_max_hold, check_min_hold, check_ttl};
use crate::backend::{Feature, Kind};
use crate::error::LockError;
use crate::key::LockKey;
use crate::lease::LeasePlan;
use crate::lease::acquisition::Acquisition;
use crate::lease::scope::{self, InScope};
use crate::util::tuning::WAIT_FOREVER;

/// Takes one key as `kind`, waiting up to the options' budget (see [`LockRequest::acquire`]).
pub(crate) async fn acquire_one(
    client: &LockClient,
    kind: Kind,
    key: LockKey,
    options: LockOptions,
) -> Result<LockGuard, LockError> {
    let redis_key = client.redis_key(&key);
    let downgrade_of = match scope::in_scope(client.id(), kind, &key, &redis_key, options.fenced)? {
        InScope::Reenters(held) => {
            held.add_guard();
            return Ok(LockGuard::new(held, true));
        }
        InScope::Fresh { downgrade_of } => downgrade_of,
    };
    let engine = &client.shared().engine;
    let plan = LeasePlan {
        downgrade_of,
        ..plan(client, kind, &key, &options)?
    };
    let started = Instant::now();
    // Boxed: the acquisition path is a few kilobytes of state, which bodies that lock
    // again (nested `with_lock`) would otherwise carry inline, level after level.
    let hold = Box::pin(
        Acquisition {
            engine,
            key: &key,
            redis_key: &redis_key,
            plan,
            started,
            // A wait past any deadline a clock can hold means "until granted".
            budget: options
                .wait
                .unwrap_or(client.shared().default_wait)
                .min(WAIT_FOREVER),
        }
        .acquire(),
    )
    .await?;
    crate::metrics::export::acquired(plan.metrics_label(), started);
    Ok(LockGuard::new(hold, false))
}

/// Checks the lease options of a request and fills in the client's defaults.
pub(crate) fn plan(
    client: &LockClient,
    kind: Kind,
    key: &LockKey,
    options: &LockOptions,
) -> Result<LeasePlan, LockError> {
    let ttl = options.ttl.unwrap_or(client.shared().default_ttl);
    check_ttl(key, ttl)?;
    // What the request asks for that the topology cannot give, as a configuration error.
    let refused = |feature| {
        let why = client.shared().engine.refuses(feature)?;
        Some(LockError::InvalidConfig(format!(
            "{} `{key}`: {why}",
            kind.name()
        )))
    };
    if let Kind::Permit { permits } = kind {
        if permits == 0 {
            return Err(LockError::InvalidConfig(format!(
                "semaphore `{key}` has 0 permits: nobody could ever hold one; give it at least 1"
            )));
        }
        if options.fenced {
            return Err(LockError::InvalidConfig(format!(
                "semaphore `{key}`: permits carry no fencing token (several holders at once \
                 have no order to fence); remove `fenced`"
            )));
        }
        if let Some(e) = refused(Feature::Semaphores) {
            return Err(e);
        }
    }
    if kind.is_read_write() {
        if kind == Kind::Read && options.fenced {
            return Err(LockError::InvalidConfig(format!(
                "read lock `{key}`: a read lease carries no fencing token (readers hold it \
                 together and have no order to fence); fence the write lock instead"
            )));
        }
        if let Some(e) = refused(Feature::ReadWrite) {
            return Err(e);
        }
    }
    if options.fenced
        && let Some(e) = refused(Feature::Fences)
    {
        return Err(e);
    }
    if options.fair
        && let Some(e) = refused(Feature::FairWaiting)
    {
        return Err(e);
    }
    if let Some(cap) = options.max_hold {
        check_max_hold(key, ttl, cap)?;
    }
    let min_hold = options.min_hold.filter(|d| !d.is_zero());
    if let Some(floor) = min_hold {
        check_min_hold(key, floor, options.max_hold)?;
    }
    let min_replicas = options.min_replicas.unwrap_or(client.shared().min_replicas);
    if min_replicas > 0
        && let Some(e) = refused(Feature::ReplicaAcks)
    {
        return Err(e);
    }
    Ok(LeasePlan {
        kind,
        ttl,
        renew: options.renew,
        max_hold: options.max_hold,
        min_hold,
        fenced: options.fenced,
        min_replicas,
        fair: options.fair,
        label: options.label.unwrap_or(crate::metrics::export::UNLABELLED),
        downgrade_of: None,
    })
}
