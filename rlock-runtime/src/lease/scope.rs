//! Reentrancy: which locks the current task's call chain holds, and what they mean for a
//! new request ([`in_scope`]).
//!
//! A locked body runs inside a task-local scope that lists the locks held around it. A lock
//! request for a key already in the list (same client, same kind) re-enters without any
//! Redis command. The list belongs to the task, not the thread: a task moved between worker
//! threads keeps it, and a task spawned from inside the body starts with an empty list, so it
//! cannot piggyback on a hold it does not own. What the call chain's scopes hold decides, not
//! what the task once took: a scope cannot move to another task, while a guard can (and takes
//! its rights with it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use uuid::Uuid;

use super::Hold;
use crate::backend::Kind;
use crate::error::LockError;
use crate::key::LockKey;
use crate::util::token::Token;

tokio::task_local! {
    static HELD: Chain;
}

/// An immutable list, innermost hold first; entering a scope shares the outer list.
#[derive(Clone, Default)]
pub(crate) struct Chain(Option<Arc<Link>>);

struct Link {
    lock: Arc<Hold>,
    outer: Chain,
}

/// The hold of `redis_key` as `kind` by `client` in the current call chain, if any and not
/// yet lost.
pub(crate) fn find(client: Uuid, kind: Kind, redis_key: &str) -> Option<Arc<Hold>> {
    HELD.try_with(|chain| {
        let mut link = chain.0.as_ref();
        while let Some(l) = link {
            let lock = &l.lock;
            if lock.client_id() == client
                && lock.kind() == kind
                && lock.redis_key() == redis_key
                && !lock.is_lost()
            {
                return Some(l.lock.clone());
            }
            link = l.outer.0.as_ref();
        }
        None
    })
    .ok()
    .flatten()
}

/// The current call chain's holds with `locks` added, for a body to run inside
/// ([`within`]). (Not generic over the body: built once, outside its future.)
pub(crate) fn with_holds<'a>(locks: impl IntoIterator<Item = &'a Arc<Hold>>) -> Chain {
    let outer = HELD.try_with(Chain::clone).unwrap_or_default();
    locks.into_iter().fold(outer, |outer, lock| {
        Chain(Some(Arc::new(Link {
            lock: lock.clone(),
            outer,
        })))
    })
}

/// Polls `fut` once inside `chain` ([`with_holds`]): what `fut` runs in this poll sees the
/// chain's holds, as a task-local scope around the whole future would show them. (Generic
/// over the output alone: one copy serves every body of one output type.)
pub(crate) fn poll_within<R>(
    chain: &Chain,
    fut: Pin<&mut dyn Future<Output = R>>,
    cx: &mut Context<'_>,
) -> Poll<R> {
    HELD.sync_scope(chain.clone(), || fut.poll(cx))
}

/// Drops `fut` inside `chain`, so that what its drop does sees the chain's holds too.
pub(crate) fn drop_within<R>(chain: &Chain, fut: Pin<Box<dyn Future<Output = R> + '_>>) {
    HELD.sync_scope(chain.clone(), || drop(fut));
}

/// How a request stands with the call chain's holds.
pub(crate) enum InScope {
    /// The chain holds the key as the kind asked: the request re-enters this hold, with no
    /// Redis command.
    Reenters(Arc<Hold>),
    /// The request takes its lease afresh. A read inside the chain's write scope of the same
    /// key reads beside that writer (a downgrade), and a write inside its upgradeable read
    /// scope is taken beside that reader (an upgrade): `beside_of` is that token's number.
    Fresh { beside_of: Option<u64> },
}

/// How a request by `client` for `key` (stored as `redis_key`) as `kind` stands with the
/// call chain's holds; refused when it could only deadlock (the write lock inside a read
/// scope of the same key) or ask for a fence that re-entering cannot give. A read inside an
/// upgradeable read scope re-enters it (a read of its own beside it would hold its upgrade
/// back for ever).
pub(crate) fn in_scope(
    client: Uuid,
    kind: Kind,
    key: &LockKey,
    redis_key: &str,
    fenced: bool,
) -> Result<InScope, LockError> {
    let held = find(client, kind, redis_key).or_else(|| match kind {
        Kind::Read => find(client, Kind::UpgradeableRead, redis_key),
        _ => None,
    });
    if let Some(held) = held {
        if fenced && held.fence().is_none() {
            return Err(LockError::InvalidConfig(format!(
                "lock `{key}` is already held by this task without a fencing token, so \
                 re-entering it cannot give one; ask for the fence on the outermost lock"
            )));
        }
        return Ok(InScope::Reenters(held));
    }
    let number = |held: Arc<Hold>| Token::parse(held.token()).map(|token| token.number);
    let beside_of = match kind {
        Kind::Write if find(client, Kind::Read, redis_key).is_some() => {
            return Err(LockError::WouldDeadlock {
                key: key.as_str().to_owned(),
            });
        }
        Kind::Write => find(client, Kind::UpgradeableRead, redis_key).and_then(number),
        Kind::Read | Kind::UpgradeableRead => find(client, Kind::Write, redis_key).and_then(number),
        Kind::Lock | Kind::Permit { .. } => None,
    };
    Ok(InScope::Fresh { beside_of })
}
