//! Where a node's connections go: one fixed server, or whichever server the sentinels name
//! as the master right now.
//!
//! Connections ask their endpoint each time they (re)connect, so after a Sentinel failover the
//! next connection goes to the new master: a connection to the old one fails (it is down), or
//! answers `READONLY` (it was demoted to a replica), and is condemned either way.

use std::sync::Arc;

use redis::sentinel::SentinelClient;
use redis::{ErrorKind, RedisResult, ServerErrorKind};

#[derive(Clone)]
pub(crate) enum Endpoint {
    /// Boxed: a client is large, and an endpoint is cloned on every (re)connection.
    Fixed(Arc<redis::Client>),
    /// Asked of the sentinels on every (re)connection.
    Sentinel(Arc<tokio::sync::Mutex<SentinelClient>>),
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Fixed(_) => "Endpoint::Fixed",
            Self::Sentinel(_) => "Endpoint::Sentinel",
        })
    }
}

impl Endpoint {
    /// A client for the server to connect to now.
    pub(crate) async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Self::Fixed(client) => Ok((**client).clone()),
            Self::Sentinel(sentinels) => sentinels.lock().await.async_get_client().await,
        }
    }
}

/// Whether an error says that this server is not the master any more (a failover demoted it),
/// so its connection must be replaced like a dead one.
pub(crate) fn is_demoted(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}
