//! Where the locks of a soak run live: the deployments, and their servers.

use super::nemesis::{Fault, MASTER_FAULTS, SINGLE_FAULTS};
use crate::RedisServer;
use crate::deploy::{ClusterDeployment, SentinelDeployment};

/// Where locks live during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deployment {
    /// One `redis-server`, each worker behind its own fault proxy.
    Single,
    /// A master, two replicas and three sentinels.
    Sentinel,
    /// Three masters with a replica each.
    Cluster,
}

impl Deployment {
    pub(super) const ALL: [Deployment; 3] = [
        Deployment::Single,
        Deployment::Sentinel,
        Deployment::Cluster,
    ];

    pub(super) fn parse(name: &str) -> Result<Deployment, String> {
        Deployment::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| format!("takes single, sentinel or cluster, not {name:?}"))
    }

    /// Its name in `--on` and in its lock keys (`soak:<name>:…`).
    pub(super) fn name(self) -> &'static str {
        match self {
            Deployment::Single => "single",
            Deployment::Sentinel => "sentinel",
            Deployment::Cluster => "cluster",
        }
    }

    /// The faults it adds to the deck.
    pub(super) fn faults(self) -> &'static [Fault] {
        match self {
            Deployment::Single => &SINGLE_FAULTS,
            Deployment::Sentinel => &[Fault::SentinelSwitchOver, Fault::SentinelKill],
            Deployment::Cluster => &[Fault::ClusterSwitchOver, Fault::ClusterKill],
        }
    }

    /// The deployment a soak key (`soak:<name>:…`) lives on.
    pub(super) fn of_key(key: &str) -> Option<Deployment> {
        let name = key.strip_prefix("soak:")?.split(':').next()?;
        Deployment::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether it has replicas, which a failover can promote with older data.
    pub(super) fn fails_over(self) -> bool {
        self != Deployment::Single
    }
}

/// Where the locks live: the servers the nemesis attacks.
pub(super) struct Locks {
    pub(super) single: Option<RedisServer>,
    pub(super) sentinel: Option<SentinelDeployment>,
    pub(super) cluster: Option<ClusterDeployment>,
}

impl Locks {
    /// The server the server faults hit: the one server, else a current master.
    pub(super) fn server(&self) -> Option<&RedisServer> {
        self.single
            .as_ref()
            .or_else(|| self.masters().first().copied())
    }

    /// Every server that is a master now: where lock keys live.
    pub(super) fn masters(&self) -> Vec<&RedisServer> {
        let mut masters: Vec<&RedisServer> = self.single.iter().collect();
        masters.extend(self.sentinel.as_ref().and_then(SentinelDeployment::master));
        masters.extend(self.cluster.iter().flat_map(ClusterDeployment::masters));
        masters
    }

    /// The URL that reaches `deployment` directly (no proxy), if the run has it.
    pub(super) fn url(&self, deployment: Deployment) -> Option<String> {
        match deployment {
            Deployment::Single => self.single.as_ref().map(RedisServer::url),
            Deployment::Sentinel => self.sentinel.as_ref().map(SentinelDeployment::url),
            Deployment::Cluster => self.cluster.as_ref().map(ClusterDeployment::url),
        }
    }

    /// The ports of every server, masters and replicas.
    pub(super) fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.single.iter().map(RedisServer::port).collect();
        ports.extend(
            self.sentinel
                .iter()
                .flat_map(|d| d.servers.iter().map(RedisServer::port)),
        );
        ports.extend(
            self.cluster
                .iter()
                .flat_map(|d| d.nodes.iter().map(RedisServer::port)),
        );
        ports
    }

    /// The kinds of fault the deck holds for these deployments.
    pub(super) fn faults(&self, on: &[Deployment]) -> Vec<Fault> {
        let mut faults: Vec<Fault> = on.iter().flat_map(|d| d.faults()).copied().collect();
        if self.single.is_none() {
            faults.extend(MASTER_FAULTS);
        }
        faults
    }
}
