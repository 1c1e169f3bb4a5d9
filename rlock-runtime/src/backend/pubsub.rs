//! The release feed of a client: one subscribing connection, shared by all its waiters,
//! subscribed to the release channel of every key that has a waiter and to no other (with a
//! queue in Redis, the client's own channel of the key: see [`Feed::new`]).
//!
//! The feed runs on the background runtime (never on a caller's runtime) and tells its listener,
//! per key, whether announcements are confirmed: a subscription Redis refused (an ACL user without
//! channel rights) or one not yet confirmed leaves the key's waiters on short re-checks. A `PING`
//! every [`FEED_HEALTH_INTERVAL`] notices a connection that went silent; then the listener hears
//! `feed_lost` and the feed reconnects and subscribes again.
//!
//! The loop is the same for every topology; a [`Session`] is one connection of it: a RESP2
//! pub/sub connection (`SUBSCRIBE`) for one server, or a cluster connection with RESP3
//! sharded subscriptions (`SSUBSCRIBE`) for Redis Cluster.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use redis::{RedisError, RedisResult};
use tokio::sync::mpsc;

use super::connection::is_connection_failure;
use super::queue::Handoff;
use super::{ReleaseFeed, ReleaseListener};
use crate::util::tuning::{FEED_HEALTH_INTERVAL, FEED_RETRY_MAX, FEED_RETRY_MIN, backoff};

#[derive(Debug)]
enum Op {
    Subscribe(String),
    Unsubscribe(String),
}

/// How a session answered a subscription.
pub(crate) enum Subscribed {
    Confirmed,
    /// Redis answered with an error (e.g. `NOPERM`): the connection is fine.
    Refused(RedisError),
    /// The connection failed.
    Failed,
}

impl Subscribed {
    pub(crate) fn from_result(r: Option<RedisResult<()>>) -> Self {
        match r {
            Some(Ok(())) => Self::Confirmed,
            Some(Err(e)) if !is_connection_failure(&e) && !is_passing(&e) => Self::Refused(e),
            _ => Self::Failed,
        }
    }
}

/// An error that a new connection, a moment later, may not meet: the slot moved (a Cluster
/// failover the connection's slot map has not caught up with), the cluster or the master is
/// down for now, the server is loading or busy. Unlike a refusal (`NOPERM`), the feed
/// reconnects and subscribes again.
fn is_passing(e: &RedisError) -> bool {
    matches!(
        e.code(),
        Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "LOADING" | "BUSY")
    )
}

/// A message on a release channel.
pub(crate) struct Announcement {
    pub(crate) channel: String,
    /// Names the waiter the lock was handed to ([`Handoff::parse`]), or only says "released".
    pub(crate) payload: Vec<u8>,
}

/// What a session hears.
pub(crate) enum Heard {
    Announcement(Announcement),
    /// The server ended the subscription of this channel on its own: on Redis Cluster, a
    /// sharded channel's slot moved to another node (Redis sends `sunsubscribe`).
    Dropped(String),
}

/// One subscribing connection.
pub(crate) trait Session: Send + Sized + 'static {
    /// Subscribes the channel (each call bounded by `timeout`).
    fn subscribe(
        &mut self,
        channel: &str,
        timeout: Duration,
    ) -> impl Future<Output = Subscribed> + Send;
    /// Unsubscribes it; `false` when the connection failed.
    fn unsubscribe(
        &mut self,
        channel: &str,
        timeout: Duration,
    ) -> impl Future<Output = bool> + Send;
    /// The next announcement or dropped subscription; `None` when the connection ended.
    fn next_heard(&mut self) -> impl Future<Output = Option<Heard>> + Send;
    /// Whether the connection still answers, and still carries the subscription of
    /// `sample`, one of its channels (checked where a node can lose it unseen: a Cluster
    /// master killed and replaced).
    fn ping(
        &mut self,
        sample: Option<&str>,
        timeout: Duration,
    ) -> impl Future<Output = bool> + Send;
}

/// Opens sessions, and names each key's channel.
pub(crate) trait Connector: Send + Sync + 'static {
    type Session: Session;
    fn connect(&self) -> impl Future<Output = RedisResult<Self::Session>> + Send;
    fn channel(&self, redis_key: &str) -> String;
    /// Changes when the server to subscribe on does (a Sentinel failover); `None` if it never
    /// does.
    fn watch_switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// Sends subscription changes to the feed task, starting it on first use.
pub(crate) struct Feed<C: Connector + Clone> {
    connector: C,
    /// `:<client>` after each key's channel when releases name their waiter on its client's
    /// own channel (waiters queued in Redis); `None` for channels every client shares.
    suffix: Option<String>,
    timeout: Duration,
    listener: Weak<dyn ReleaseListener>,
    ops: Mutex<Option<mpsc::UnboundedSender<Op>>>,
}

impl<C: Connector + Clone> std::fmt::Debug for Feed<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").finish_non_exhaustive()
    }
}

impl<C: Connector + Clone> Feed<C> {
    /// A feed of `listener`. With `client`, it subscribes that client's own channel of each
    /// key (the key's channel, `:` and the client): a release names the waiter it handed the
    /// lock to there, and since only the waiter's client listens, `PUBSUB NUMSUB` counts 0
    /// when that client is gone and the release skips the waiter (see `scripts/queue.lua`).
    pub(crate) fn new(
        connector: C,
        client: Option<&str>,
        timeout: Duration,
        listener: Weak<dyn ReleaseListener>,
    ) -> Self {
        Self {
            connector,
            suffix: client.map(|c| format!(":{c}")),
            timeout,
            listener,
            ops: Mutex::new(None),
        }
    }

    fn send(&self, op: Op) {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let op = match ops.as_ref() {
            Some(tx) => match tx.send(op) {
                Ok(()) => return,
                Err(mpsc::error::SendError(op)) => op,
            },
            None => op,
        };
        // No live feed task: start one. If the background runtime cannot run it, no key is ever
        // confirmed and waiters keep to their short re-checks.
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(op);
        let task = FeedTask {
            connector: self.connector.clone(),
            suffix: self.suffix.clone(),
            timeout: self.timeout,
            listener: self.listener.clone(),
            ops: rx,
            wanted: HashSet::new(),
            keys_by_channel: HashMap::new(),
        };
        if crate::util::background::spawn(task.run()) {
            *ops = Some(tx);
        }
    }
}

impl<C: Connector + Clone> ReleaseFeed for Feed<C> {
    fn subscribe(&self, key: &str) {
        self.send(Op::Subscribe(key.to_owned()));
    }

    fn unsubscribe(&self, key: &str) {
        self.send(Op::Unsubscribe(key.to_owned()));
    }
}

struct FeedTask<C: Connector> {
    connector: C,
    suffix: Option<String>,
    timeout: Duration,
    listener: Weak<dyn ReleaseListener>,
    ops: mpsc::UnboundedReceiver<Op>,
    /// Keys whose releases the waiters want announced, connected or not.
    wanted: HashSet<String>,
    /// Which key each subscribed channel announces.
    keys_by_channel: HashMap<String, String>,
}

/// Why a connected feed stopped.
enum Stop {
    /// The client is gone.
    Closed,
    /// The connection failed; reconnect.
    Failed,
}

impl<C: Connector> FeedTask<C> {
    /// The channel this client subscribes for `key`'s releases.
    fn channel(&self, key: &str) -> String {
        let mut channel = self.connector.channel(key);
        if let Some(suffix) = &self.suffix {
            channel.push_str(suffix);
        }
        channel
    }

    /// Runs until the client is dropped, reconnecting after failures.
    async fn run(mut self) {
        let mut failures = 0;
        loop {
            if failures > 0 {
                // Pause before trying again, keeping track of requests meanwhile.
                let retry = tokio::time::sleep(backoff(FEED_RETRY_MIN, FEED_RETRY_MAX, failures));
                tokio::pin!(retry);
                loop {
                    tokio::select! {
                        () = &mut retry => break,
                        op = self.ops.recv() => match op {
                            None => return,
                            Some(op) => self.note(&op),
                        },
                    }
                }
            }
            failures += 1;
            let connected = tokio::time::timeout(self.timeout, self.connector.connect()).await;
            let Ok(Ok(session)) = connected else {
                continue;
            };
            match self.serve(session, &mut failures).await {
                Stop::Closed => return,
                Stop::Failed => match self.listener.upgrade() {
                    Some(listener) => listener.feed_lost(),
                    None => return,
                },
            }
        }
    }

    fn note(&mut self, op: &Op) {
        match op {
            Op::Subscribe(key) => {
                self.wanted.insert(key.clone());
                self.keys_by_channel.insert(self.channel(key), key.clone());
            }
            Op::Unsubscribe(key) => {
                self.wanted.remove(key);
                self.keys_by_channel.remove(&self.channel(key));
            }
        }
    }

    /// Subscribes `key`, telling the listener the outcome. `false` when the connection failed
    /// (a refusal by Redis is not a failure).
    async fn subscribe(
        &self,
        session: &mut C::Session,
        key: &str,
        confirmed: &mut Vec<String>,
    ) -> bool {
        let Some(listener) = self.listener.upgrade() else {
            return true;
        };
        let channel = self.channel(key);
        match session.subscribe(&channel, self.timeout).await {
            Subscribed::Confirmed => {
                listener.confirmed(key);
                if !confirmed.contains(&channel) {
                    confirmed.push(channel);
                }
                true
            }
            Subscribed::Refused(_e) => {
                crate::util::trace::warn_event!(key, error = %_e, "rlock: Redis refused the release subscription; waiters re-check on a short timer");
                listener.refused(key);
                true
            }
            Subscribed::Failed => false,
        }
    }

    /// Serves one connection: subscribes every wanted key, then follows requests and
    /// announcements, with a health `PING` while anything is subscribed.
    async fn serve(&mut self, mut session: C::Session, failures: &mut u32) -> Stop {
        // Taken before subscribing: a master switch from here on moves the feed to the new one.
        let mut switches = self.connector.watch_switches();
        let keys: Vec<String> = self.wanted.iter().cloned().collect();
        // The channels this connection confirmed, checked one per health tick in turn.
        let mut confirmed = Vec::new();
        let mut checks: usize = 0;
        for key in &keys {
            if !self.subscribe(&mut session, key, &mut confirmed).await {
                return Stop::Failed;
            }
        }
        *failures = 0;
        let mut health = tokio::time::interval(FEED_HEALTH_INTERVAL);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        health.reset();
        loop {
            tokio::select! {
                op = self.ops.recv() => {
                    let Some(op) = op else { return Stop::Closed };
                    self.note(&op);
                    let ok = match op {
                        // (Subscribing a key again is harmless: Redis confirms it again.)
                        Op::Subscribe(key) => {
                            self.subscribe(&mut session, &key, &mut confirmed).await
                        }
                        Op::Unsubscribe(key) => {
                            let channel = self.channel(&key);
                            confirmed.retain(|c| *c != channel);
                            session.unsubscribe(&channel, self.timeout).await
                        }
                    };
                    if !ok {
                        return Stop::Failed;
                    }
                }
                heard = session.next_heard() => match heard {
                    None => return Stop::Failed,
                    Some(Heard::Announcement(announcement)) => {
                        let Some(listener) = self.listener.upgrade() else { return Stop::Closed };
                        if let Some(key) = self.keys_by_channel.get(&announcement.channel) {
                            listener.released(key, Handoff::parse(&announcement.payload));
                        }
                    }
                    // A subscription the feed still wants, gone with its slot (a resharding, or
                    // a failover that demoted its node): the topology changed, and this
                    // connection's map of it is stale (subscribed again through it, the
                    // channel could land on the demoted node, which accepts it as a replica,
                    // where no release is heard). So the feed starts over on a fresh
                    // connection, at once; meanwhile its keys' waiters poll, and the
                    // confirmations wake them to put back entries releases skipped. (One
                    // the feed gave up itself is no longer among the confirmed.)
                    Some(Heard::Dropped(channel)) => {
                        if confirmed.contains(&channel) {
                            crate::util::trace::debug_event!(channel = channel.as_str(), "rlock: Redis dropped a release subscription (its slot moved); the feed reconnects");
                            return Stop::Failed;
                        }
                    }
                },
                () = switched(&mut switches) => {
                    crate::util::trace::warn_event!("rlock: the master changed; the release feed moves to it");
                    return Stop::Failed;
                }
                _ = health.tick(), if !self.wanted.is_empty() => {
                    // One confirmed channel per check, in turn.
                    checks = checks.wrapping_add(1);
                    let sample = confirmed.get(checks % confirmed.len().max(1));
                    if !session.ping(sample.map(String::as_str), self.timeout).await {
                        crate::util::trace::warn_event!("rlock: release feed stopped answering; reconnecting");
                        return Stop::Failed;
                    }
                }
            }
        }
    }
}

/// Completes when `switches` sees a change of master; never when there is nothing to watch.
async fn switched(switches: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    let Some(rx) = switches else {
        return std::future::pending().await;
    };
    if rx.changed().await.is_err() {
        // The master's watcher is gone with its client: nothing will change any more.
        std::future::pending::<()>().await;
    }
}
