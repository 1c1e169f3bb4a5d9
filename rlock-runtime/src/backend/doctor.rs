//! What a server lets this client do, found by doing it: the server and its version, the
//! round trip and the clock's offset, and every command rlock sends (its scripts' own calls
//! included), the subscription its waiters take and the announcement a release makes, each
//! tried once as this client's user. [`LockClient::diagnose`](crate::LockClient::diagnose)
//! turns the reports into what rlock will therefore do.
//!
//! Nothing is left behind: the commands run on two keys of a probe name inside the client's
//! namespace (so that an ACL's key patterns apply as to a lock): one that never exists, and
//! one string set for 5 s, which every list, sorted-set and hash write meets as `WRONGTYPE`,
//! so that Redis checks the user's right to the command and then writes nothing.

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Cmd, RedisError, Value};

use super::pubsub::{Connector, Heard, Session, Subscribed};
use super::scripted::Scripted;
use super::topology::{Announcing, Topology, hello_field, release_channel};
use crate::error::{LockError, Operation};

/// What one probe of a server found.
///
/// Read from [`ServerReport`]s and [`Diagnosis`](crate::Diagnosis); see their examples.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckOutcome {
    /// The server ran it (an error from the command's own semantics, such as `WRONGTYPE`,
    /// counts: the user was allowed to send it).
    Allowed,
    /// The server refused it to this user (`NOPERM`, or a managed service's own refusal),
    /// with the server's words.
    Refused(String),
    /// The server does not have it (`unknown command`), with the server's words.
    Missing(String),
    /// No answer could tell: the connection failed or the call timed out.
    Unknown(String),
}

impl CheckOutcome {
    /// Whether the server ran it.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed)
    }

    fn from_reply(reply: &Result<Value, RedisError>) -> Self {
        let Err(e) = reply else {
            return Self::Allowed;
        };
        let words = e.to_string();
        let lower = words.to_ascii_lowercase();
        if e.code() == Some("NOPERM") || lower.contains("noperm") || lower.contains("not allowed") {
            Self::Refused(words)
        } else if lower.contains("unknown command") || lower.contains("unknown subcommand") {
            Self::Missing(words)
        } else if e.code().is_some() {
            // Any other reply from the server: the command ran and answered for itself.
            Self::Allowed
        } else {
            Self::Unknown(words)
        }
    }
}

impl fmt::Display for CheckOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Allowed => f.write_str("allowed"),
            Self::Refused(why) => write!(f, "refused: {why}"),
            Self::Missing(why) => write!(f, "missing: {why}"),
            Self::Unknown(why) => write!(f, "unknown: {why}"),
        }
    }
}

/// One thing rlock needs of a server, tried.
///
/// Read from [`ServerReport`]s and [`Diagnosis`](crate::Diagnosis); see their examples.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// The command as an ACL names it (`evalsha`, `pubsub|numsub`), or what was tried
    /// (`announcement heard`).
    pub name: &'static str,
    /// What rlock uses it for.
    pub needed_for: &'static str,
    /// What the server did.
    pub outcome: CheckOutcome,
}

/// What one server (a Redlock master, the one server, the sentinels' master, or a cluster
/// node) answered to the probes.
///
/// ```no_run
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// for server in client.diagnose().await?.servers {
///     println!("{:?} {:?}, round trip {:?}", server.server, server.version, server.round_trip);
///     for check in server.checks.iter().filter(|c| !c.outcome.is_allowed()) {
///         println!("{} ({}): {}", check.name, check.needed_for, check.outcome);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReport {
    /// `redis` or `valkey`, from `HELLO` or `INFO server`; `None` when both were refused.
    pub server: Option<String>,
    /// Its version (Valkey's own, not the Redis version it answers as).
    pub version: Option<String>,
    /// `standalone`, `sentinel` or `cluster`, as the server says.
    pub mode: Option<String>,
    /// The median of five `PING`s.
    pub round_trip: Duration,
    /// The server's clock (`TIME`) minus the client's at the middle of the call, in
    /// milliseconds; `None` when `TIME` was refused. Leases are counted by the server's
    /// clock, so an offset costs nothing; a client whose own clock drifts fast does.
    pub clock_offset_ms: Option<i64>,
    /// Replicas connected to this master (`ROLE`); `None` when `ROLE` was refused.
    pub replicas: Option<u32>,
    /// Every probe, in the order tried.
    pub checks: Vec<Check>,
}

impl ServerReport {
    /// The check named `name`, if it was tried.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|check| check.name == name)
    }

    /// Whether `name` was tried and allowed.
    pub fn allows(&self, name: &str) -> bool {
        self.check(name)
            .is_some_and(|check| check.outcome.is_allowed())
    }
}

/// How a probe's arguments name its keys and channel.
#[derive(Clone, Copy)]
enum Arg {
    /// The string set for the probe's 5 s.
    Set,
    /// A key that never exists.
    Absent,
    /// The probe's announcement channel.
    Channel,
    Text(&'static str),
}

use Arg::{Absent, Channel, Set, Text};

/// The commands every kind sends, with harmless arguments, as the README's ACL line lists
/// them (its `+subscribe +unsubscribe` are the subscription's own check). `SET` comes first:
/// it makes the key that the writes after it meet as `WRONGTYPE`.
const COMMANDS: &[(&str, &str, &[Arg])] = &[
    (
        "set",
        "the acquire, and `SET NX` without a script",
        &[Set, Text("doctor"), Text("PX"), Text("5000")],
    ),
    ("get", "reading a lock's holder", &[Set]),
    ("del", "the release", &[Absent]),
    ("exists", "the scripts' checks", &[Absent]),
    ("pexpire", "renewals", &[Absent, Text("5000")]),
    (
        "pexpireat",
        "leases ended by the scripts",
        &[Absent, Text("1")],
    ),
    ("pttl", "a holder's lease left", &[Absent]),
    ("time", "the scripts' clock for read and permit leases", &[]),
    ("rpush", "joining a queue", &[Set, Text("x")]),
    (
        "rpushx",
        "joining a queue behind others",
        &[Absent, Text("x")],
    ),
    ("lpush", "a waiter put back at the head", &[Set, Text("x")]),
    ("lpop", "a release's hand-off", &[Absent]),
    ("rpop", "a queue's bound", &[Absent]),
    ("lpos", "a waiter finding its entry", &[Absent, Text("x")]),
    ("lrem", "a waiter leaving", &[Absent, Text("0"), Text("x")]),
    ("llen", "`inspect`'s count of waiters", &[Absent]),
    ("lindex", "a semaphore's arrivals", &[Absent, Text("0")]),
    ("lrange", "`set_permits`", &[Absent, Text("0"), Text("0")]),
    ("lset", "`set_permits`", &[Absent, Text("0"), Text("x")]),
    (
        "pubsub|numsub",
        "a release finding a live waiter",
        &[Text("NUMSUB"), Channel],
    ),
    ("wait", "`min_replicas`", &[Text("0"), Text("1")]),
    ("role", "Sentinel, and the Cluster feed's health check", &[]),
    ("type", "telling kinds apart", &[Absent]),
    (
        "zadd",
        "semaphores and read leases",
        &[Set, Text("0"), Text("m")],
    ),
    ("zrem", "semaphores and read leases", &[Absent, Text("m")]),
    ("zscore", "semaphores and read leases", &[Absent, Text("m")]),
    (
        "zmscore",
        "semaphores and read leases",
        &[Absent, Text("m")],
    ),
    (
        "zcount",
        "semaphores and read leases",
        &[Absent, Text("0"), Text("1")],
    ),
    ("zcard", "semaphores and read leases", &[Absent]),
    (
        "zrangebyscore",
        "semaphores and read leases",
        &[Absent, Text("0"), Text("1")],
    ),
    (
        "zrevrangebyscore",
        "semaphores and read leases",
        &[Absent, Text("1"), Text("0")],
    ),
    (
        "zremrangebyscore",
        "semaphores and read leases",
        &[Absent, Text("0"), Text("1")],
    ),
    ("hset", "the holder card", &[Set, Text("f"), Text("v")]),
    ("hdel", "the holder card", &[Absent, Text("f")]),
    ("hlen", "the holder card", &[Absent]),
    ("hmget", "the holder card", &[Absent, Text("f")]),
];

/// The names the probes check, as an ACL line names the commands (`+name`): every command
/// above, the scripts' three, and the subscription's.
#[cfg(test)]
fn command_names() -> impl Iterator<Item = &'static str> {
    [
        "ping",
        "evalsha",
        "eval",
        "script|load",
        "subscribe",
        "unsubscribe",
        "publish",
    ]
    .into_iter()
    .chain(COMMANDS.iter().map(|(name, ..)| *name))
}

/// The shape of the deployment a client reaches.
///
/// Read from [`ServerReport`]s and [`Diagnosis`](crate::Diagnosis); see their examples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deployment {
    /// One server, or the master the sentinels name (`HELLO`'s mode tells which).
    Server,
    /// A Redis Cluster.
    Cluster,
    /// Independent Redlock masters, each reported.
    Redlock,
    /// The in-process backend: no server.
    InProcess,
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Server => "one server (or the sentinels' master)",
            Self::Cluster => "Redis Cluster",
            Self::Redlock => "Redlock masters",
            Self::InProcess => "in process",
        })
    }
}

impl super::Backend {
    /// Its shape, and what each of its servers answered to the probes of `names`.
    pub(crate) async fn diagnose(&self, names: &ProbeNames) -> (Deployment, Vec<ServerReport>) {
        match self {
            Self::Redis(node) => (Deployment::Server, vec![node.diagnose(names).await]),
            Self::Cluster(store) => (Deployment::Cluster, vec![store.diagnose(names).await]),
            Self::Redlock(redlock) => {
                let mut reports = Vec::new();
                for node in redlock.nodes() {
                    reports.push(node.diagnose(names).await);
                }
                (Deployment::Redlock, reports)
            }
            Self::Memory(_) => (Deployment::InProcess, Vec::new()),
        }
    }
}

/// A probe's keys: its name in the client's namespace, set for 5 s, then deleted; and a key
/// beside it that is never written.
pub(crate) struct ProbeNames {
    pub(crate) set: String,
    pub(crate) absent: String,
}

impl<D: Topology + Connector> Scripted<D> {
    /// Tries everything rlock needs of this server as this client's user (see the module).
    pub(crate) async fn diagnose(&self, names: &ProbeNames) -> ServerReport {
        // A release channel of the probe's name, as its waiters would listen on, with a
        // suffix of its own, as each client's is.
        let announcing = self.topology.announcing(&names.set);
        let channel = match &announcing {
            Announcing::Plain => format!("{}:doctor", release_channel(&names.set)),
            Announcing::Sharded(channel) => format!("{channel}:doctor"),
        };
        let sharded = announcing.command() == "SPUBLISH";
        let mut checks = Vec::new();
        let mut round_trips = Vec::new();
        let mut ping = CheckOutcome::Allowed;
        for _ in 0..5 {
            let started = Instant::now();
            let reply = self.probe(redis::cmd("PING")).await;
            round_trips.push(started.elapsed());
            if reply.is_err() {
                ping = CheckOutcome::from_reply(&reply);
                break;
            }
        }
        round_trips.sort();
        let round_trip = round_trips[round_trips.len() / 2];
        checks.push(check("ping", "the feed's health check", ping));

        let (hello, (server, version, mode)) = self.identify().await;
        let clock_offset_ms = self.clock_offset().await;

        // The scripts: rlock runs every acquire and release as one.
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg("return 1");
        let loaded = self.probe(load).await;
        checks.push(check(
            "script|load",
            "loading the scripts",
            CheckOutcome::from_reply(&loaded),
        ));
        let mut evalsha = redis::cmd("EVALSHA");
        match &loaded {
            Ok(Value::BulkString(sha)) => evalsha.arg(sha.as_slice()),
            _ => evalsha.arg("0000000000000000000000000000000000000000"),
        };
        evalsha.arg(1).arg(&names.absent);
        let evalsha = self.probe(evalsha).await;
        checks.push(check(
            "evalsha",
            "every acquire, release and renewal",
            CheckOutcome::from_reply(&evalsha),
        ));
        let mut eval = redis::cmd("EVAL");
        eval.arg("return 1").arg(1).arg(&names.absent);
        checks.push(check(
            "eval",
            "a script the server lost (a restart, a failover)",
            CheckOutcome::from_reply(&self.probe(eval).await),
        ));

        for (name, needed_for, args) in COMMANDS {
            let mut cmd = Cmd::new();
            let mut words = name.split('|');
            cmd.arg(words.next().unwrap_or(name));
            for arg in *args {
                match arg {
                    Set => cmd.arg(&names.set),
                    Absent => cmd.arg(&names.absent),
                    Channel => cmd.arg(&channel),
                    Text(text) => cmd.arg(*text),
                };
            }
            let outcome = CheckOutcome::from_reply(&self.probe(cmd).await);
            checks.push(check(name, needed_for, outcome));
        }
        let mut del = redis::cmd("DEL");
        del.arg(&names.set);
        let _ = self.probe(del).await;
        if sharded {
            let mut numsub = redis::cmd("PUBSUB");
            numsub.arg("SHARDNUMSUB").arg(&channel);
            let outcome = CheckOutcome::from_reply(&self.probe(numsub).await);
            checks.push(check(
                "pubsub|shardnumsub",
                "a release finding a live waiter, on a cluster",
                outcome,
            ));
        }
        checks.push(check("hello", "a cluster's sharded pub/sub, learnt", hello));

        checks.extend(self.announcements(&channel, sharded).await);
        let replicas = self.replicas().await;
        ServerReport {
            server,
            version,
            mode,
            round_trip,
            clock_offset_ms,
            replicas,
            checks,
        }
    }

    /// One command on the client's connection, its reply or the server's error as it came:
    /// only a failed connection or an expired timeout is rlock's own error.
    async fn probe(&self, cmd: Cmd) -> Result<Value, RedisError> {
        let sent = self
            .conn
            .call(
                Operation::Diagnose,
                self.conn.timeout(),
                |mut c| async move { Ok(cmd.query_async::<Value>(&mut c).await) },
            )
            .await;
        sent.unwrap_or_else(|e: LockError| {
            Err(RedisError::from((
                redis::ErrorKind::Io,
                "no answer",
                e.to_string(),
            )))
        })
    }

    /// How `HELLO` (without a protocol version, which keeps the connection's) was answered,
    /// and the server, version and mode, from it or, refused, from `INFO server`.
    async fn identify(
        &self,
    ) -> (
        CheckOutcome,
        (Option<String>, Option<String>, Option<String>),
    ) {
        let hello = self.probe(redis::cmd("HELLO")).await;
        let outcome = CheckOutcome::from_reply(&hello);
        if let Ok(hello) = hello {
            let field = |name: &str| hello_field(&hello, name);
            return (outcome, (field("server"), field("version"), field("mode")));
        }
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let Ok(Value::BulkString(text)) = self.probe(info).await.map(normalize) else {
            return (outcome, (None, None, None));
        };
        let text = String::from_utf8_lossy(&text).into_owned();
        let line = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let found = match line("valkey_version") {
            Some(version) => (Some("valkey".into()), Some(version), line("redis_mode")),
            None => (
                Some("redis".into()),
                line("redis_version"),
                line("redis_mode"),
            ),
        };
        (outcome, found)
    }

    /// The server's clock minus the client's at the middle of a `TIME` call, in ms.
    async fn clock_offset(&self) -> Option<i64> {
        let before = now_micros();
        let reply = self.probe(redis::cmd("TIME")).await.ok()?;
        let after = now_micros();
        let (secs, micros): (i64, i64) = redis::from_redis_value(reply).ok()?;
        let server = secs * 1_000_000 + micros;
        Some((server - (before + after) / 2) / 1000)
    }

    /// Replicas connected to this master, from `ROLE`.
    async fn replicas(&self) -> Option<u32> {
        let Ok(Value::Array(role)) = self.probe(redis::cmd("ROLE")).await else {
            return None;
        };
        match role.get(2) {
            Some(Value::Array(replicas)) => u32::try_from(replicas.len()).ok(),
            _ => Some(0),
        }
    }

    /// Subscribes `channel` as the release feed would, announces on it as a release would,
    /// and waits for the announcement to come back.
    async fn announcements(&self, channel: &str, sharded: bool) -> Vec<Check> {
        let topology = &self.topology;
        let timeout = self.conn.timeout();
        let (publish, publish_name, subscribe_name, unsubscribe_name) = if sharded {
            ("SPUBLISH", "spublish", "ssubscribe", "sunsubscribe")
        } else {
            ("PUBLISH", "publish", "subscribe", "unsubscribe")
        };
        let mut cmd = redis::cmd(publish);
        cmd.arg(channel).arg("doctor");
        let mut session = match tokio::time::timeout(timeout, topology.connect()).await {
            Ok(Ok(session)) => session,
            Ok(Err(e)) => {
                let outcome = CheckOutcome::Unknown(format!("no subscribing connection: {e}"));
                let published = CheckOutcome::from_reply(&self.probe(cmd).await);
                return vec![
                    check(subscribe_name, "waiters told of releases", outcome),
                    check(publish_name, "a release's announcement", published),
                ];
            }
            Err(_) => {
                let outcome = CheckOutcome::Unknown("no subscribing connection in time".into());
                let published = CheckOutcome::from_reply(&self.probe(cmd).await);
                return vec![
                    check(subscribe_name, "waiters told of releases", outcome),
                    check(publish_name, "a release's announcement", published),
                ];
            }
        };
        let subscribed = match session.subscribe(channel, timeout).await {
            Subscribed::Confirmed => CheckOutcome::Allowed,
            Subscribed::Refused(e) => CheckOutcome::from_reply(&Err(e)),
            Subscribed::Failed => CheckOutcome::Unknown("the subscription got no answer".into()),
        };
        let published = CheckOutcome::from_reply(&self.probe(cmd).await);
        let heard = if subscribed.is_allowed() && published.is_allowed() {
            match tokio::time::timeout(timeout, session.next_heard()).await {
                Ok(Some(Heard::Announcement(a))) if a.channel == channel => CheckOutcome::Allowed,
                Ok(_) => CheckOutcome::Unknown("the subscription ended unheard".into()),
                Err(_) => CheckOutcome::Unknown(format!("nothing heard within {timeout:?}")),
            }
        } else {
            CheckOutcome::Unknown("not tried: subscribing or announcing failed".into())
        };
        let left = if subscribed.is_allowed() && session.unsubscribe(channel, timeout).await {
            CheckOutcome::Allowed
        } else {
            CheckOutcome::Unknown("not subscribed, or no answer".into())
        };
        vec![
            check(subscribe_name, "waiters told of releases", subscribed),
            check(publish_name, "a release's announcement", published),
            check("announcement heard", "herd-free waiting", heard),
            check(unsubscribe_name, "a waiter's key left", left),
        ]
    }
}

fn check(name: &'static str, needed_for: &'static str, outcome: CheckOutcome) -> Check {
    Check {
        name,
        needed_for,
        outcome,
    }
}

/// A RESP3 verbatim string read as a bulk one.
fn normalize(value: Value) -> Value {
    match value {
        Value::VerbatimString { text, .. } => Value::BulkString(text.into_bytes()),
        other => other,
    }
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_missing_commands_are_told_from_answers() {
        let refused: Result<Value, RedisError> = Err(RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "NOPERM",
            "User rlock has no permissions to run the 'wait' command".to_owned(),
        )));
        assert!(matches!(
            CheckOutcome::from_reply(&refused),
            CheckOutcome::Refused(_)
        ));
        let missing: Result<Value, RedisError> = Err(RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR",
            "unknown command 'SPUBLISH'".to_owned(),
        )));
        assert!(matches!(
            CheckOutcome::from_reply(&missing),
            CheckOutcome::Missing(_)
        ));
        assert_eq!(
            CheckOutcome::from_reply(&Ok(Value::Okay)),
            CheckOutcome::Allowed
        );
    }

    /// The probes try exactly the commands of the README's least-privilege ACL line.
    #[test]
    fn the_probes_try_the_readme_acl_lines_commands() {
        let readme = include_str!("../../README.md");
        let line = readme
            .lines()
            .find(|l| l.starts_with("ACL SETUSER rlock "))
            .unwrap_or_default();
        let mut documented: Vec<&str> = line
            .split_whitespace()
            .filter_map(|rule| rule.strip_prefix('+'))
            .collect();
        let mut probed: Vec<&str> = command_names().collect();
        documented.sort_unstable();
        probed.sort_unstable();
        assert!(!documented.is_empty(), "the README shows the ACL line");
        assert_eq!(documented, probed);
    }
}
