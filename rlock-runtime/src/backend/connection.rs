//! A command connection that heals: one multiplexed connection (or one cluster connection),
//! replaced when it stops answering.
//!
//! redis-rs reconnects after a connection *drops*, but a TCP flow that goes silent (a NAT or
//! firewall that lost it, a load balancer that blackholes it) never drops: every command would
//! time out for as long as the kernel retransmits, a quarter of an hour. So here a command that
//! times out, or fails with a connection-level error, condemns the connection it used, and the
//! next command opens a fresh one: a silently dead flow costs about two command timeouts.
//! Reconnection is single-flight: concurrent callers share one attempt. Connections are opened
//! on the driver, so the task reading their replies never lives on a caller's runtime.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, RedisError, RedisResult, Value};

use super::endpoint::{Endpoint, is_demoted};
use crate::error::LockError;

/// How a connection is opened.
pub(crate) trait Opener: Clone + Send + Sync + 'static {
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;
    /// Whether this is Redis Cluster: each script's keys in one slot, renewals batched per
    /// slot, releases announced on sharded channels.
    const CLUSTER: bool;

    /// Opens a new connection; `timeout` bounds connecting and every reply on it.
    fn open(&self, timeout: Duration) -> impl Future<Output = RedisResult<Self::Conn>> + Send;

    /// `WAIT replicas wait_ms` on the server that holds `key`, over the connection that wrote
    /// it: how many replicas have every write of that connection so far.
    fn wait_replicas(
        conn: Self::Conn,
        key: &str,
        replicas: u32,
        wait_ms: u64,
    ) -> impl Future<Output = RedisResult<u32>> + Send;

    /// How many times the server behind this opener has changed (a Sentinel failover): a
    /// connection opened under an older count is replaced.
    fn master_switches(&self) -> u64 {
        0
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

impl Opener for Endpoint {
    type Conn = MultiplexedConnection;
    const CLUSTER: bool = false;

    fn master_switches(&self) -> u64 {
        Endpoint::master_switches(self)
    }

    async fn open(&self, timeout: Duration) -> RedisResult<MultiplexedConnection> {
        // No response timeout of the driver's own: every command is already bounded by
        // [`Connection::call`], which also condemns a connection that stopped answering; a
        // second timer per command only costs CPU.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None);
        self.client()
            .await?
            .get_multiplexed_async_connection_with_config(&config)
            .await
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

#[derive(Clone)]
struct Live<C> {
    /// Which connection this is, so that only the one that failed is condemned.
    generation: u64,
    /// The opener's master switches when it was opened.
    switches: u64,
    conn: C,
}

pub(crate) struct Connection<O: Opener> {
    opener: O,
    timeout: Duration,
    live: Mutex<(u64, Option<Live<O::Conn>>)>,
    /// Held while a new connection is being opened.
    opening: tokio::sync::Mutex<()>,
}

impl<O: Opener> std::fmt::Debug for Connection<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<O: Opener> Connection<O> {
    /// A connection opened on first use; every command is bounded by `timeout`.
    pub(crate) fn lazy(opener: O, timeout: Duration) -> Self {
        Self {
            opener,
            timeout,
            live: Mutex::new((0, None)),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    fn live(&self) -> MutexGuard<'_, (u64, Option<Live<O::Conn>>)> {
        // Only whole values are stored: a poisoned slot is intact.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live connection, if it still goes to the current master.
    fn usable(&self) -> Option<Live<O::Conn>> {
        let live = self.live().1.clone()?;
        if live.switches == self.opener.master_switches() {
            return Some(live);
        }
        self.condemn(live.generation);
        None
    }

    /// The live connection, opening one if there is none.
    async fn current(&self) -> Result<Live<O::Conn>, LockError> {
        if let Some(live) = self.usable() {
            return Ok(live);
        }
        let _opening = self.opening.lock().await;
        if let Some(live) = self.usable() {
            return Ok(live);
        }
        // Read before opening: a switch heard meanwhile condemns the new connection too.
        let switches = self.opener.master_switches();
        let conn = tokio::time::timeout(self.timeout, self.open_on_driver())
            .await
            .map_err(|_| LockError::Timeout {
                operation: "connect",
                timeout: self.timeout,
            })??;
        let mut live = self.live();
        live.0 += 1;
        let fresh = Live {
            generation: live.0,
            switches,
            conn,
        };
        live.1 = Some(fresh.clone());
        Ok(fresh)
    }

    /// Opens a connection on the driver, so that the task reading its replies lives there, not
    /// on the caller's runtime: a runtime that ends (a per-test runtime sharing an installed
    /// client) then takes no connection with it.
    async fn open_on_driver(&self) -> Result<O::Conn, LockError> {
        let (opener, timeout) = (self.opener.clone(), self.timeout);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = crate::driver::spawn(async move {
            let _ = tx.send(opener.open(timeout).await);
        });
        if !spawned {
            return Err(LockError::Unavailable {
                operation: "connect",
                source: "rlock's driver thread could not start".into(),
            });
        }
        match rx.await {
            Ok(opened) => opened.map_err(|e| failure("connect", timeout, e)),
            Err(_) => Err(LockError::Timeout {
                operation: "connect",
                timeout,
            }),
        }
    }

    /// Forgets connection `generation` (if it is still the live one): the next call opens a
    /// new one.
    fn condemn(&self, generation: u64) {
        let mut live = self.live();
        if live.1.as_ref().is_some_and(|l| l.generation == generation) {
            live.1 = None;
            crate::trace::warn_event!("rlock: Redis connection stopped answering; replacing it");
        }
    }

    /// Runs `command` on the live connection within `limit` (at most the command timeout).
    /// A timeout or a connection-level failure condemns the connection it ran on.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        limit: Duration,
        command: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(O::Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let limit = limit.min(self.timeout);
        let mut used = None;
        let outcome = tokio::time::timeout(limit, async {
            // A reconnection that fails is reported as the caller's operation failing.
            let live = self.current().await.map_err(|e| during(operation, e))?;
            used = Some(live.generation);
            command(live.conn).await.map_err(|e| {
                if is_connection_failure(&e) || is_demoted(&e) {
                    self.condemn(live.generation);
                }
                failure(operation, limit, e)
            })
        })
        .await;
        match outcome {
            Ok(result) => result,
            Err(_elapsed) => {
                if let Some(generation) = used {
                    self.condemn(generation);
                }
                Err(LockError::Timeout {
                    operation,
                    timeout: limit,
                })
            }
        }
    }
}

/// `e`, reported as a failure of `operation`.
fn during(operation: &'static str, e: LockError) -> LockError {
    match e {
        LockError::Timeout { timeout, .. } => LockError::Timeout { operation, timeout },
        LockError::Unavailable { source, .. } => LockError::Unavailable { operation, source },
        other => other,
    }
}

/// Whether the connection itself failed (as opposed to Redis answering with an error).
pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.is_timeout() || e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}

/// A driver error as a [`LockError`].
pub(crate) fn failure(operation: &'static str, timeout: Duration, e: RedisError) -> LockError {
    if e.is_timeout() {
        LockError::Timeout { operation, timeout }
    } else {
        LockError::Unavailable {
            operation,
            source: Box::new(e),
        }
    }
}
