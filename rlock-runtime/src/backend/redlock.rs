//! Redlock over N independent Redis masters, per the algorithm on redis.io.
//!
//! Every operation fans out to all masters at once, each bounded by a per-node timeout, and
//! counts a majority (`N/2 + 1`):
//! - **acquire**: granted when a majority granted it within the lease's validity, which is
//!   `ttl − elapsed − drift` with drift `0.01·ttl + 2 ms` on the monotonic clock. The hold's
//!   own lower bound ([`lease_margin`](crate::util::tuning::lease_margin), counted from before the
//!   fan-out) is exactly that validity. Otherwise the token is deleted on every master, and
//!   the attempt is `Busy`, or `NoQuorum` when too many masters failed to answer.
//! - **renew / extend**: ours when a majority confirms, lost when a majority denies, unknown
//!   (retried) otherwise.
//! - **release**: deleted everywhere; "was ours" when a majority deleted it.
//! - **announcements**: every master's release feed tells the same waiters.
//!
//! Fencing tokens are refused: each master would issue its own, and after a master restarts
//! without persistence a majority can hand out a token lower than one already issued.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::endpoint::Endpoint;
use super::scripted::RedisNode;
use super::{
    Attempt, AttemptAsks, Behind, CardFields, CardPost, CountChange, Feature, Holder, KeepKey,
    Kind, Lease, LeaseStore, Recounted, ReleaseFeed, ReleaseListener, Scanned, Standing,
};
use crate::error::{LockError, Operation};
use crate::util::tuning::{REDLOCK_NODE_TIMEOUT_DIVISOR, lease_margin};

#[derive(Debug)]
pub(crate) struct Redlock {
    /// Shared with background releases (see [`Redlock::release_everywhere`]).
    nodes: Vec<Arc<RedisNode>>,
    timeout: Duration,
}

/// What a master's release is told to expect: on Redlock nobody queues, and the release
/// announces itself to every waiter that marked the key, for which it needs its channel.
const MARKED: Behind = Behind::Waiters { fenced: false };

/// How the masters answered one question about one lease.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    yes: usize,
    no: usize,
}

impl Redlock {
    /// Its masters, in the order of the URL.
    pub(crate) fn nodes(&self) -> &[Arc<RedisNode>] {
        &self.nodes
    }

    /// Connects to every master at once; a majority must answer.
    pub(crate) async fn connect(
        clients: Vec<redis::Client>,
        timeout: Duration,
    ) -> Result<Self, LockError> {
        let this = Self {
            nodes: clients
                .into_iter()
                .map(|c| {
                    Arc::new(
                        RedisNode::lazy(Endpoint::Fixed(Arc::new(c)), timeout).announcing_to_all(),
                    )
                })
                .collect(),
            timeout,
        };
        let reached = join_all(this.nodes.iter().map(|n| n.load_scripts())).await;
        let up = reached.iter().filter(|r| r.is_ok()).count();
        if up < this.quorum() {
            let first = reached.into_iter().find_map(Result::err);
            return Err(match first {
                Some(e @ LockError::Timeout { .. }) => e,
                Some(LockError::Unavailable { source, .. }) => LockError::Unavailable {
                    operation: Operation::Connect,
                    source: format!(
                        "only {up} of {} Redlock masters answered, {} needed: {source}",
                        this.nodes.len(),
                        this.quorum()
                    )
                    .into(),
                },
                _ => LockError::InvalidConfig("Redlock needs at least one master".into()),
            });
        }
        Ok(this)
    }

    /// How many masters make a majority.
    pub(crate) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn node_timeout(&self, ttl: Duration) -> Duration {
        self.timeout.min(ttl / REDLOCK_NODE_TIMEOUT_DIVISOR)
    }

    /// Ours on a majority → `Some(true)`; denied by so many that no majority can hold it →
    /// `Some(false)`; otherwise unknown.
    fn verdict(&self, t: Tally) -> Option<bool> {
        if t.yes >= self.quorum() {
            Some(true)
        } else if t.no > self.nodes.len() - self.quorum() {
            Some(false)
        } else {
            None
        }
    }

    /// A verdict, or the error of a call that could not be told either way.
    fn decide(
        &self,
        operation: Operation,
        tally: Tally,
        errors: Vec<LockError>,
    ) -> Result<bool, LockError> {
        self.verdict(tally).ok_or_else(|| {
            errors.into_iter().next().unwrap_or(LockError::Unavailable {
                operation,
                source: "too few Redlock masters answered either way".into(),
            })
        })
    }

    /// Deletes the token on every master, for an acquisition that failed, in the background:
    /// the caller's answer does not wait for a master that does not answer (a stopped one
    /// would hold a zero-wait `Busy` for another command timeout). Where the background runtime
    /// cannot run it, here and now.
    async fn release_everywhere(&self, lease: Lease<'_>) {
        let (nodes, kind, key, token) = (
            self.nodes.clone(),
            lease.kind,
            lease.key.to_owned(),
            lease.token.to_owned(),
        );
        let release = async move {
            let lease = Lease {
                kind,
                key: &key,
                token: &token,
                ttl: Duration::ZERO,
            };
            join_all(nodes.iter().map(|n| n.release(lease, MARKED))).await;
        };
        if !crate::util::background::spawn(release) {
            join_all(self.nodes.iter().map(|n| n.release(lease, MARKED))).await;
        }
    }
}

fn tally<I: IntoIterator<Item = Result<bool, LockError>>>(results: I) -> (Tally, Vec<LockError>) {
    let mut t = Tally::default();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(true) => t.yes += 1,
            Ok(false) => t.no += 1,
            Err(e) => errors.push(e),
        }
    }
    (t, errors)
}

impl LeaseStore for Redlock {
    fn refuses(&self, feature: Feature) -> Option<&'static str> {
        Some(match feature {
            Feature::ReplicaAcks => {
                "min_replicas does not apply to Redlock, whose masters are independent; \
                 a majority of masters is what makes its grants survive a failure"
            }
            Feature::FairWaiting => {
                "fair waiting is not available on Redlock: its masters are independent and \
                 keep no common queue; use a single Redis, Sentinel or Cluster for fair locks"
            }
            Feature::Fences => {
                "fencing tokens are not safe on Redlock: each master would issue its own, and \
                 a master restarted without persistence lets a majority issue a token lower \
                 than one already given; use a single Redis (or Sentinel) for fenced locks"
            }
            Feature::Semaphores => {
                "semaphores are not safe on Redlock: each master would count permits of its \
                 own, and a master restarted without persistence forgets its count, so a \
                 majority could grant more holders than permits; use a single Redis, Sentinel \
                 or Cluster for semaphores"
            }
            Feature::ReadWrite => {
                "read-write locks are not available on Redlock: their waiters are granted in \
                 arrival order from one queue (so that readers cannot starve a writer), and \
                 independent masters keep no common queue; use a single Redis, Sentinel or \
                 Cluster for read-write locks"
            }
        })
    }

    async fn acquire(&self, lease: Lease<'_>, ask: AttemptAsks) -> Result<Attempt, LockError> {
        let started = Instant::now();
        // Masters are independent: each would hand the lock to its own queue's head, so
        // waiters do not queue in Redis here; releases announce to every waiter instead.
        let ask = AttemptAsks {
            fence: false,
            queue: None,
            ..ask
        };
        let limit = self.node_timeout(lease.ttl);
        let answers = join_all(
            self.nodes
                .iter()
                .map(|n| n.acquire_within(lease, ask, limit)),
        )
        .await;
        let mut granted = 0;
        let mut failed = 0;
        let mut remaining: Option<Duration> = None;
        let mut misfit = None;
        for answer in &answers {
            match answer {
                Ok(Attempt::Acquired { .. } | Attempt::Handed { .. }) => granted += 1,
                Ok(Attempt::Busy {
                    remaining: left, ..
                }) => {
                    if let Some(left) = *left {
                        remaining = Some(remaining.map_or(left, |r| r.min(left)));
                    }
                }
                Ok(Attempt::Misfit(m)) => misfit = Some(*m),
                Ok(Attempt::NoQuorum { .. }) | Err(_) => failed += 1,
            }
        }
        // A master on which the name holds another kind refuses it for all: a name is one
        // kind, wherever it is kept.
        if let Some(misfit) = misfit {
            if granted > 0 {
                self.release_everywhere(lease).await;
            }
            return Ok(Attempt::Misfit(misfit));
        }
        let validity = lease
            .ttl
            .checked_sub(started.elapsed() + lease_margin(lease.ttl));
        if granted >= self.quorum() && validity.is_some_and(|v| !v.is_zero()) {
            return Ok(Attempt::Acquired { fence: None });
        }
        if granted > 0 || failed > 0 {
            // A master that did not answer may have granted it too.
            self.release_everywhere(lease).await;
        }
        if failed > self.nodes.len() - self.quorum() {
            return Ok(Attempt::NoQuorum {
                granted,
                needed: self.quorum(),
            });
        }
        Ok(Attempt::Busy {
            remaining,
            queued: false,
            standing: Standing::Head,
        })
    }

    async fn release(&self, lease: Lease<'_>, _: Behind) -> Result<bool, LockError> {
        let answers = join_all(self.nodes.iter().map(|n| n.release(lease, MARKED))).await;
        let (t, errors) = tally(answers);
        self.decide(Operation::Release, t, errors)
    }

    /// Nothing queues in Redis here: giving up is releasing whatever was granted.
    async fn withdraw(&self, lease: Lease<'_>, _fenced: bool) -> Result<bool, LockError> {
        self.release(lease, MARKED).await
    }

    async fn renew(
        &self,
        batch: &[Lease<'_>],
        limit: Duration,
    ) -> Result<Vec<Option<bool>>, LockError> {
        let shortest = batch.iter().map(|l| l.ttl).min().unwrap_or(limit);
        let limit = limit.min(self.node_timeout(shortest));
        let answers = join_all(self.nodes.iter().map(|n| n.renew(batch, limit))).await;
        let mut tallies = vec![Tally::default(); batch.len()];
        let mut first_error = None;
        for answer in answers {
            match answer {
                Ok(per_lease) => {
                    for (t, ours) in tallies.iter_mut().zip(per_lease) {
                        match ours {
                            Some(true) => t.yes += 1,
                            Some(false) => t.no += 1,
                            None => {}
                        }
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let verdicts: Vec<Option<bool>> = tallies.into_iter().map(|t| self.verdict(t)).collect();
        match first_error {
            Some(e) if verdicts.iter().all(Option::is_none) => Err(e),
            _ => Ok(verdicts),
        }
    }

    async fn extend(&self, lease: Lease<'_>) -> Result<bool, LockError> {
        let answers = join_all(self.nodes.iter().map(|n| n.extend(lease))).await;
        let (t, errors) = tally(answers);
        self.decide(Operation::Extend, t, errors)
    }

    async fn succeed(&self, lease: Lease<'_>, successor: &str) -> Result<bool, LockError> {
        let answers = join_all(self.nodes.iter().map(|n| n.succeed(lease, successor))).await;
        let (t, errors) = tally(answers);
        self.decide(Operation::Extend, t, errors)
    }

    /// Held when a majority of masters hold the same token; its lease is the shortest of
    /// theirs. Too few answers to tell is an error.
    async fn inspect(&self, kind: Kind, key: &str) -> Result<Holder, LockError> {
        let answers = join_all(self.nodes.iter().map(|n| n.inspect(kind, key))).await;
        let mut holders = Vec::new();
        let mut first_error = None;
        for answer in answers {
            match answer {
                Ok(holder) => holders.push(holder),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if holders.len() < self.quorum() {
            return Err(first_error.unwrap_or(LockError::Unavailable {
                operation: Operation::Inspect,
                source: "too few Redlock masters answered".into(),
            }));
        }
        // Another kind's state on any master answers for all, as an acquire does.
        if let Some(other) = holders
            .iter()
            .find(|h| h.found.is_some_and(|found| found != kind.key_kind()))
        {
            return Ok(Holder {
                found: other.found,
                ..Holder::default()
            });
        }
        for candidate in &holders {
            let Some(token) = &candidate.token else {
                continue;
            };
            let same: Vec<&Holder> = holders
                .iter()
                .filter(|h| h.token.as_ref() == Some(token))
                .collect();
            if same.len() >= self.quorum() {
                return Ok(Holder {
                    found: Some(kind.key_kind()),
                    token: Some(token.clone()),
                    remaining: same.iter().filter_map(|h| h.remaining).min(),
                    ..Holder::default()
                });
            }
        }
        Ok(Holder::default())
    }

    /// On every master, so that the card is read wherever a majority holds the lock; one
    /// that answers is enough (the card is a name for operators, not a grant).
    async fn post_card(&self, post: CardPost<'_>) -> Result<bool, LockError> {
        let answers = join_all(self.nodes.iter().map(|n| n.post_card(post))).await;
        let mut first_error = None;
        let mut existed = None;
        for answer in answers {
            match answer {
                // Expired on any master that answered: posted whole again next time.
                Ok(was) => existed = Some(existed.unwrap_or(true) && was),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (existed, first_error) {
            (Some(existed), _) => Ok(existed),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(false),
        }
    }

    /// Every master's keys, together.
    async fn scan(
        &self,
        pattern: &str,
        page: u32,
        limit: usize,
        keep: &KeepKey,
    ) -> Result<Scanned, LockError> {
        let answers = join_all(
            self.nodes
                .iter()
                .map(|n| n.scan(pattern, page, limit, keep)),
        )
        .await;
        let mut found = Scanned {
            keys: Vec::new(),
            complete: true,
        };
        for answer in answers {
            let scanned = answer?;
            found.keys.extend(scanned.keys);
            found.complete &= scanned.complete;
        }
        Ok(found.finish(limit))
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn read_value(&self, _key: &str) -> Result<Option<Vec<u8>>, LockError> {
        Err(no_shared_values())
    }

    #[cfg(any(feature = "once", feature = "idempotency"))]
    async fn write_value(
        &self,
        _key: &str,
        _value: &[u8],
        _ttl: Duration,
    ) -> Result<(), LockError> {
        Err(no_shared_values())
    }

    async fn recount(&self, _key: &str, _change: CountChange) -> Result<Recounted, LockError> {
        let why = self
            .refuses(Feature::Semaphores)
            .unwrap_or("Redlock keeps no semaphores");
        Err(LockError::InvalidConfig(why.into()))
    }

    /// From the first master that has the card.
    async fn read_card(&self, key: &str, fields: &[&str]) -> Result<CardFields, LockError> {
        let answers = join_all(self.nodes.iter().map(|n| n.read_card(key, fields))).await;
        let mut first_error = None;
        let mut empty = None;
        for answer in answers {
            match answer {
                Ok(card) if card.values.iter().any(Option::is_some) => return Ok(card),
                Ok(card) => empty = Some(card),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (empty, first_error) {
            (Some(card), _) => Ok(card),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(CardFields::default()),
        }
    }

    /// Refused before any lock is taken ([`Feature::ReplicaAcks`]).
    ///
    async fn confirm_replicas(&self, _lease: Lease<'_>, _replicas: u32) -> Result<u32, LockError> {
        Ok(0)
    }
}

/// Every master's release feed, telling the same listener.
#[derive(Debug)]
pub(crate) struct FanIn(Vec<Arc<dyn ReleaseFeed>>);

impl FanIn {
    pub(crate) fn new(redlock: &Redlock, listener: &Weak<dyn ReleaseListener>) -> Self {
        Self(
            redlock
                .nodes
                .iter()
                .map(|n| Arc::new(n.release_feed("", listener.clone())) as Arc<dyn ReleaseFeed>)
                .collect(),
        )
    }
}

impl ReleaseFeed for FanIn {
    fn subscribe(&self, key: &str) {
        for feed in &self.0 {
            feed.subscribe(key);
        }
    }

    fn unsubscribe(&self, key: &str) {
        for feed in &self.0 {
            feed.unsubscribe(key);
        }
    }
}

#[cfg(any(feature = "once", feature = "idempotency"))]
/// Redlock keeps no shared values: independent masters would each keep their own.
fn no_shared_values() -> LockError {
    LockError::InvalidConfig(
        "Redlock keeps no shared results: independent masters would each keep their own; \
         use one Redis, Sentinel or Cluster for once-only work"
            .into(),
    )
}
