//! Reentrancy: which locks the current task's call chain holds.
//!
//! A locked body runs inside a task-local scope that lists the locks held around it. A lock
//! request for a key already in the list (same client) re-enters without any Redis command.
//! The list belongs to the task, not the thread: a task moved between worker threads keeps
//! it, and a task spawned from inside the body starts with an empty list, so it cannot
//! piggyback on a hold it does not own.

use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;

use crate::backend::Kind;
use crate::lease::Hold;

tokio::task_local! {
    static HELD: Chain;
}

/// An immutable list, innermost hold first; entering a scope shares the outer list.
#[derive(Clone, Default)]
struct Chain(Option<Arc<Link>>);

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

/// Runs `fut` with `locks` added to the current call chain's holds.
pub(crate) async fn enter<F: Future>(
    locks: impl IntoIterator<Item = Arc<Hold>>,
    fut: F,
) -> F::Output {
    let outer = HELD.try_with(Chain::clone).unwrap_or_default();
    let chain = locks.into_iter().fold(outer, |outer, lock| {
        Chain(Some(Arc::new(Link { lock, outer })))
    });
    HELD.scope(chain, fut).await
}
