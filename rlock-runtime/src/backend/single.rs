//! One Redis server, or the master the sentinels name: how its command connections and
//! its release feed's connection are opened. The lease operations are the scripted store's
//! ([`RedisNode`], a [`Scripted`](super::scripted::Scripted) over an [`Endpoint`]); what is
//! particular to Redis Cluster is in `cluster.rs`.

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisResult};
use std::time::Duration;

use super::endpoint::Endpoint;
use super::pubsub::{Announcement, Connector, Heard, Session, Subscribed};
use super::topology::release_channel;
use super::topology::{Opened, Reader, Reading, Topology};

impl Topology for Endpoint {
    type Conn = MultiplexedConnection;

    fn master_switches(&self) -> u64 {
        Endpoint::master_switches(self)
    }

    async fn open(&self, timeout: Duration) -> RedisResult<Opened<MultiplexedConnection>> {
        let client = self.client().await?;
        if let Some((conn, reader)) = open_own(client.get_connection_info(), timeout).await? {
            return Ok(Opened {
                conn,
                reading: Reading::Ours(reader),
            });
        }
        let conn = client
            .get_multiplexed_async_connection_with_config(&driver_config(timeout))
            .await?;
        Ok(Opened {
            conn,
            reading: Reading::Driver,
        })
    }

    async fn wait_replicas(
        mut conn: MultiplexedConnection,
        _key: &str,
        replicas: u32,
        wait_ms: u64,
    ) -> RedisResult<u32> {
        redis::cmd("WAIT")
            .arg(replicas)
            .arg(wait_ms)
            .query_async(&mut conn)
            .await
    }
}

/// No response timeout of the driver's own: every command is already bounded, by the
/// connection's watch or by [`Connection::call`](super::connection::Connection::call)'s
/// timer, either of which also condemns a connection that stopped answering; a second timer
/// per command only costs CPU.
fn driver_config(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None)
}

/// A connection to the server `info` names whose reply reader the caller runs (see
/// `watch.rs`): a plain TCP or Unix socket, opened here. `None` for TLS, which is left to the
/// driver's own connector, reader and all. The caller bounds the socket's connecting.
pub(crate) async fn open_own(
    info: &ConnectionInfo,
    timeout: Duration,
) -> RedisResult<Option<(MultiplexedConnection, Reader)>> {
    let config = driver_config(timeout);
    let (conn, reader): (_, Reader) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            socket.set_nodelay(info.tcp_settings().nodelay())?;
            let (conn, reader) =
                MultiplexedConnection::new_with_config(info.redis_settings(), socket, config)
                    .await?;
            (conn, Box::pin(reader))
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => {
            let socket = tokio::net::UnixStream::connect(path).await?;
            let (conn, reader) =
                MultiplexedConnection::new_with_config(info.redis_settings(), socket, config)
                    .await?;
            (conn, Box::pin(reader))
        }
        _ => return Ok(None),
    };
    Ok(Some((conn, reader)))
}

/// One server's (or the sentinels' master's) RESP2 pub/sub connection.
pub(crate) struct PubSubSession {
    sink: PubSubSink,
    stream: PubSubStream,
}

impl Connector for Endpoint {
    type Session = PubSubSession;

    async fn connect(&self) -> RedisResult<PubSubSession> {
        let (sink, stream) = self.client().await?.get_async_pubsub().await?.split();
        Ok(PubSubSession { sink, stream })
    }

    fn channel(&self, redis_key: &str) -> String {
        release_channel(redis_key)
    }

    fn watch_switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Endpoint::watch_switches(self)
    }
}

impl Session for PubSubSession {
    async fn subscribe(&mut self, channel: &str, timeout: Duration) -> Subscribed {
        Subscribed::from_result(
            tokio::time::timeout(timeout, self.sink.subscribe(channel))
                .await
                .ok(),
        )
    }

    async fn unsubscribe(&mut self, channel: &str, timeout: Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.sink.unsubscribe(channel)).await,
            Ok(Ok(()))
        )
    }

    async fn next_heard(&mut self) -> Option<Heard> {
        // One server never drops a subscription on its own.
        self.stream.next().await.map(|msg| {
            Heard::Announcement(Announcement {
                channel: msg.get_channel_name().to_owned(),
                payload: msg.get_payload_bytes().to_vec(),
            })
        })
    }

    async fn ping(&mut self, _sample: Option<&str>, timeout: Duration) -> bool {
        // A server that goes away takes this connection, and its subscriptions, with it.
        // Any reply will do: a subscribed RESP2 connection answers `["pong", ""]`, not `PONG`.
        matches!(
            tokio::time::timeout(timeout, self.sink.ping::<redis::Value>()).await,
            Ok(Ok(_))
        )
    }
}
