//! Redis Cluster, through the `redis` crate's own cluster client (which follows `MOVED`,
//! `ASK` and `TRYAGAIN` and refreshes the slot map after a failover or a resharding).
//!
//! The lease scripts run unchanged: each script's keys share one slot (the fence key is
//! `{<lock key>}:fence`), renewals are batched per slot ([`Scripted`](super::redis::Scripted)),
//! and releases are announced on sharded channels (`SPUBLISH` in the key's slot) to which the
//! feed subscribes with `SSUBSCRIBE` over RESP3, so a release reaches only its shard, not the
//! whole cluster bus. Needs Redis 7 (sharded pub/sub).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use super::connection::Opener;
use super::pubsub::{Connector, Session, Subscribed, shard_channel};
use super::redis::Scripted;
use crate::error::LockError;
use crate::slot::slot;

/// A cluster, reached through its seed nodes.
pub(crate) type ClusterStore = Scripted<ClusterOpener>;

/// Opens cluster connections from the seed nodes.
#[derive(Clone)]
pub(crate) struct ClusterOpener {
    seeds: Arc<Vec<String>>,
    timeout: Duration,
    commands: Arc<ClusterClient>,
}

impl ClusterOpener {
    pub(crate) fn new(seeds: Vec<String>, timeout: Duration) -> Result<Self, LockError> {
        let commands = Self::builder(&seeds, timeout)
            .build()
            .map_err(|e| LockError::InvalidConfig(format!("unusable cluster URL: {e}")))?;
        Ok(Self {
            seeds: Arc::new(seeds),
            timeout,
            commands: Arc::new(commands),
        })
    }

    fn builder(seeds: &[String], timeout: Duration) -> ClusterClientBuilder {
        ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
    }
}

impl Opener for ClusterOpener {
    type Conn = ClusterConnection;
    const CLUSTER: bool = true;

    async fn open(&self, _timeout: Duration) -> RedisResult<ClusterConnection> {
        self.commands.get_async_connection().await
    }

    /// Routed to the master of `key`'s slot: the node, and connection, that wrote it.
    async fn wait_replicas(
        mut conn: ClusterConnection,
        key: &str,
        replicas: u32,
        wait_ms: u64,
    ) -> RedisResult<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(wait_ms);
        let route = Route::new(slot(key), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        let acked = conn.route_command(wait, routing).await?;
        redis::from_redis_value(acked).map_err(Into::into)
    }
}

/// A RESP3 cluster connection holding sharded subscriptions; announcements arrive as pushes.
pub(crate) struct ShardedSession {
    conn: ClusterConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
}

impl Connector for ClusterOpener {
    type Session = ShardedSession;

    async fn connect(&self) -> RedisResult<ShardedSession> {
        let (tx, pushes) = mpsc::unbounded_channel();
        let client = Self::builder(&self.seeds, self.timeout)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()?;
        let conn = client.get_async_connection().await?;
        Ok(ShardedSession { conn, pushes })
    }

    fn channel(&self, redis_key: &str) -> String {
        shard_channel(redis_key)
    }
}

impl Session for ShardedSession {
    async fn subscribe(&mut self, channel: &str, timeout: Duration) -> Subscribed {
        Subscribed::from_result(
            tokio::time::timeout(timeout, self.conn.ssubscribe(channel))
                .await
                .ok(),
        )
    }

    async fn unsubscribe(&mut self, channel: &str, timeout: Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.conn.sunsubscribe(channel)).await,
            Ok(Ok(()))
        )
    }

    async fn next_announcement(&mut self) -> Option<String> {
        loop {
            let push = self.pushes.recv().await?;
            match push.kind {
                PushKind::SMessage | PushKind::Message => {
                    if let Some(Value::BulkString(channel)) = push.data.first() {
                        return Some(String::from_utf8_lossy(channel).into_owned());
                    }
                }
                // A node's connection closed: announcements may have been missed, and the
                // subscriptions must be confirmed again on a fresh connection.
                PushKind::Disconnection => return None,
                _ => {}
            }
        }
    }

    async fn ping(&mut self, timeout: Duration) -> bool {
        let ping = redis::cmd("PING");
        let reply = tokio::time::timeout(timeout, ping.query_async::<String>(&mut self.conn));
        matches!(reply.await, Ok(Ok(_)))
    }
}
