//! A master managed by Redis Sentinel: asked of the sentinels on every (re)connection, and
//! followed as soon as they announce a failover.
//!
//! Each sentinel publishes `+switch-master <service> <old-ip> <old-port> <new-ip> <new-port>` when
//! it adopts a new master. A watcher on the background runtime subscribes to that channel on every
//! sentinel and counts the switches it hears for this service; the command connection and the
//! release feed compare that count with the one they were opened under and reconnect when it moved.
//! Without it, a connection to the old master would be replaced only once a command on it failed:
//! at once if the old master answers `READONLY`, but only after a full command timeout if it is
//! paused or cut off, and never if it went on accepting writes on the wrong side of a partition.

use std::sync::{Arc, Mutex, Weak};

use futures_util::StreamExt;
use redis::sentinel::SentinelClient;
use redis::{ConnectionAddr, RedisResult};
use tokio::sync::watch;

use super::address;
use crate::error::LockError;
use crate::util::tuning::{FEED_HEALTH_INTERVAL, FEED_RETRY_MAX, FEED_RETRY_MIN, backoff};

/// The expected form of a Sentinel URL, for error messages.
pub(crate) const SENTINEL_FORM: &str = "expected redis+sentinel://[user:password@]host1:port1,host2:port2/service[/db] \
     (rediss+sentinel://… for TLS)";

/// A deployment managed by Sentinel, as its URL names it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SentinelDeployment {
    /// `host:port` of each sentinel.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels know the master by.
    pub(crate) service: String,
    /// `redis://[auth@]x/[db]`: the master's credentials and database, on a placeholder host.
    pub(crate) master: String,
    /// `rediss+sentinel://`: sentinels and servers over TLS.
    pub(crate) tls: bool,
}

impl SentinelDeployment {
    /// The master as the sentinels name it, followed from now on, trusting the PEM `roots`
    /// for TLS when given.
    pub(crate) fn master(&self, roots: Option<&[u8]>) -> Result<Arc<SentinelMaster>, LockError> {
        use redis::IntoConnectionInfo;
        use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
        let invalid = |e: redis::RedisError| {
            LockError::InvalidConfig(format!("unusable Sentinel URL: {e}; {SENTINEL_FORM}"))
        };
        let scheme = if self.tls { "rediss" } else { "redis" };
        let mut sentinels = Vec::new();
        let mut watched = Vec::new();
        for sentinel in &self.sentinels {
            let url = format!("{scheme}://{sentinel}/");
            let client = address::client_with_roots(&url, roots)?;
            sentinels.push(client.get_connection_info().addr().clone());
            watched.push(client);
        }
        let master = self
            .master
            .as_str()
            .into_connection_info()
            .map_err(invalid)?;
        let master = master.redis_settings();
        let mut builder =
            SentinelClientBuilder::new(sentinels, &self.service, SentinelServerType::Master)
                .map_err(invalid)?
                .set_client_to_redis_db(master.db());
        if let Some(username) = master.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = master.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        #[cfg(feature = "tls")]
        if self.tls {
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(roots) = roots {
                let certificates = || redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(roots.to_vec()),
                };
                builder = builder
                    .set_client_to_redis_certificates(certificates())
                    .set_client_to_sentinel_certificates(certificates());
            }
        }
        let client = builder.build().map_err(invalid)?;
        Ok(SentinelMaster::watched(
            client,
            self.service.clone(),
            watched,
        ))
    }
}

/// The channel on which sentinels announce a new master.
const SWITCH_CHANNEL: &str = "+switch-master";

pub(crate) struct SentinelMaster {
    client: tokio::sync::Mutex<SentinelClient>,
    service: String,
    /// How many switches of this service's master have been heard.
    switches: watch::Sender<u64>,
    /// The last new master announced: each sentinel announces the same switch.
    announced: Mutex<Option<Address>>,
}

impl SentinelMaster {
    /// Asks `client` for `service`'s master, and starts watching `sentinels` for switches of
    /// it. The watchers end when the returned value is dropped.
    pub(crate) fn watched(
        client: SentinelClient,
        service: String,
        sentinels: Vec<redis::Client>,
    ) -> Arc<Self> {
        let master = Arc::new(Self {
            client: tokio::sync::Mutex::new(client),
            service,
            switches: watch::Sender::new(0),
            announced: Mutex::new(None),
        });
        for sentinel in sentinels {
            // Without the background runtime there is nothing to watch with; failed commands still
            // move the connections to the new master.
            let _ = crate::util::background::spawn(watch_sentinel(
                sentinel.clone(),
                Arc::downgrade(&master),
            ));
        }
        master
    }

    /// A client for the master the sentinels name now.
    ///
    /// Right after a switch, a sentinel that has not heard of it yet still names the old
    /// master, which may not have been demoted yet either, and would take writes that the
    /// switch then throws away. So a master that differs from the last one announced is
    /// passed over for the announced one, unless that one is not a master any more (a later
    /// switch was missed).
    pub(crate) async fn client(&self) -> RedisResult<redis::Client> {
        let named = self.client.lock().await.async_get_client().await?;
        let Some(announced) = self.announced() else {
            return Ok(named);
        };
        let info = named.get_connection_info();
        let mut addr = info.addr().clone();
        match &mut addr {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                if *host == announced.host && *port == announced.port {
                    return Ok(named);
                }
                // Same protocol and credentials, the announced server.
                (*host, *port) = (announced.host, announced.port);
            }
            _ => return Ok(named),
        }
        let newer = redis::Client::open(info.clone().set_addr(addr))?;
        Ok(if is_master(&newer).await {
            newer
        } else {
            named
        })
    }

    fn announced(&self) -> Option<Address> {
        self.announced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many master switches have been heard so far.
    pub(crate) fn switches(&self) -> u64 {
        *self.switches.borrow()
    }

    /// Changes whenever a master switch is heard.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.switches.subscribe()
    }

    /// Notes an announcement on the switch channel.
    fn heard(&self, payload: &str) {
        let Some(new_master) = switched_to(payload, &self.service) else {
            return;
        };
        let mut last = self.announced.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref() == Some(&new_master) {
            return;
        }
        *last = Some(new_master);
        self.switches.send_modify(|n| *n += 1);
        crate::util::trace::warn_event!(
            service = %self.service,
            "rlock: the sentinels switched the master; reconnecting"
        );
    }
}

/// A master's address as the sentinels announce it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    host: String,
    port: u16,
}

/// The new master if `payload` announces a switch of `service`.
fn switched_to(payload: &str, service: &str) -> Option<Address> {
    let mut fields = payload.split_ascii_whitespace();
    if fields.next()? != service {
        return None;
    }
    let (_old_ip, _old_port) = (fields.next()?, fields.next()?);
    let (host, port) = (fields.next()?, fields.next()?);
    Some(Address {
        host: host.to_owned(),
        port: port.parse().ok()?,
    })
}

/// Whether the server answers `ROLE` as a master. (The caller bounds the time.)
async fn is_master(client: &redis::Client) -> bool {
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let role: RedisResult<Vec<redis::Value>> = redis::cmd("ROLE").query_async(&mut conn).await;
    matches!(role.as_deref(), Ok([redis::Value::BulkString(role), ..]) if role == b"master")
}

/// Follows one sentinel's switch announcements for as long as `master` lives, reconnecting
/// with backoff, and checking the connection with a `PING` as the release feed does.
async fn watch_sentinel(client: redis::Client, master: Weak<SentinelMaster>) {
    let mut failures = 0;
    while master.strong_count() > 0 {
        if failures > 0 {
            tokio::time::sleep(backoff(FEED_RETRY_MIN, FEED_RETRY_MAX, failures)).await;
        }
        failures += 1;
        let connected = tokio::time::timeout(FEED_HEALTH_INTERVAL, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_CHANNEL).await?;
            RedisResult::Ok(pubsub.split())
        });
        let Ok(Ok((mut sink, mut stream))) = connected.await else {
            continue;
        };
        failures = 0;
        let mut health = tokio::time::interval(FEED_HEALTH_INTERVAL);
        health.reset();
        loop {
            tokio::select! {
                message = stream.next() => {
                    let (Some(message), Some(master)) = (message, master.upgrade()) else {
                        break;
                    };
                    if let Ok(payload) = message.get_payload::<String>() {
                        master.heard(&payload);
                    }
                }
                _ = health.tick() => {
                    // Any reply will do: a subscribed RESP2 connection answers
                    // `["pong", ""]`, not `PONG` (read as a string, it failed, and the watcher
                    // reconnected every second, each time a window to miss a switch).
                    let pong =
                        tokio::time::timeout(FEED_HEALTH_INTERVAL, sink.ping::<redis::Value>());
                    if master.strong_count() == 0 || !matches!(pong.await, Ok(Ok(_))) {
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::switched_to;

    #[test]
    fn reads_the_new_master_of_its_own_service_only() {
        let payload = "mymaster 127.0.0.1 6379 127.0.0.1 6380";
        let new = switched_to(payload, "mymaster").unwrap();
        assert_eq!((new.host.as_str(), new.port), ("127.0.0.1", 6380));
        assert_eq!(switched_to(payload, "other"), None);
        assert_eq!(switched_to("mymaster 127.0.0.1", "mymaster"), None);
    }
}
