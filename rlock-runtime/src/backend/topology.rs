//! What differs between the deployments the scripted store runs on ([`Topology`]), and the
//! names of the channels their releases are announced on ([`Announcing`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, RedisResult, Value};

use crate::util::slot::hashed_part;

/// A connection's reply reader, when rlock runs it.
pub(crate) type Reader = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A connection just opened.
pub(crate) struct Opened<C> {
    pub(crate) conn: C,
    /// Who reads its replies, which decides how its calls are bounded.
    pub(crate) reading: Reading,
}

/// Who reads a connection's replies, and so what bounds its calls.
pub(crate) enum Reading {
    /// rlock, with this reader (a socket it opened itself): the connection is
    /// [watched](super::watch::Watch), and its calls need no timer of their own.
    Ours(Reader),
    /// The driver, in a task of its own (TLS): each call runs under a timer.
    Driver,
    /// The connection's parts, each watched on its own (a cluster's connection per node):
    /// the connection bounds every call itself and replaces a part that fails, so a call
    /// needs no timer, and a failed call no new connection.
    Parts,
}

/// What a deployment's shape decides, for the scripted store over it: how its connections
/// are opened, how releases are announced, which keys one script call may take together,
/// how its keys are scanned and its redirects followed. One server and the sentinels'
/// master (an [`Endpoint`](super::endpoint::Endpoint)) keep every default; a cluster
/// (`ClusterTopology`) overrides them.
pub(crate) trait Topology: Clone + Send + Sync + 'static {
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;

    /// Opens a new connection; `timeout` bounds connecting and every reply on it.
    fn open(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = RedisResult<Opened<Self::Conn>>> + Send;

    /// `WAIT replicas wait_ms` on the server that holds `key`, over the connection that wrote
    /// it: how many replicas have every write of that connection so far.
    fn wait_replicas(
        conn: Self::Conn,
        key: &str,
        replicas: u32,
        wait_ms: u64,
    ) -> impl Future<Output = RedisResult<u32>> + Send;

    /// How many times the server behind this topology has changed (a Sentinel failover): a
    /// connection opened under an older count is replaced.
    fn master_switches(&self) -> u64 {
        0
    }

    /// How `key`'s releases are announced. One server: `PUBLISH` on a plain channel.
    fn announcing(&self, key: &str) -> Announcing {
        let _ = key;
        Announcing::Plain
    }

    /// Learns, once on connecting, what the server offers that this topology's announcing
    /// depends on (a cluster's sharded pub/sub). Nothing to learn for one server.
    fn learn(&self, conn: Self::Conn) -> impl Future<Output = RedisResult<()>> + Send {
        let _ = conn;
        std::future::ready(Ok(()))
    }

    /// Keys one script call may touch together share a group (a renewal batch, a
    /// `lock_all`): a cluster's script keys must share a slot. One server takes any keys
    /// together.
    fn call_group(key: &str) -> u16 {
        let _ = key;
        0
    }

    /// Whether `e` says that a batch's keys are split between two nodes (a cluster slot
    /// mid-migration), so that each key must be sent alone.
    fn splits_batch(e: &RedisError) -> bool {
        let _ = e;
        false
    }

    /// The nodes a key scan visits, each as the address to route its `SCAN` pages to: the one
    /// server (`None`), or a cluster's masters.
    fn scan_nodes(
        conn: Self::Conn,
    ) -> impl Future<Output = RedisResult<Vec<Option<(String, u16)>>>> + Send {
        let _ = conn;
        std::future::ready(Ok(vec![None]))
    }

    /// One `SCAN` page: `cmd` (`SCAN <cursor> MATCH … COUNT …`) on `node`.
    fn scan_page(
        mut conn: Self::Conn,
        node: Option<(String, u16)>,
        cmd: Cmd,
    ) -> impl Future<Output = RedisResult<(u64, Vec<String>)>> + Send {
        let _ = node;
        async move { cmd.query_async(&mut conn).await }
    }

    /// Whether `e` is an `ASK` redirect, followed with [`asked`](Self::asked). Only a
    /// cluster redirects.
    fn redirects(e: &RedisError) -> bool {
        let _ = e;
        false
    }

    /// Sends `ASKING` and `cmd`, in one write, to the node that the `ASK` redirect `ask`
    /// names, and returns `cmd`'s reply. Only a cluster redirects.
    fn asked(
        conn: Self::Conn,
        cmd: &Cmd,
        ask: &RedisError,
    ) -> impl Future<Output = RedisResult<Value>> + Send {
        let _ = (conn, cmd);
        std::future::ready(Err(ask.clone()))
    }
}

/// Prefix of the channels on which the release script announces a key's release.
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "rlock:released:";

/// The channel of `redis_key`'s releases on one server.
pub(crate) fn release_channel(redis_key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{redis_key}")
}

/// The sharded channel of `redis_key`'s releases on Redis Cluster: in the key's slot (its
/// hash tag, or the whole key, wrapped in braces), so that the release script may `SPUBLISH`
/// to it and only the key's shard carries it. A key whose hashed part holds a `}` cannot be
/// wrapped: then the channel is the key itself (channels and keys are separate namespaces).
pub(crate) fn shard_channel(redis_key: &str) -> String {
    let tag = hashed_part(redis_key);
    if tag.contains('}') {
        redis_key.to_owned()
    } else {
        format!("{RELEASE_CHANNEL_PREFIX}{{{tag}}}:{redis_key}")
    }
}

/// How a lock's releases are announced, as the scripts take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Announcing {
    /// `PUBLISH` on `rlock:released:<key>` (one server, Sentinel). The scripts append the key
    /// to the prefix themselves, which saves an allocation per call.
    Plain,
    /// `SPUBLISH` on this shard channel, in the key's slot (Redis Cluster).
    Sharded(String),
}

impl Announcing {
    /// The channel as the scripts take it (for `Plain`, its prefix: they append the key).
    pub(crate) fn script_channel(&self) -> &str {
        match self {
            Self::Plain => RELEASE_CHANNEL_PREFIX,
            Self::Sharded(channel) => channel,
        }
    }

    /// The command that publishes on it.
    pub(crate) fn command(&self) -> &'static str {
        match self {
            Self::Plain => "PUBLISH",
            Self::Sharded(_) => "SPUBLISH",
        }
    }
}

/// `name`'s value in a `HELLO` reply: a map in RESP3, a flat array in RESP2.
pub(crate) fn hello_field(hello: &Value, name: &str) -> Option<String> {
    let pairs: Vec<(&Value, &Value)> = match hello {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(flat) => flat.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect(),
        _ => return None,
    };
    pairs.into_iter().find_map(|(k, v)| {
        (redis::from_redis_value_ref::<String>(k).ok()? == name)
            .then(|| redis::from_redis_value_ref::<String>(v).ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_channels_hash_like_their_keys() {
        assert_eq!(
            shard_channel("order:42"),
            "rlock:released:{order:42}:order:42"
        );
        assert_eq!(hashed_part(&shard_channel("order:42")), "order:42");
        assert_eq!(hashed_part(&shard_channel("{u}:x")), "u");
        assert_eq!(shard_channel("a{}b}"), "a{}b}");
    }

    #[test]
    fn hello_fields_read_in_both_protocols() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("server"),
            bulk("valkey"),
            bulk("version"),
            bulk("8.1.8"),
        ]);
        assert_eq!(hello_field(&resp2, "version").as_deref(), Some("8.1.8"));
        let resp3 = Value::Map(vec![(bulk("mode"), bulk("cluster"))]);
        assert_eq!(hello_field(&resp3, "mode").as_deref(), Some("cluster"));
        assert_eq!(hello_field(&Value::Nil, "mode"), None);
    }
}
