//! The deployments a client connects to, named by URL, one grammar each: `redis://` and
//! `rediss://` (one server), `redis+sentinel://` and `rediss+sentinel://`,
//! `redis+cluster://` and `redlock://`; and connecting each to its backend.

use std::sync::Arc;
use std::time::Duration;

use super::cluster::{ClusterStore, ClusterTopology};
use super::endpoint::Endpoint;
use super::redlock::Redlock;
use super::scripted::RedisNode;
use super::sentinel::{SENTINEL_FORM, SentinelDeployment};
use super::{Backend, address};
use crate::error::LockError;

/// What a URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One server (`redis://`, `rediss://`, `unix://`): the URL as given.
    Server(String),
    Sentinel(SentinelDeployment),
    /// The seed nodes, as `redis://` URLs.
    Cluster(Vec<String>),
    /// The masters, as `redis://` URLs.
    Redlock(Vec<String>),
}

impl Deployment {
    /// What `url` names, or why it cannot be used.
    pub(crate) fn of(url: &str) -> Result<Deployment, LockError> {
        if let Some(sentinel) = sentinel_parts(url)? {
            return Ok(Deployment::Sentinel(sentinel));
        }
        if let Some(seeds) = cluster_seeds(url)? {
            return Ok(Deployment::Cluster(seeds));
        }
        if let Some(masters) = redlock_masters(url)? {
            return Ok(Deployment::Redlock(masters));
        }
        Ok(Deployment::Server(url.to_owned()))
    }

    /// Connects to the deployment, each command bounded by `timeout`, trusting the PEM
    /// `roots` for TLS when given.
    pub(crate) async fn connect(
        self,
        timeout: Duration,
        roots: Option<&[u8]>,
    ) -> Result<Backend, LockError> {
        Ok(match self {
            Deployment::Sentinel(sentinel) => {
                let endpoint = Endpoint::Sentinel(sentinel.master(roots)?);
                Backend::Redis(Arc::new(RedisNode::connect(endpoint, timeout).await?))
            }
            Deployment::Cluster(seeds) => {
                let topology = ClusterTopology::new(seeds, timeout)?;
                Backend::Cluster(Arc::new(ClusterStore::connect(topology, timeout).await?))
            }
            Deployment::Redlock(masters) => {
                let clients = masters
                    .iter()
                    .map(|m| address::client(m))
                    .collect::<Result<Vec<_>, _>>()?;
                Backend::Redlock(Arc::new(Redlock::connect(clients, timeout).await?))
            }
            Deployment::Server(url) => {
                let client = address::client_with_roots(&url, roots)?;
                let endpoint = Endpoint::Fixed(Arc::new(client));
                Backend::Redis(Arc::new(RedisNode::connect(endpoint, timeout).await?))
            }
        })
    }
}

/// `scheme`, the nodes joined by commas, then `tail`: a multi-node URL.
pub(crate) fn joined<S: Into<String>>(
    scheme: &str,
    nodes: impl IntoIterator<Item = S>,
    tail: &str,
) -> String {
    let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
    format!("{scheme}{}{tail}", nodes.join(","))
}

/// The scheme of a Sentinel URL.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// The scheme of a Sentinel URL whose sentinels and servers are reached over TLS.
const SENTINEL_TLS_SCHEME: &str = "rediss+sentinel://";

/// The parts of a `redis+sentinel://` or `rediss+sentinel://` URL (`None` for any other URL).
fn sentinel_parts(url: &str) -> Result<Option<SentinelDeployment>, LockError> {
    let (rest, tls) = match (
        url.strip_prefix(SENTINEL_SCHEME),
        url.strip_prefix(SENTINEL_TLS_SCHEME),
    ) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        (None, None) => return Ok(None),
    };
    let bad = |what: &str| {
        LockError::InvalidConfig(format!("unusable Sentinel URL: {what}; {SENTINEL_FORM}"))
    };
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (format!("{auth}@"), rest),
        None => (String::new(), rest),
    };
    let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no service name"))?;
    let (service, db) = path.split_once('/').unwrap_or((path, ""));
    if service.is_empty() {
        return Err(bad("no service name"));
    }
    let sentinels: Vec<String> = hosts.split(',').map(str::to_owned).collect();
    if sentinels.iter().any(String::is_empty) {
        return Err(bad("an empty sentinel address"));
    }
    Ok(Some(SentinelDeployment {
        sentinels,
        service: service.to_owned(),
        master: format!("redis://{auth}master/{db}"),
        tls,
    }))
}

/// The scheme of a Redlock URL.
pub(crate) const REDLOCK_SCHEME: &str = "redlock://";
/// The scheme of a Redis Cluster URL.
pub(crate) const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The masters of a `redlock://` URL as `redis://` URLs (`None` for any other URL).
/// `redlock://[user:password@]h1:p1,h2:p2[/db]`, or a list of full URLs (what
/// [`LockClientBuilder::redlock`] makes).
fn redlock_masters(url: &str) -> Result<Option<Vec<String>>, LockError> {
    let Some(rest) = url.strip_prefix(REDLOCK_SCHEME) else {
        return Ok(None);
    };
    node_urls(
        rest,
        "Redlock",
        "redlock://[user:password@]host1:port1,host2:port2,host3:port3[/db]",
    )
    .map(Some)
}

/// The seed nodes of a `redis+cluster://` URL as `redis://` URLs (`None` for any other URL).
fn cluster_seeds(url: &str) -> Result<Option<Vec<String>>, LockError> {
    let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) else {
        return Ok(None);
    };
    node_urls(
        rest,
        "cluster",
        "redis+cluster://[user:password@]host1:port1,host2:port2",
    )
    .map(Some)
}

/// `[auth@]h1:p1,h2:p2[/db]` (or a comma-separated list of full URLs) as one `redis://` URL
/// per node, each with the same credentials and database.
fn node_urls(rest: &str, what: &str, form: &str) -> Result<Vec<String>, LockError> {
    if rest.contains("://") {
        // Full URLs, as the builder's methods join them.
        return Ok(rest.split(',').map(str::to_owned).collect());
    }
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let (hosts, db) = hosts.split_once('/').unwrap_or((hosts, ""));
    if hosts.split(',').any(str::is_empty) {
        return Err(LockError::InvalidConfig(format!(
            "unusable {what} URL: an empty node address; expected {form}"
        )));
    }
    Ok(hosts
        .split(',')
        .map(|h| format!("redis://{auth}{h}/{db}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{Deployment, cluster_seeds, redlock_masters, sentinel_parts};

    #[test]
    fn each_form_names_its_deployment() {
        assert_eq!(
            Deployment::of("redis://h:1/").unwrap(),
            Deployment::Server("redis://h:1/".into())
        );
        assert!(matches!(
            Deployment::of("rediss+sentinel://s:1/m").unwrap(),
            Deployment::Sentinel(s) if s.tls && s.service == "m"
        ));
        assert_eq!(
            Deployment::of("redis+cluster://a:1").unwrap(),
            Deployment::Cluster(vec!["redis://a:1/".into()])
        );
        assert_eq!(
            Deployment::of("redlock://a:1,b:2").unwrap(),
            Deployment::Redlock(vec!["redis://a:1/".into(), "redis://b:2/".into()])
        );
        assert!(Deployment::of("redis+cluster://a:1,,b:2").is_err());
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_the_service_and_the_masters_auth() {
        assert_eq!(sentinel_parts("redis://h:1/").unwrap(), None);
        let p = sentinel_parts("redis+sentinel://u:p@s1:1,s2:2/mymaster/2")
            .unwrap()
            .unwrap();
        assert_eq!(p.sentinels, ["s1:1", "s2:2"]);
        assert_eq!(p.service, "mymaster");
        assert_eq!(p.master, "redis://u:p@master/2");
        assert!(!p.tls);
        let p = sentinel_parts("rediss+sentinel://s1:1/m").unwrap().unwrap();
        assert!(p.tls);
        for bad in [
            "redis+sentinel://s1:1",
            "redis+sentinel://s1:1/",
            "redis+sentinel://s1:1,,s2:2/m",
        ] {
            let e = sentinel_parts(bad).unwrap_err().to_string();
            assert!(e.contains("expected redis+sentinel://"), "{bad}: {e}");
        }
    }

    #[test]
    fn cluster_urls_name_the_seeds() {
        assert_eq!(cluster_seeds("redlock://a:1").unwrap(), None);
        assert_eq!(
            cluster_seeds("redis+cluster://u:p@a:1,b:2")
                .unwrap()
                .unwrap(),
            ["redis://u:p@a:1/", "redis://u:p@b:2/"]
        );
        let bad = cluster_seeds("redis+cluster://a:1,")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("expected redis+cluster://"), "{bad}");
    }

    #[test]
    fn redlock_urls_name_each_master() {
        assert_eq!(redlock_masters("redis://h:1/").unwrap(), None);
        assert_eq!(
            redlock_masters("redlock://a:1,b:2,c:3").unwrap().unwrap(),
            ["redis://a:1/", "redis://b:2/", "redis://c:3/"]
        );
        assert_eq!(
            redlock_masters("redlock://u:p@a:1,b:2/3").unwrap().unwrap(),
            ["redis://u:p@a:1/3", "redis://u:p@b:2/3"]
        );
        assert_eq!(
            redlock_masters("redlock://redis://a:1/,rediss://b:2/")
                .unwrap()
                .unwrap(),
            ["redis://a:1/", "rediss://b:2/"]
        );
        let bad = redlock_masters("redlock://a:1,,b:2")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("expected redlock://"), "{bad}");
    }
}
