//! Taking one key: reentry through the call chain's scopes, or a lease plan filled in from
//! the request's options and the lease layer's [`Acquisition`].

use tokio::time::Instant;

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::options::LockOptions;
use crate::backend::Kind;
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
    let beside_of = match scope::in_scope(client.id(), kind, &key, &redis_key, options.fenced)? {
        InScope::Reenters(held) => {
            held.add_guard();
            return Ok(LockGuard::new(held, true));
        }
        InScope::Fresh { beside_of } => beside_of,
    };
    let engine = &client.shared().engine;
    let plan = LeasePlan {
        beside_of,
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

/// The lease plan of a request: its options, the client's defaults where they are silent,
/// checked by the lease layer.
pub(crate) fn plan(
    client: &LockClient,
    kind: Kind,
    key: &LockKey,
    options: &LockOptions,
) -> Result<LeasePlan, LockError> {
    let shared = client.shared();
    LeasePlan {
        kind,
        ttl: options.ttl.unwrap_or(shared.default_ttl),
        renew: options.renew,
        max_hold: options.max_hold,
        min_hold: options.min_hold.filter(|d| !d.is_zero()),
        fenced: options.fenced,
        min_replicas: options.min_replicas.unwrap_or(shared.min_replicas),
        fair: options.fair,
        label: options.label.unwrap_or(crate::metrics::export::UNLABELLED),
        beside_of: None,
    }
    .checked(&shared.engine, key)
}
