//! A single Redis node through one auto-reconnecting, multiplexed connection shared by every
//! task of the client.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation};

use std::future::Future;
use std::sync::Arc;

use super::subscriber::{Subscriber, release_channel};
use super::{Attempt, AttemptAsks, Renewal, millis};
use crate::error::LockError;
use crate::key::fence_key;
use crate::queue::WaitQueues;

// Each script is hashed once; calls go out as EVALSHA and fall back to loading on NOSCRIPT.
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/release.lua")));
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/extend.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/renew.lua")));

#[derive(Clone)]
pub(crate) struct RedisBackend {
    client: redis::Client,
    conn: ConnectionManager,
    /// The driver's own response timeout, reported as ours when it fires first.
    timeout: Duration,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend").finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Opens the connection. `timeout` bounds the first connection and every later command at
    /// the driver level; the client bounds each call again with its own timer.
    /// The driver's client for `url`, checked but not connected.
    pub(crate) fn client(url: &str) -> Result<redis::Client, LockError> {
        #[cfg(feature = "tls")]
        if url.starts_with("rediss://") {
            // rustls panics at the first handshake when no process-wide crypto provider is
            // installed and its features do not name exactly one; an application that
            // installed its own keeps it (this call then fails, harmlessly).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        redis::Client::open(url).map_err(|e| config_error(url, &e))
    }

    /// Like [`client`](Self::client), trusting the PEM `roots` for `rediss://` when given.
    #[cfg(feature = "tls")]
    pub(crate) fn client_with_roots(
        url: &str,
        roots: Option<Vec<u8>>,
    ) -> Result<redis::Client, LockError> {
        match roots {
            None => Self::client(url),
            Some(root_cert) => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                };
                redis::Client::build_with_tls(url, certificates).map_err(|e| config_error(url, &e))
            }
        }
    }

    pub(crate) async fn connect(
        client: redis::Client,
        timeout: Duration,
    ) -> Result<Self, LockError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_secs(1));
        let conn = connecting(
            timeout,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await?;
        // Load the scripts up front, so the first calls do not all miss at once and load them
        // again one by one. (After a server restart the cache is empty; EVALSHA reloads then.)
        for script in [&*ACQUIRE, &*RELEASE, &*EXTEND, &*RENEW] {
            let mut conn = conn.clone();
            connecting(timeout, script.load_async(&mut conn)).await?;
        }
        Ok(Self {
            client,
            conn,
            timeout,
        })
    }

    /// Without a fence and without waiting, a plain `SET key token NX PX ttl`: the cheapest
    /// atomic acquire there is. A waiter (which needs the holder's remaining lease when busy)
    /// or a fence takes the acquire script instead: still one round trip.
    pub(crate) async fn try_acquire(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        ask: AttemptAsks,
    ) -> Result<Attempt, LockError> {
        if !ask.fence && !ask.remaining {
            let mut conn = self.conn.clone();
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl))
                .query_async(&mut conn)
                .await
                .map_err(|e| failure("acquire", self.timeout, e))?;
            return Ok(if set.is_some() {
                Attempt::Acquired { fence: None }
            } else {
                Attempt::Busy { remaining: None }
            });
        }
        let mut acquire = ACQUIRE.prepare_invoke();
        acquire
            .key(key)
            .key(fence_key(key))
            .arg(token)
            .arg(millis(ttl))
            .arg(if ask.fence { "1" } else { "0" });
        let (acquired, value): (i64, i64) = self.invoke("acquire", &acquire).await?;
        Ok(if acquired == 1 {
            Attempt::Acquired {
                // The script's fences are positive; a negative one cannot come from it.
                fence: ask.fence.then(|| u64::try_from(value).unwrap_or(0)),
            }
        } else {
            Attempt::Busy {
                remaining: lease_left(value),
            }
        })
    }

    pub(crate) async fn release(&self, key: &str, token: &str) -> Result<bool, LockError> {
        let mut release = RELEASE.prepare_invoke();
        release.key(key).arg(token).arg(release_channel(key));
        let deleted: i64 = self.invoke("release", &release).await?;
        Ok(deleted == 1)
    }

    pub(crate) async fn renew(&self, batch: &[Renewal<'_>]) -> Result<Vec<bool>, LockError> {
        let mut invocation = RENEW.prepare_invoke();
        for &(key, token, ttl) in batch {
            invocation.key(key).arg(token).arg(millis(ttl));
        }
        let renewed: Vec<i64> = self.invoke("renew", &invocation).await?;
        Ok(renewed.into_iter().map(|r| r == 1).collect())
    }

    /// Runs a script call (EVALSHA, loading the script on NOSCRIPT) on the shared connection.
    async fn invoke<T: FromRedisValue>(
        &self,
        operation: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        let mut conn = self.conn.clone();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| failure(operation, self.timeout, e))
    }

    /// A release feed for one client's waiters, on its own pub/sub connection.
    pub(crate) fn subscriber(&self, queues: &Arc<WaitQueues>) -> Subscriber {
        Subscriber::new(self.client.clone(), self.timeout, queues)
    }

    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        let mut extend = EXTEND.prepare_invoke();
        extend.key(key).arg(token).arg(millis(ttl));
        let extended: i64 = self.invoke("extend", &extend).await?;
        Ok(extended == 1)
    }
}

/// One step of connecting, bounded by `timeout`.
async fn connecting<T>(
    timeout: Duration,
    step: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(timeout, step)
        .await
        .map_err(|_| LockError::Timeout {
            operation: "connect",
            timeout,
        })?
        .map_err(|e| failure("connect", timeout, e))
}

/// The holder's remaining lease from a `PTTL` reply. It is -1 for a key without expiry (set
/// by someone else) and -2 when the key just vanished; neither tells how long to wait.
fn lease_left(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

fn failure(operation: &'static str, timeout: Duration, e: RedisError) -> LockError {
    if e.is_timeout() {
        LockError::Timeout { operation, timeout }
    } else {
        LockError::Unavailable {
            operation,
            source: Box::new(e),
        }
    }
}

/// A URL the driver refused. The URL itself is left out: it may carry a password.
fn config_error(url: &str, e: &RedisError) -> LockError {
    let hint = if url.starts_with("rediss://") && !cfg!(feature = "tls") {
        "; `rediss://` needs rlock-runtime's `tls` feature"
    } else {
        "; expected redis://[user:password@]host[:port][/db] or rediss://…"
    };
    LockError::InvalidConfig(format!("unusable Redis URL: {e}{hint}"))
}
