//! A command connection that heals: one multiplexed connection, replaced when it stops
//! answering.
//!
//! redis-rs reconnects after a connection *drops*, but a TCP flow that goes silent (a NAT or
//! firewall that lost it, a load balancer that blackholes it) never drops: every command would
//! time out for as long as the kernel retransmits, a quarter of an hour. So here a command that
//! times out, or fails with a connection-level error, condemns the connection it used, and the
//! next command opens a fresh one: a silently dead flow costs about two command timeouts.
//! Reconnection is single-flight: concurrent callers share one attempt.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::endpoint::{Endpoint, is_demoted};
use crate::error::LockError;

#[derive(Clone)]
struct Live {
    /// Which connection this is, so that only the one that failed is condemned.
    generation: u64,
    conn: MultiplexedConnection,
}

pub(crate) struct Connection {
    endpoint: Endpoint,
    timeout: Duration,
    live: Mutex<(u64, Option<Live>)>,
    /// Held while a new connection is being opened.
    opening: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection opened on first use; every command is bounded by `timeout`.
    pub(crate) fn lazy(endpoint: Endpoint, timeout: Duration) -> Self {
        Self {
            endpoint,
            timeout,
            live: Mutex::new((0, None)),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    fn live(&self) -> MutexGuard<'_, (u64, Option<Live>)> {
        // Only whole values are stored: a poisoned slot is intact.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live connection, opening one if there is none.
    async fn current(&self) -> Result<Live, LockError> {
        if let Some(live) = self.live().1.clone() {
            return Ok(live);
        }
        let _opening = self.opening.lock().await;
        if let Some(live) = self.live().1.clone() {
            return Ok(live);
        }
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
            conn,
        };
        live.1 = Some(fresh.clone());
        Ok(fresh)
    }

    /// Opens a connection on the driver, so that the task reading its replies lives there, not
    /// on the caller's runtime: a runtime that ends (a per-test runtime sharing an installed
    /// client) then takes no connection with it.
    async fn open_on_driver(&self) -> Result<MultiplexedConnection, LockError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let (endpoint, timeout) = (self.endpoint.clone(), self.timeout);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = crate::driver::spawn(async move {
            let opened = match endpoint.client().await {
                Ok(client) => {
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                }
                Err(e) => Err(e),
            };
            let _ = tx.send(opened);
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
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let limit = limit.min(self.timeout);
        let mut used = None;
        let outcome = tokio::time::timeout(limit, async {
            let live = self.current().await?;
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
