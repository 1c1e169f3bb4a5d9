//! Redis Cluster: commands through a cluster connection of rlock's own
//! ([`ClusterConn`]: a watched connection per master, `MOVED` followed, the slot table read
//! again after a failover or a resharding), the release feed through the `redis` crate's
//! cluster client (RESP3, for its sharded subscriptions).
//!
//! The lease scripts run unchanged: each script's keys share one slot (the fence key is
//! `{<lock key>}:fence`), renewals are batched per slot ([`Scripted`](super::scripted::Scripted)),
//! and releases are announced on sharded channels (`SPUBLISH` in the key's slot) to which the
//! feed subscribes with `SSUBSCRIBE` over RESP3, so a release reaches only its shard, not the
//! whole cluster bus. On a cluster without sharded pub/sub (Redis before 7.0, learnt from
//! `HELLO` on connecting) the feed subscribes nothing: the scripts' `SPUBLISH` and
//! `PUBSUB SHARDNUMSUB` are refused there, inside `pcall`, so a release still hands the lock
//! on in Redis, in queue order, to a waiter that finds it at its next check in (every
//! `tuning::WAIT_POLL_PAUSE`, 50 ms). Plain pub/sub is not used instead: `PUBSUB NUMSUB` counts
//! one node's subscribers, so the scripts would take a waiter subscribed on another node for
//! dead and skip it.
//!
//! While a slot migrates, its keys live on two nodes. A command for a key already moved gets
//! `ASK`; rlock re-sends it with `ASKING` in the same write ([`ClusterTopology::asked`]), since
//! the driver sends the two apart and, on a shared connection, another task's command can take
//! the `ASKING`. A renewal batch whose keys are split between the nodes gets `TRYAGAIN` and is
//! re-sent key by key. The feed's driver keeps its own retries short
//! (`tuning::CLUSTER_RETRIES`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, ErrorKind, ProtocolVersion, PushInfo, PushKind, RedisError, RedisResult, ServerErrorKind,
    Value,
};
use tokio::sync::mpsc;

use super::cluster_conn::ClusterConn;
use super::pubsub::{Announcement, Connector, Heard, Session, Subscribed};
use super::scripted::Scripted;
use super::topology::{Announcing, Opened, Reading, Topology, hello_field, shard_channel};
use crate::error::LockError;
use crate::util::slot::slot;
use crate::util::tuning::{CLUSTER_RETRIES, CLUSTER_RETRY_MAX_MS, CLUSTER_RETRY_MIN_MS};

/// A cluster, reached through its seed nodes.
pub(crate) type ClusterStore = Scripted<ClusterTopology>;

/// Opens cluster connections from the seed nodes.
#[derive(Clone)]
pub(crate) struct ClusterTopology {
    seeds: Arc<Vec<String>>,
    timeout: Duration,
    /// Whether the nodes have sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`: Redis 7.0 and
    /// later, every Valkey); learnt once on connecting.
    sharded: Arc<AtomicBool>,
}

impl ClusterTopology {
    pub(crate) fn new(seeds: Vec<String>, timeout: Duration) -> Result<Self, LockError> {
        // Checks the seeds now, for an error on connecting rather than on the first call.
        Self::builder(&seeds, timeout)
            .build()
            .map_err(|e| LockError::InvalidConfig(format!("unusable cluster URL: {e}")))?;
        Ok(Self {
            seeds: Arc::new(seeds),
            timeout,
            sharded: Arc::new(AtomicBool::new(true)),
        })
    }

    fn builder(seeds: &[String], timeout: Duration) -> ClusterClientBuilder {
        ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(CLUSTER_RETRY_MIN_MS)
            .max_retry_wait(CLUSTER_RETRY_MAX_MS)
    }

    fn sharded(&self) -> bool {
        self.sharded.load(Ordering::Relaxed)
    }
}

/// Whether a node that answered `HELLO` with `reply` has sharded pub/sub: any Valkey, and
/// Redis from 7.0. A reply that names no server or version is taken to have it.
fn has_sharded_pubsub(reply: &Value) -> bool {
    let field = |name: &str| hello_field(reply, name);
    let (Some(server), Some(version)) = (field("server"), field("version")) else {
        return true;
    };
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    server != "redis" || major.is_none_or(|m| m >= 7)
}

impl Topology for ClusterTopology {
    type Conn = ClusterConn;

    /// `SPUBLISH` in the key's slot: only the key's shard carries it.
    fn announcing(&self, key: &str) -> Announcing {
        Announcing::Sharded(shard_channel(key))
    }

    /// `HELLO` (without a protocol version, so the connection keeps its own) on any node: its
    /// server and version tell whether the cluster has sharded pub/sub. A refused `HELLO`
    /// (an ACL without it) leaves the default, sharded; `ERR` from a server before 6.2, which
    /// wants a protocol version, means it has not.
    async fn learn(&self, mut conn: ClusterConn) -> RedisResult<()> {
        let hello = conn.on_any(&redis::cmd("HELLO")).await;
        let sharded = match hello {
            Ok(reply) => has_sharded_pubsub(&reply),
            Err(e) if e.code() == Some("ERR") => false,
            Err(e) if e.code().is_some() => true,
            Err(e) => return Err(e),
        };
        self.sharded.store(sharded, Ordering::Relaxed);
        Ok(())
    }

    fn call_group(key: &str) -> u16 {
        slot(key)
    }

    /// `TRYAGAIN`: the keys of one call are split between the two nodes of a slot migration.
    fn splits_batch(e: &RedisError) -> bool {
        matches!(e.kind(), ErrorKind::Server(ServerErrorKind::TryAgain))
    }

    fn redirects(e: &RedisError) -> bool {
        e.kind() == ErrorKind::Server(ServerErrorKind::Ask)
    }

    async fn open(&self, timeout: Duration) -> RedisResult<Opened<ClusterConn>> {
        let conn = ClusterConn::open(&self.seeds, timeout).await?;
        Ok(Opened {
            conn,
            reading: Reading::Parts,
        })
    }

    /// Routed to the master of `key`'s slot: the node, and connection, that wrote it.
    async fn wait_replicas(
        mut conn: ClusterConn,
        key: &str,
        replicas: u32,
        wait_ms: u64,
    ) -> RedisResult<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(wait_ms);
        let acked = conn.on_slot(slot(key), &wait).await?;
        redis::from_redis_value(acked).map_err(Into::into)
    }

    /// The masters `CLUSTER NODES` lists as serving (not failed, not a handshake).
    async fn scan_nodes(mut conn: ClusterConn) -> RedisResult<Vec<Option<(String, u16)>>> {
        let nodes = conn.on_any(redis::cmd("CLUSTER").arg("NODES")).await?;
        let text: String = redis::from_redis_value(nodes)?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let address = fields.nth(1)?;
                let flags = fields.next()?;
                let serving = flags.split(',').any(|f| f == "master")
                    && !flags
                        .split(',')
                        .any(|f| f.starts_with("fail") || f == "handshake");
                let (host, port) = address.split('@').next()?.rsplit_once(':')?;
                serving.then(|| Some((host.to_owned(), port.parse().ok()?)))?
            })
            .map(Some)
            .collect())
    }

    async fn scan_page(
        mut conn: ClusterConn,
        node: Option<(String, u16)>,
        cmd: Cmd,
    ) -> RedisResult<(u64, Vec<String>)> {
        let page = match node {
            Some((host, port)) => conn.on_node(&host, port, &cmd).await?,
            None => conn.on_any(&cmd).await?,
        };
        redis::from_redis_value(page).map_err(Into::into)
    }

    async fn asked(mut conn: ClusterConn, cmd: &Cmd, ask: &RedisError) -> RedisResult<Value> {
        conn.asked(cmd, ask).await
    }
}

/// A RESP3 cluster connection holding the feed's sharded subscriptions; announcements arrive
/// as pushes. On a cluster without sharded pub/sub it subscribes nothing.
pub(crate) struct ClusterSession {
    conn: ClusterConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    sharded: bool,
}

impl Connector for ClusterTopology {
    type Session = ClusterSession;

    async fn connect(&self) -> RedisResult<ClusterSession> {
        let (tx, pushes) = mpsc::unbounded_channel();
        let client = Self::builder(&self.seeds, self.timeout)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()?;
        let conn = client.get_async_connection().await?;
        Ok(ClusterSession {
            conn,
            pushes,
            sharded: self.sharded(),
        })
    }

    fn channel(&self, redis_key: &str) -> String {
        shard_channel(redis_key)
    }
}

impl Session for ClusterSession {
    async fn subscribe(&mut self, channel: &str, timeout: Duration) -> Subscribed {
        if !self.sharded {
            return Subscribed::Refused(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "unknown command 'SSUBSCRIBE': no sharded pub/sub on this cluster (Redis \
                 before 7.0)",
            )));
        }
        Subscribed::from_result(
            tokio::time::timeout(timeout, self.conn.ssubscribe(channel))
                .await
                .ok(),
        )
    }

    async fn unsubscribe(&mut self, channel: &str, timeout: Duration) -> bool {
        if !self.sharded {
            return true;
        }
        matches!(
            tokio::time::timeout(timeout, self.conn.sunsubscribe(channel)).await,
            Ok(Ok(()))
        )
    }

    async fn next_heard(&mut self) -> Option<Heard> {
        loop {
            let push = self.pushes.recv().await?;
            match (push.kind, push.data.as_slice()) {
                (
                    PushKind::SMessage | PushKind::Message,
                    [Value::BulkString(channel), Value::BulkString(payload), ..],
                ) => {
                    return Some(Heard::Announcement(Announcement {
                        channel: String::from_utf8_lossy(channel).into_owned(),
                        payload: payload.clone(),
                    }));
                }
                // Redis ends the sharded subscriptions of a slot that leaves a node (moved, or
                // the node demoted); it sends the same for the feed's own `SUNSUBSCRIBE`,
                // which the feed tells apart.
                (PushKind::SUnsubscribe, [Value::BulkString(channel), ..]) => {
                    return Some(Heard::Dropped(
                        String::from_utf8_lossy(channel).into_owned(),
                    ));
                }
                // A node's connection closed: announcements may have been missed, and the
                // subscriptions must be confirmed again on a fresh connection.
                (PushKind::Disconnection, _) => return None,
                _ => {}
            }
        }
    }

    /// With a sample, asks the node this connection takes for the master of its slot for its
    /// `ROLE` and `PUBSUB SHARDNUMSUB`, in one write. The channel is this client's own, so 0
    /// means the subscription is gone (its node was killed and the promoted replica never had
    /// it); and a node that answers as a replica was demoted after this connection read its
    /// slot map (a switch-over), so its subscriptions hear no release. Either way the feed
    /// subscribes everything again on a fresh connection.
    async fn ping(&mut self, sample: Option<&str>, timeout: Duration) -> bool {
        let Some(channel) = sample.filter(|_| self.sharded) else {
            let ping = redis::cmd("PING");
            let reply =
                tokio::time::timeout(timeout, ping.query_async::<redis::Value>(&mut self.conn));
            return matches!(reply.await, Ok(Ok(_)));
        };
        let mut check = redis::pipe();
        check
            .cmd("ROLE")
            .cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel);
        let route = Route::new(slot(channel), SlotAddr::Master);
        let node = SingleNodeRoutingInfo::SpecificNode(route);
        let reply = tokio::time::timeout(timeout, self.conn.route_pipeline(check, 0, 2, node));
        let Ok(Ok(replies)) = reply.await else {
            return false;
        };
        let [role, numsub] = replies.as_slice() else {
            return false;
        };
        is_master(role) && subscribers(numsub).is_some_and(|n| n > 0)
    }
}

/// Whether a `ROLE` reply is a master's (`["master", offset, replicas]`).
fn is_master(role: &Value) -> bool {
    match role {
        Value::Array(fields) => fields.first().is_some_and(|first| {
            redis::from_redis_value_ref::<String>(first).is_ok_and(|r| r == "master")
        }),
        _ => false,
    }
}

/// The count of a one-channel `PUBSUB SHARDNUMSUB` reply: a map (channel → count) in RESP3,
/// a flat array in RESP2.
fn subscribers(reply: &Value) -> Option<u64> {
    let count = match reply {
        Value::Map(pairs) => pairs.first().map(|(_, n)| n),
        Value::Array(pair) if pair.len() == 2 => pair.last(),
        _ => None,
    }?;
    redis::from_redis_value_ref(count).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn sharded_pubsub_is_redis_7_and_every_valkey() {
        let hello = |server: &str, version: &str| {
            Value::Array(vec![
                bulk("server"),
                bulk(server),
                bulk("version"),
                bulk(version),
                bulk("proto"),
                Value::Int(2),
            ])
        };
        assert!(!has_sharded_pubsub(&hello("redis", "6.2.14")));
        assert!(has_sharded_pubsub(&hello("redis", "7.0.15")));
        assert!(has_sharded_pubsub(&hello("valkey", "8.1.8")));
        let resp3 = Value::Map(vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk("6.2.14")),
        ]);
        assert!(!has_sharded_pubsub(&resp3));
        assert!(has_sharded_pubsub(&Value::Nil));
    }

    #[test]
    fn only_a_master_role_counts() {
        let master = Value::Array(vec![bulk("master"), Value::Int(42), Value::Array(vec![])]);
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(7000),
            bulk("connected"),
            Value::Int(42),
        ]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert!(!is_master(&Value::Nil));
    }

    #[test]
    fn subscriber_counts_read_in_both_protocols() {
        let resp3 = Value::Map(vec![(bulk("c"), Value::Int(1))]);
        let resp2 = Value::Array(vec![bulk("c"), Value::Int(0)]);
        assert_eq!(subscribers(&resp3), Some(1));
        assert_eq!(subscribers(&resp2), Some(0));
        assert_eq!(subscribers(&Value::Nil), None);
    }
}
