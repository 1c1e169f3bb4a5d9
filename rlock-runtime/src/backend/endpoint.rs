//! Where a node's connections go: one fixed server, or whichever server the sentinels name
//! as the master right now.
//!
//! Connections ask their endpoint each time they (re)connect, so after a Sentinel failover the
//! next connection goes to the new master. A connection to the old one is replaced as soon as
//! the sentinels announce the switch ([`SentinelMaster`]), or when it fails (the old master is
//! down) or answers `READONLY` (it was demoted to a replica), whichever comes first.

use std::sync::Arc;

use redis::RedisResult;
use tokio::sync::watch;

use super::sentinel::SentinelMaster;

#[derive(Clone)]
pub(crate) enum Endpoint {
    /// Boxed: a client is large, and an endpoint is cloned on every (re)connection.
    Fixed(Arc<redis::Client>),
    /// Asked of the sentinels on every (re)connection.
    Sentinel(Arc<SentinelMaster>),
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
            Self::Sentinel(master) => master.client().await,
        }
    }

    /// How many times the master has changed: a connection opened under an older count goes
    /// to a former master.
    pub(crate) fn master_switches(&self) -> u64 {
        match self {
            Self::Fixed(_) => 0,
            Self::Sentinel(master) => master.switches(),
        }
    }

    /// Changes whenever the master does; `None` for a fixed server.
    pub(crate) fn watch_switches(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Self::Fixed(_) => None,
            Self::Sentinel(master) => Some(master.subscribe()),
        }
    }
}
