//! Replicated deployments on loopback ports: a master with its replicas and the sentinels
//! that watch them, and a Redis Cluster of three masters with a replica each. All real
//! processes, all stopped on drop. And the URL of independent servers as Redlock masters.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::binaries::binaries;
use crate::certs::Certificates;
use crate::{RedisServer, free_port};

/// The name the sentinels monitor the master as.
pub const SERVICE: &str = "mymaster";
/// How long a master may be silent before the sentinels call it down (short, for tests).
const DOWN_AFTER_MS: u64 = 500;
/// How long the deployment may take to settle (replicas synced, sentinels agreeing).
const SETTLE: Duration = Duration::from_secs(20);

/// One `redis-server --sentinel` process.
#[derive(Debug)]
pub struct SentinelProcess {
    /// Plain TCP, for the harness.
    port: u16,
    /// TLS, for clients, when the deployment serves TLS.
    tls_port: Option<u16>,
    dir: PathBuf,
    child: Option<Child>,
}

impl SentinelProcess {
    fn start(master_port: u16, certs: Option<&Certificates>) -> io::Result<Self> {
        let port = free_port();
        let tls_port = certs.map(|_| free_port());
        let tls = match (certs, tls_port) {
            (Some(certs), Some(tls_port)) => format!(
                "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients no\ntls-replication yes\n",
                certs.path("server.pem"),
                certs.path("server.key"),
                certs.path("ca.pem"),
            ),
            _ => String::new(),
        };
        let dir =
            std::env::temp_dir().join(format!("rlock-sentinel-{}-{port}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let conf = dir.join("sentinel.conf");
        fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                 dir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {SERVICE} 3000\n\
                 sentinel parallel-syncs {SERVICE} 2\n{tls}",
                dir = dir.display()
            ),
        )?;
        let child = Command::new(&binaries().server)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self {
            port,
            tls_port,
            dir,
            child: Some(child),
        })
    }

    /// The sentinel's `host:port` for clients (its TLS port when it serves TLS).
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.tls_port.unwrap_or(self.port))
    }

    fn query(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let mut conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
        conn.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut conn)
    }

    /// The age in seconds of each connection subscribed to a channel on this sentinel (from
    /// `CLIENT LIST`; a sentinel keeps no command statistics).
    pub fn subscriber_ages(&self) -> Vec<u64> {
        let Ok(redis::Value::BulkString(list)) = self.query(&["CLIENT", "LIST"]) else {
            return Vec::new();
        };
        let field = |line: &str, name: &str| -> Option<u64> {
            let prefix = format!("{name}=");
            line.split(' ')
                .find_map(|f| f.strip_prefix(prefix.as_str()))?
                .parse()
                .ok()
        };
        String::from_utf8_lossy(&list)
            .lines()
            .filter(|line| field(line, "sub").is_some_and(|n| n > 0))
            .filter_map(|line| field(line, "age"))
            .collect()
    }

    /// The port this sentinel names as master now.
    pub fn master_port(&self) -> Option<u16> {
        let reply = self
            .query(&["SENTINEL", "get-master-addr-by-name", SERVICE])
            .ok()?;
        let addr: Vec<String> = redis::from_redis_value(reply).ok()?;
        addr.get(1)?.parse().ok()
    }

    /// How many replicas and other sentinels it knows.
    fn known(&self) -> Option<(usize, usize)> {
        let replicas = self.query(&["SENTINEL", "replicas", SERVICE]).ok()?;
        let sentinels = self.query(&["SENTINEL", "sentinels", SERVICE]).ok()?;
        let count = |v: redis::Value| match v {
            redis::Value::Array(items) => items.len(),
            _ => 0,
        };
        Some((count(replicas), count(sentinels)))
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A master with two replicas and three sentinels (quorum 2).
#[derive(Debug)]
pub struct SentinelDeployment {
    /// The servers: index 0 starts as the master.
    pub servers: Vec<RedisServer>,
    /// The sentinels watching them.
    pub sentinels: Vec<SentinelProcess>,
    /// With TLS: the certificates, and each server's TLS port (the one clients, replication
    /// and the sentinels use; the plain port stays for the harness).
    tls: Option<(Certificates, Vec<u16>)>,
}

impl SentinelDeployment {
    /// Starts the deployment and waits until the replicas are in sync and every sentinel knows
    /// both replicas and the two other sentinels.
    ///
    /// # Panics
    ///
    /// When it does not settle within 20 s.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Like [`start`](Self::start), with every server and sentinel also serving TLS (on a
    /// certificate of a private authority: see [`ca`](Self::ca)), and replicating over it.
    ///
    /// # Panics
    ///
    /// When `openssl` is missing, or as [`start`](Self::start).
    pub fn start_tls() -> Self {
        Self::start_with(Some(Certificates::make("sentinel-tls")))
    }

    fn start_with(certs: Option<Certificates>) -> Self {
        let tls_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let start = |replica_of: Option<u16>, tls_port: u16| {
            let mut args: Vec<String> = Vec::new();
            if let Some(certs) = &certs {
                args.extend(certs.server_args(tls_port));
                args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
            }
            if let Some(master) = replica_of {
                args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            RedisServer::start_with_args(&args)
        };
        let master = start(None, tls_ports[0]);
        // Replication and the sentinels go over TLS when the deployment serves it.
        let master_port = if certs.is_some() {
            tls_ports[0]
        } else {
            master.port()
        };
        let mut servers = vec![master];
        for &tls_port in &tls_ports[1..] {
            servers.push(start(Some(master_port), tls_port));
        }
        for server in &servers {
            server_config(server, "repl-diskless-sync-delay", "0");
        }
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|_| SentinelProcess::start(master_port, certs.as_ref()).expect("start a sentinel"))
            .collect();
        let deployment = Self {
            servers,
            sentinels,
            tls: certs.map(|certs| (certs, tls_ports)),
        };
        let deadline = Instant::now() + SETTLE;
        loop {
            let synced = deployment.servers[1..]
                .iter()
                .all(|r| info_field(r, "master_link_status").as_deref() == Some("up"));
            let agreed = deployment
                .sentinels
                .iter()
                .all(|s| s.known() == Some((2, 2)));
            if synced && agreed {
                return deployment;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel deployment did not settle within {SETTLE:?} (replicas synced: \
                 {synced}; replicas and other sentinels known by each sentinel: {:?})",
                deployment
                    .sentinels
                    .iter()
                    .map(SentinelProcess::known)
                    .collect::<Vec<_>>()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis+sentinel://s1,s2,s3/mymaster` (`rediss+sentinel://` with TLS).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(SentinelProcess::addr).collect();
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The certificate (PEM) of the authority that signed the servers' and sentinels' TLS
    /// certificates; `None` without TLS.
    pub fn ca(&self) -> Option<Vec<u8>> {
        self.tls.as_ref().map(|(certs, _)| certs.ca())
    }

    /// The server listening on `port` (plain or TLS).
    fn server_on(&self, port: u16) -> Option<&RedisServer> {
        self.servers.iter().enumerate().find_map(|(i, server)| {
            let tls_port = self.tls.as_ref().map(|(_, ports)| ports[i]);
            (server.port() == port || tls_port == Some(port)).then_some(server)
        })
    }

    /// The server the sentinels name master now (by majority of those answering).
    pub fn master(&self) -> Option<&RedisServer> {
        let mut ports: Vec<u16> = self
            .sentinels
            .iter()
            .filter_map(SentinelProcess::master_port)
            .collect();
        ports.sort_unstable();
        let port = *ports.get(ports.len() / 2)?;
        self.server_on(port)
    }

    /// Kills the current master and waits until the sentinels name another one that answers
    /// as a master.
    ///
    /// # Panics
    ///
    /// When no failover completes within 20 s.
    pub fn fail_over(&self) -> &RedisServer {
        let old = self.master().expect("a master before the failover");
        old.kill();
        self.new_master_after(old.port())
    }

    /// Asks the sentinels for a failover (`SENTINEL FAILOVER`), as an operator does before
    /// maintenance: the old master stays up and becomes a replica of the new one. Waits until
    /// the new one answers as a master.
    ///
    /// # Panics
    ///
    /// When no failover completes within 20 s.
    pub fn switch_over(&self) -> &RedisServer {
        let old = self.master().expect("a master before the failover");
        self.sentinels[0]
            .query(&["SENTINEL", "FAILOVER", SERVICE])
            .expect("SENTINEL FAILOVER");
        self.new_master_after(old.port())
    }

    /// Like [`switch_over`](Self::switch_over), with every failure returned instead of a
    /// panic.
    ///
    /// # Errors
    ///
    /// The sentinel's refusal (a failover already in progress, no master known), or a
    /// failover that did not complete within 20 s (no replica in sync to promote).
    pub fn try_switch_over(&self) -> Result<&RedisServer, String> {
        let old = self.master().ok_or("no master known")?;
        self.sentinels[0]
            .query(&["SENTINEL", "FAILOVER", SERVICE])
            .map_err(|e| format!("SENTINEL FAILOVER: {e:?}"))?;
        self.try_new_master_after(old.port())
    }

    /// Like [`fail_over`](Self::fail_over), with every failure returned instead of a panic
    /// (the old master stays killed).
    ///
    /// # Errors
    ///
    /// No master known, or no failover within 20 s.
    pub fn try_fail_over(&self) -> Result<&RedisServer, String> {
        let old = self.master().ok_or("no master known")?;
        old.kill();
        self.try_new_master_after(old.port())
    }

    /// Waits until every server but the master is its replica, in sync (so that a failover
    /// has a replica to promote).
    ///
    /// # Errors
    ///
    /// When that takes over 20 s.
    pub fn try_wait_synced(&self) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Some(master) = self.master() {
                let port = master.port().to_string();
                let synced = self
                    .servers
                    .iter()
                    .filter(|s| s.port() != master.port())
                    .all(|s| {
                        info_field(s, "master_port").as_deref() == Some(port.as_str())
                            && info_field(s, "master_link_status").as_deref() == Some("up")
                    });
                if synced {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("the replicas are not in sync after {SETTLE:?}"));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn new_master_after(&self, old_port: u16) -> &RedisServer {
        match self.try_new_master_after(old_port) {
            Ok(new) => new,
            Err(e) => panic!("{e}"),
        }
    }

    fn try_new_master_after(&self, old_port: u16) -> Result<&RedisServer, String> {
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Some(new) = self.master()
                && new.port() != old_port
                && info_field(new, "role").as_deref() == Some("master")
            {
                return Ok(new);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no failover within {SETTLE:?} after the master's port {old_port}"
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A short-lived connection for the harness's own queries, `None` when the server does not
/// answer within half a second.
fn admin(server: &RedisServer) -> Option<redis::Connection> {
    let conn = server
        .redis_client()
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    Some(conn)
}

/// A field of the server's `INFO replication`, `None` when it does not answer.
fn info_field(server: &RedisServer, field: &str) -> Option<String> {
    let mut conn = admin(server)?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

/// How long `redis-cli --cluster create` may run before it is stopped.
pub const CREATE_PATIENCE: Duration = Duration::from_secs(60);

/// How many times [`ClusterDeployment::start`] starts a cluster before it gives up.
pub const CREATE_TRIES: usize = 3;

/// Runs `redis-cli --cluster create` over `addrs`, for at most [`CREATE_PATIENCE`]: what it
/// printed, when it failed or was stopped.
fn create_cluster(addrs: &[String]) -> Result<(), String> {
    let mut child = Command::new(&binaries().cli)
        .arg("--cluster")
        .arg("create")
        .args(addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} did not run ({e}); install it with `apt-get install -y redis-tools`",
                binaries().cli.display()
            )
        });
    let deadline = Instant::now() + CREATE_PATIENCE;
    let finished = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                break None;
            }
        }
    };
    let output = child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    match finished {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(format!("it failed ({status}): {output}")),
        None => Err(format!(
            "it did not finish within {CREATE_PATIENCE:?}: {output}"
        )),
    }
}

/// A Redis Cluster of three masters, each with one replica, made with
/// `redis-cli --cluster create`; a node fails over after 1 s of silence.
#[derive(Debug)]
pub struct ClusterDeployment {
    /// The six nodes; which are masters changes with failovers.
    pub nodes: Vec<RedisServer>,
}

impl ClusterDeployment {
    /// Starts the nodes, creates the cluster and waits until every node reports it healthy.
    /// `redis-cli --cluster create` waits for the nodes to agree with no limit of its own,
    /// and on a loaded machine they once in a while never do: it is stopped after
    /// [`CREATE_PATIENCE`], and the whole cluster started again on new nodes, up to
    /// [`CREATE_TRIES`] times.
    ///
    /// # Panics
    ///
    /// When `redis-cli` is missing, or no try forms the cluster.
    pub fn start() -> Self {
        let mut failures = Vec::new();
        for _ in 0..CREATE_TRIES {
            let nodes: Vec<RedisServer> = (0..6)
                .map(|_| {
                    RedisServer::start_with_args(&[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-node-timeout",
                        "1000",
                        // Replicas sync at once instead of after the default 5 s.
                        "--repl-diskless-sync-delay",
                        "0",
                    ])
                })
                .collect();
            let addrs: Vec<String> = nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port()))
                .collect();
            match create_cluster(&addrs) {
                Ok(()) => {
                    let deployment = Self { nodes };
                    deployment.wait_healthy(&[]);
                    return deployment;
                }
                // The nodes stop as they drop; the next try starts new ones.
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "redis-cli --cluster create did not form a cluster in {CREATE_TRIES} tries: {}",
            failures.join("; ")
        );
    }

    /// Whether its nodes have sharded pub/sub (Redis 7.0 and later, Valkey), on which
    /// rlock's waiters listen for their key's releases; without it they check in on a timer.
    pub fn has_sharded_pubsub(&self) -> bool {
        self.nodes[0].version().has_sharded_pubsub()
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The nodes that are masters now.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| info_field(n, "role").as_deref() == Some("master"))
            .collect()
    }

    /// The master serving `slot` now, as the live masters' `CLUSTER SLOTS` say.
    pub fn master_of_slot(&self, slot: u16) -> Option<&RedisServer> {
        let masters = self.masters();
        let mut conn = admin(masters.first()?)?;
        let ranges: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut conn)
            .ok()?
            .into_iter()
            .filter_map(|range| {
                let redis::Value::Array(parts) = range else {
                    return None;
                };
                let start: u16 = redis::from_redis_value(parts.first()?.clone()).ok()?;
                let end: u16 = redis::from_redis_value(parts.get(1)?.clone()).ok()?;
                let redis::Value::Array(owner) = parts.get(2)?.clone() else {
                    return None;
                };
                let host: String = redis::from_redis_value(owner.first()?.clone()).ok()?;
                let port: u16 = redis::from_redis_value(owner.get(1)?.clone()).ok()?;
                Some((start, end, (host, port)))
            })
            .collect();
        let (_, _, (_, port)) = ranges
            .into_iter()
            .find(|(s, e, _)| (*s..=*e).contains(&slot))?;
        masters.into_iter().find(|m| m.port() == port)
    }

    /// The master serving `key`'s slot now.
    pub fn master_of_key(&self, key: &str) -> Option<&RedisServer> {
        let mut conn = admin(self.masters().first()?)?;
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .ok()?;
        self.master_of_slot(slot)
    }

    /// How many masters serve `keys`' slots now: a test that means its keys to spread over
    /// the cluster checks that they do.
    ///
    /// # Panics
    ///
    /// When a key's master cannot be found.
    pub fn masters_serving(&self, keys: &[&str]) -> usize {
        let mut ports: Vec<u16> = keys
            .iter()
            .map(|key| {
                self.master_of_key(key)
                    .unwrap_or_else(|| panic!("no master serves `{key}`"))
                    .port()
            })
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports.len()
    }

    /// Waits until every node but `down` reports `cluster_state:ok`, with three masters and
    /// every live replica in sync with its master (a replica that never synced cannot take
    /// over).
    ///
    /// # Panics
    ///
    /// After 20 s.
    pub fn wait_healthy(&self, down: &[u16]) {
        if let Err(view) = self.try_wait_healthy(down) {
            panic!("{view}");
        }
    }

    /// [`wait_healthy`](Self::wait_healthy) that gives up with each node's view instead of
    /// panicking.
    pub fn try_wait_healthy(&self, down: &[u16]) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let healthy = self
                .nodes
                .iter()
                .filter(|n| !down.contains(&n.port()))
                .all(|n| cluster_info(n).as_deref() == Some("ok"));
            let synced = self
                .nodes
                .iter()
                .filter(|n| !down.contains(&n.port()))
                .filter(|n| info_field(n, "role").as_deref() == Some("slave"))
                .all(|n| {
                    let link = info_field(n, "master_link_status");
                    link.as_deref() == Some("up") || down_master(n, down)
                });
            if healthy && synced && self.masters().len() == 3 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let view = self
                    .nodes
                    .iter()
                    .filter(|n| !down.contains(&n.port()))
                    .map(|n| {
                        format!(
                            "{}: {:?} {:?}\n{}",
                            n.port(),
                            cluster_info(n),
                            info_field(n, "role"),
                            n.log_tail()
                        )
                    })
                    .collect::<Vec<_>>();
                return Err(format!(
                    "the cluster is not healthy after {SETTLE:?}:\n{}",
                    view.join("\n")
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills `master` and waits until its replica has taken over and the cluster is healthy.
    pub fn fail_over(&self, master: &RedisServer) {
        let port = master.port();
        master.kill();
        self.wait_healthy(&[port]);
    }

    /// Kills `master`, waits for its replica to take over, then restarts it (it rejoins as
    /// the new master's replica, from its `nodes.conf`) and waits until it is in sync.
    pub fn kill_and_rejoin(&self, master: &RedisServer) -> Result<(), String> {
        let port = master.port();
        master.kill();
        let promoted = self.try_wait_healthy(&[port]);
        // Back whatever happened: without a replica that took over, it is the master again.
        master.restart();
        promoted.and(self.try_wait_healthy(&[]))
    }

    /// An operator's switch-over: `CLUSTER FAILOVER` on `master`'s replica, which waits for
    /// the replica to catch up before it takes over; the old master becomes its replica.
    pub fn switch_over(&self, master: &RedisServer) -> Result<(), String> {
        let port = master.port().to_string();
        let replica = self
            .nodes
            .iter()
            .find(|n| info_field(n, "master_port").as_deref() == Some(port.as_str()))
            .ok_or_else(|| format!("no replica of {port}"))?;
        let mut conn = admin(replica).ok_or("the replica does not answer")?;
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query::<()>(&mut conn)
            .map_err(|e| format!("CLUSTER FAILOVER: {e}"))?;
        let deadline = Instant::now() + SETTLE;
        while info_field(replica, "role").as_deref() != Some("master") {
            if Instant::now() >= deadline {
                return Err(format!("{} was not promoted", replica.port()));
            }
            thread::sleep(Duration::from_millis(50));
        }
        self.try_wait_healthy(&[])
    }
}

/// `cluster_state` of a node's `CLUSTER INFO`.
fn cluster_info(node: &RedisServer) -> Option<String> {
    let mut conn = admin(node)?;
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("cluster_state:"))
        .map(|v| v.trim().to_owned())
}

/// Whether replica `node` follows a master in `down` (it cannot be in sync with it).
fn down_master(node: &RedisServer, down: &[u16]) -> bool {
    info_field(node, "master_port")
        .and_then(|p| p.parse::<u16>().ok())
        .is_some_and(|p| down.contains(&p))
}

/// `CONFIG SET name value` on a running server.
fn server_config(server: &RedisServer, name: &str, value: &str) {
    if let Ok(mut conn) = server
        .redis_client()
        .get_connection_with_timeout(Duration::from_millis(500))
    {
        let _: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut conn);
    }
}

/// `redlock://127.0.0.1:p1,127.0.0.1:p2,…`: `masters` as the masters of a Redlock client.
pub fn redlock_url(masters: &[RedisServer]) -> String {
    let hosts: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port()))
        .collect();
    format!("redlock://{}", hosts.join(","))
}
