//! One Redis server, or the master the sentinels name: how its command connections and
//! its release feed's connection are opened. The lease operations are the scripted store's
//! ([`RedisNode`], a [`Scripted`](super::scripted::Scripted) over an [`Endpoint`]); what is
//! particular to Redis Cluster is in `cluster.rs`.

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{AsyncConnectionConfig, ConnectionAddr, RedisResult};
use std::time::Duration;

use super::endpoint::Endpoint;
use super::pubsub::{Announcement, Connector, Heard, Session, Subscribed};
use super::topology::release_channel;
use super::topology::{Opened, Reader, Topology};

impl Topology for Endpoint {
    type Conn = MultiplexedConnection;

    fn master_switches(&self) -> u64 {
        Endpoint::master_switches(self)
    }

    async fn open(&self, timeout: Duration) -> RedisResult<Opened<MultiplexedConnection>> {
        // No response timeout of the driver's own: every command is already bounded, by the
        // connection's watch or by [`Connection::call`]'s timer, either of which also
        // condemns a connection that stopped answering; a second timer per command only
        // costs CPU.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None);
        let client = self.client().await?;
        let info = client.get_connection_info();
        // A plain socket is opened here, so that its reply reader is ours to run and to stop
        // (see `watch.rs`); TLS is left to the driver's own connector, reader and all.
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
            _ => {
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                return Ok(Opened { conn, reader: None });
            }
        };
        Ok(Opened {
            conn,
            reader: Some(reader),
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
