//! The release feed of a Redis client: one pub/sub connection, shared by all its waiters,
//! subscribed to the release channel of every key that has a waiter and to no other.
//!
//! The feed runs on the driver (never on a caller's runtime) and tells its listener, per key,
//! whether announcements are confirmed: a subscription Redis refused (an ACL user without
//! channel rights) or one not yet confirmed leaves the key's waiters on short re-checks. A
//! `PING` every [`FEED_HEALTH_INTERVAL`] notices a connection that went silent; then the
//! listener hears `feed_lost` and the feed reconnects and subscribes again.

use std::collections::HashSet;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::mpsc;

use super::connection::is_connection_failure;
use super::endpoint::Endpoint;
use super::{ReleaseFeed, ReleaseListener};
use crate::tuning::{FEED_HEALTH_INTERVAL, FEED_RETRY_MAX, FEED_RETRY_MIN, backoff};

/// Prefix of the channel on which the release script announces a key's release.
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "rlock:released:";

pub(crate) fn release_channel(redis_key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{redis_key}")
}

#[derive(Debug)]
enum Op {
    Subscribe(String),
    Unsubscribe(String),
}

/// Sends subscription changes to the feed task, starting it on first use.
pub(crate) struct PubSubFeed {
    endpoint: Endpoint,
    timeout: Duration,
    listener: Weak<dyn ReleaseListener>,
    ops: Mutex<Option<mpsc::UnboundedSender<Op>>>,
}

impl std::fmt::Debug for PubSubFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSubFeed").finish_non_exhaustive()
    }
}

impl PubSubFeed {
    pub(crate) fn new(
        endpoint: Endpoint,
        timeout: Duration,
        listener: Weak<dyn ReleaseListener>,
    ) -> Self {
        Self {
            endpoint,
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
        // No live feed task: start one. If the driver cannot run it, no key is ever
        // confirmed and waiters keep to their short re-checks.
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(op);
        let task = Feed {
            endpoint: self.endpoint.clone(),
            timeout: self.timeout,
            listener: self.listener.clone(),
            ops: rx,
            wanted: HashSet::new(),
        };
        if crate::driver::spawn(task.run()) {
            *ops = Some(tx);
        }
    }
}

impl ReleaseFeed for PubSubFeed {
    fn subscribe(&self, key: &str) {
        self.send(Op::Subscribe(key.to_owned()));
    }

    fn unsubscribe(&self, key: &str) {
        self.send(Op::Unsubscribe(key.to_owned()));
    }
}

struct Feed {
    endpoint: Endpoint,
    timeout: Duration,
    listener: Weak<dyn ReleaseListener>,
    ops: mpsc::UnboundedReceiver<Op>,
    /// Keys whose releases the waiters want announced, connected or not.
    wanted: HashSet<String>,
}

/// Why a connected feed stopped.
enum Stop {
    /// The client is gone.
    Closed,
    /// The connection failed; reconnect.
    Failed,
}

impl Feed {
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
            let connecting = async {
                let client = self.endpoint.client().await?;
                client.get_async_pubsub().await
            };
            let Ok(Ok(pubsub)) = tokio::time::timeout(self.timeout, connecting).await else {
                continue;
            };
            let (sink, stream) = pubsub.split();
            match self.serve(sink, stream, &mut failures).await {
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
            Op::Subscribe(key) => self.wanted.insert(key.clone()),
            Op::Unsubscribe(key) => self.wanted.remove(key),
        };
    }

    /// Subscribes `key` on `sink`, telling the listener the outcome. `false` when the
    /// connection failed (a refusal by Redis is not a failure).
    async fn subscribe(&self, sink: &mut PubSubSink, key: &str) -> bool {
        let Some(listener) = self.listener.upgrade() else {
            return true;
        };
        match tokio::time::timeout(self.timeout, sink.subscribe(release_channel(key))).await {
            Ok(Ok(())) => {
                listener.confirmed(key);
                true
            }
            Ok(Err(e)) if !is_connection_failure(&e) => {
                crate::trace::warn_event!(key, error = %e, "rlock: Redis refused the release subscription; waiters re-check on a short timer");
                listener.refused(key);
                true
            }
            _ => false,
        }
    }

    /// Serves one connection: subscribes every wanted key, then follows requests and
    /// messages, with a health `PING` while anything is subscribed.
    async fn serve(
        &mut self,
        mut sink: PubSubSink,
        mut stream: PubSubStream,
        failures: &mut u32,
    ) -> Stop {
        let keys: Vec<String> = self.wanted.iter().cloned().collect();
        for key in &keys {
            if !self.subscribe(&mut sink, key).await {
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
                        Op::Subscribe(key) => self.subscribe(&mut sink, &key).await,
                        Op::Unsubscribe(key) => {
                            let r = tokio::time::timeout(
                                self.timeout,
                                sink.unsubscribe(release_channel(&key)),
                            ).await;
                            matches!(r, Ok(Ok(())))
                        }
                    };
                    if !ok {
                        return Stop::Failed;
                    }
                }
                msg = stream.next() => {
                    let Some(msg) = msg else { return Stop::Failed };
                    let Some(listener) = self.listener.upgrade() else { return Stop::Closed };
                    if let Some(key) = msg.get_channel_name().strip_prefix(RELEASE_CHANNEL_PREFIX) {
                        listener.released(key);
                    }
                }
                _ = health.tick(), if !self.wanted.is_empty() => {
                    let pong = tokio::time::timeout(self.timeout, sink.ping::<String>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        crate::trace::warn_event!("rlock: release feed stopped answering; reconnecting");
                        return Stop::Failed;
                    }
                }
            }
        }
    }
}
