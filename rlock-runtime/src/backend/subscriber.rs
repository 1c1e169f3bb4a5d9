//! The release feed of a Redis client: one pub/sub connection, shared by all its waiters,
//! subscribed to the release channel of every key that has a waiter and to no other.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use crate::queue::{Subscriptions, WaitQueues};

/// Prefix of the channel on which the release script announces a key's release.
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "rlock:released:";

pub(crate) fn release_channel(redis_key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{redis_key}")
}

#[derive(Debug)]
enum Op {
    Subscribe(String, oneshot::Sender<()>),
    Unsubscribe(String),
}

/// Sends subscription changes to the feed task, starting it on first use (and again if the
/// runtime it ran on has gone).
#[derive(Debug)]
pub(crate) struct Subscriber {
    client: redis::Client,
    timeout: Duration,
    queues: Weak<WaitQueues>,
    ops: Mutex<Option<mpsc::UnboundedSender<Op>>>,
}

impl Subscriber {
    pub(crate) fn new(client: redis::Client, timeout: Duration, queues: &Arc<WaitQueues>) -> Self {
        Self {
            client,
            timeout,
            queues: Arc::downgrade(queues),
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
        // No live feed task: start one. Without a runtime, waiters fall back to their timers.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(op);
        runtime.spawn(feed(
            self.client.clone(),
            self.timeout,
            self.queues.clone(),
            rx,
        ));
        *ops = Some(tx);
    }

    /// Subscribes to `redis_key`'s channel; the receiver resolves once Redis confirmed it.
    pub(crate) fn subscribe(&self, redis_key: &str) -> oneshot::Receiver<()> {
        let (ack, confirmed) = oneshot::channel();
        self.send(Op::Subscribe(release_channel(redis_key), ack));
        confirmed
    }
}

impl Subscriptions for Subscriber {
    fn first_waiter(&self, redis_key: &str) -> Option<oneshot::Receiver<()>> {
        Some(self.subscribe(redis_key))
    }

    fn last_waiter_left(&self, redis_key: &str) {
        self.send(Op::Unsubscribe(release_channel(redis_key)));
    }
}

/// Runs the pub/sub connection until the client is dropped, reconnecting after failures.
async fn feed(
    client: redis::Client,
    timeout: Duration,
    queues: Weak<WaitQueues>,
    mut ops: mpsc::UnboundedReceiver<Op>,
) {
    let mut backoff = Duration::from_millis(50);
    let mut failed = false;
    loop {
        if failed {
            // After any failure (no connection, a refused SUBSCRIBE, a dropped connection)
            // pause before trying again, draining requests meanwhile (their waiters use their
            // timers), and stop when the client is gone.
            let retry = tokio::time::sleep(backoff);
            tokio::pin!(retry);
            loop {
                tokio::select! {
                    () = &mut retry => break,
                    op = ops.recv() => if op.is_none() { return },
                }
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        failed = true;
        let connected = tokio::time::timeout(timeout, client.get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            continue;
        };
        let (mut sink, mut stream) = pubsub.split();
        // Channels subscribed on this connection, so a request for one already there (the
        // resubscription below races with queued requests) costs no second SUBSCRIBE.
        let mut subscribed: HashSet<String> = HashSet::new();

        // Subscribe again to every key waited on, and let each queue retry once, since
        // releases during the outage were not announced to us.
        let Some(live) = queues.upgrade() else { return };
        let channels: Vec<String> = live
            .waited_keys()
            .iter()
            .map(|k| release_channel(k))
            .collect();
        drop(live);
        if !channels.is_empty() {
            let r = tokio::time::timeout(timeout, sink.subscribe(&channels)).await;
            if !matches!(r, Ok(Ok(()))) {
                continue;
            }
            subscribed.extend(channels);
            backoff = Duration::from_millis(50);
        }
        if let Some(live) = queues.upgrade() {
            live.wake_all_heads();
        }

        loop {
            tokio::select! {
                op = ops.recv() => {
                    let done = match op {
                        None => return,
                        Some(Op::Subscribe(channel, ack)) => {
                            let ok = subscribed.contains(&channel) || {
                                let r = tokio::time::timeout(timeout, sink.subscribe(&channel)).await;
                                matches!(r, Ok(Ok(())))
                            };
                            if ok {
                                subscribed.insert(channel);
                                backoff = Duration::from_millis(50);
                                let _ = ack.send(());
                            }
                            ok
                        }
                        Some(Op::Unsubscribe(channel)) => {
                            subscribed.remove(&channel);
                            let r = tokio::time::timeout(timeout, sink.unsubscribe(&channel)).await;
                            matches!(r, Ok(Ok(())))
                        }
                    };
                    if !done {
                        break;
                    }
                }
                msg = stream.next() => {
                    let Some(msg) = msg else { break };
                    let Some(queues) = queues.upgrade() else { return };
                    if let Some(key) = msg.get_channel_name().strip_prefix(RELEASE_CHANNEL_PREFIX) {
                        queues.released(key);
                    }
                }
            }
        }
    }
}
