//! What operators' calls ask of the engine (`inspect`, `list`, `force_unlock` and their
//! family forms, in `api/admin.rs`): reads of what the backend holds, and ending a lease
//! under its holder's own token; and the values once-only work shares (`api/once.rs`). The
//! façade reaches the backend only through these.

use std::sync::Arc;

use super::Engine;
use super::hold::Hold;
use crate::backend::{
    Behind, CardFields, CountChange, Feature, Holder, KeepKey, Kind, Lease, LeaseStore, Recounted,
    Scanned,
};
use crate::error::LockError;
use crate::metrics::Count;

impl Engine {
    /// Why this client's topology cannot give `feature`, if it cannot.
    pub(crate) fn refuses(&self, feature: Feature) -> Option<&'static str> {
        self.backend.refuses(feature)
    }

    /// The group of keys the topology takes in one atomic call that `redis_key` belongs to
    /// (a cluster slot), or `None` when each key goes alone.
    pub(crate) fn taken_together(&self, redis_key: &str) -> Option<u16> {
        self.backend.taken_together(redis_key)
    }

    /// How many times the topology's master has changed (a Sentinel failover).
    pub(crate) fn master_switches(&self) -> u64 {
        self.backend.master_switches()
    }

    /// Who holds `redis_key` as `kind` sees it, in one atomic read.
    pub(crate) async fn inspect(&self, kind: Kind, redis_key: &str) -> Result<Holder, LockError> {
        self.backend.inspect(kind, redis_key).await
    }

    /// Changes the count of the semaphore at `redis_key` at run time, keeping its holders.
    pub(crate) async fn recount(
        &self,
        redis_key: &str,
        change: CountChange,
    ) -> Result<Recounted, LockError> {
        self.backend.recount(redis_key, change).await
    }

    /// This client's live hold of `redis_key` under `token`, if it has one.
    pub(crate) fn hold_of(&self, redis_key: &str, token: &str) -> Option<Arc<Hold>> {
        self.watchdog
            .holds_of(redis_key)
            .into_iter()
            .find(|hold| hold.token() == token && !hold.is_lost())
    }

    /// This client's holds of `redis_key`, lost or not.
    pub(crate) fn holds_of(&self, redis_key: &str) -> Vec<Arc<Hold>> {
        self.watchdog.holds_of(redis_key)
    }

    /// **Force-unlock**: ends `lease` whoever took it, by a release under its own token, so
    /// that nothing is deleted if the key changed hands since it was read, and the next
    /// queued waiter is handed it as on a release. When it ended, it is counted, and this
    /// client's holds under that token are marked lost at once (their `lost()` fires).
    pub(crate) async fn end_lease(&self, lease: Lease<'_>) -> Result<bool, LockError> {
        if !self.backend.release(lease, Behind::waiters(false)).await? {
            return Ok(false);
        }
        self.counters.add(Count::ForcedUnlock, 1);
        for hold in self.watchdog.holds_of(lease.key) {
            if hold.token() == lease.token {
                hold.lose();
            }
        }
        Ok(true)
    }

    /// Up to `limit` keys matching `pattern` that `keep` keeps, scanned `page` at a time.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        page: u32,
        limit: usize,
        keep: &KeepKey,
    ) -> Result<Scanned, LockError> {
        self.backend.scan(pattern, page, limit, keep).await
    }

    /// `fields` of the holder card at `key`.
    pub(crate) async fn read_card(
        &self,
        key: &str,
        fields: &[&str],
    ) -> Result<CardFields, LockError> {
        self.backend.read_card(key, fields).await
    }
}

impl Engine {
    #[cfg(any(feature = "once", feature = "idempotency"))]
    /// The value shared at `key` (once-only work's result), `None` when there is none.
    pub(crate) async fn read_value(&self, key: &str) -> Result<Option<Vec<u8>>, LockError> {
        self.backend.read_value(key).await
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    /// Shares `value` at `key` for `ttl`.
    pub(crate) async fn write_value(
        &self,
        key: &str,
        value: &[u8],
        ttl: std::time::Duration,
    ) -> Result<(), LockError> {
        self.backend.write_value(key, value, ttl).await
    }
}
