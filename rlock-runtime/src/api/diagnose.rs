//! What rlock will do on the servers a client reaches, found by trying it
//! ([`LockClient::diagnose`]; the `rlock doctor` command prints it).

use std::fmt;
use std::time::Duration;

use crate::api::client::LockClient;
use crate::backend::doctor::ProbeNames;
pub use crate::backend::doctor::{Check, CheckOutcome, Deployment, ServerReport};
use crate::key::LockKey;
use crate::util::tuning::WAIT_POLL_PAUSE;

/// How a client's waiters will learn that a lock came free.
///
/// A field of [`Diagnosis`]; see its example.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waiting {
    /// Told by the release itself (pub/sub), one waiter at a time: herd-free.
    Announced,
    /// Each waiter checks in every `every`, since announcements cannot reach it; a
    /// release still hands the lock on in queue order.
    Polling {
        /// How often.
        every: Duration,
        /// What the server refused or lacks.
        because: String,
    },
    /// In process: woken directly.
    InProcess,
}

/// Whether `min_replicas` can be asked for.
///
/// A field of [`Diagnosis`]; see its example.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaAcks {
    /// `WAIT` is allowed, and this many replicas are connected (the fewest of the servers).
    Available {
        /// Replicas connected to the master (the fewest among several masters).
        replicas: u32,
    },
    /// `WAIT` is refused or missing: a lock with `min_replicas` fails at once.
    Refused(String),
    /// No server to ask (in process).
    NotApplicable,
}

/// What [`LockClient::diagnose`] found: each server's answers and what rlock will therefore
/// do. Its [`Display`](fmt::Display) is the report `rlock doctor` prints.
///
/// ```
/// use rlock_runtime::{Deployment, LockClient, Waiting};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rlock_runtime::LockError> {
/// let client = LockClient::in_memory();
/// let diagnosis = client.diagnose().await?;
/// assert_eq!(diagnosis.deployment, Deployment::InProcess);
/// assert_eq!(diagnosis.waiting, Waiting::InProcess);
/// assert!(diagnosis.usable());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnosis {
    /// What the client reaches.
    pub deployment: Deployment,
    /// Each server's answers (a cluster's: the nodes its commands reached).
    pub servers: Vec<ServerReport>,
    /// How waiters will be woken.
    pub waiting: Waiting,
    /// Fencing tokens can be issued (every server runs scripts; not Redlock, whose masters
    /// would each issue their own).
    pub fencing: bool,
    /// Whether `min_replicas` can be asked for.
    pub replica_acks: ReplicaAcks,
    /// The commands rlock needs that a server refused or lacks, as `server #n: name (why)`.
    pub refused: Vec<String>,
}

impl Diagnosis {
    /// Whether everything rlock needs for its locks was allowed (waiting by polling and
    /// a refused `WAIT` included: they only cost speed or `min_replicas`).
    pub fn usable(&self) -> bool {
        self.refused.is_empty()
    }
}

/// Checks whose refusal only changes how rlock works, not whether it does.
const DEGRADES_ONLY: &[&str] = &[
    "subscribe",
    "ssubscribe",
    "unsubscribe",
    "sunsubscribe",
    "publish",
    "spublish",
    "announcement heard",
    "pubsub|numsub",
    "pubsub|shardnumsub",
    "wait",
    "role",
    "hello",
];

impl LockClient {
    /// Tries, as this client's Redis user, everything rlock does on its servers, and says
    /// what it will therefore do: the server and version, the round trip and the clock's
    /// offset, whether scripts, pub/sub (plain or sharded), `WAIT`, `TIME` and each
    /// command the scripts call are allowed, and so whether waiters are told of releases
    /// or poll, whether fencing tokens and `min_replicas` are available.
    ///
    /// It writes only a probe key in the client's namespace, set for 5 s and deleted, and
    /// meets every other write as `WRONGTYPE` (Redis checks the right to a command before
    /// running it), so it is safe on a production server. See the type's example.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`](crate::LockError::InvalidKey) only if the namespace
    /// cannot hold the probe's name; a server that refuses or does not answer is reported,
    /// not an error.
    pub async fn diagnose(&self) -> Result<Diagnosis, crate::LockError> {
        let probe = format!("rlock-doctor:{}", uuid::Uuid::new_v4().simple());
        let set = self.redis_key(&LockKey::new(probe.clone())?);
        let absent = self.redis_key(&LockKey::new(format!("{probe}:absent"))?);
        let names = ProbeNames { set, absent };
        let (deployment, servers) = self.shared().engine.diagnose(&names).await;
        Ok(conclude(deployment, servers))
    }
}

fn conclude(deployment: Deployment, servers: Vec<ServerReport>) -> Diagnosis {
    let mut refused = Vec::new();
    for (n, server) in servers.iter().enumerate() {
        for check in &server.checks {
            if !check.outcome.is_allowed() && !DEGRADES_ONLY.contains(&check.name) {
                refused.push(format!(
                    "server #{}: {} ({})",
                    n + 1,
                    check.name,
                    check.outcome
                ));
            }
        }
    }
    let heard = |s: &ServerReport| s.allows("announcement heard");
    let waiting = match deployment {
        Deployment::InProcess => Waiting::InProcess,
        _ if servers.iter().all(heard) => Waiting::Announced,
        _ => {
            let because = servers
                .iter()
                .flat_map(|s| s.checks.iter())
                .find(|c| {
                    matches!(
                        c.name,
                        "subscribe" | "ssubscribe" | "publish" | "spublish" | "announcement heard"
                    ) && !c.outcome.is_allowed()
                })
                .map_or_else(
                    || "announcements were not heard".to_owned(),
                    |c| format!("{}: {}", c.name, c.outcome),
                );
            Waiting::Polling {
                every: WAIT_POLL_PAUSE,
                because,
            }
        }
    };
    let replica_acks = match deployment {
        Deployment::InProcess => ReplicaAcks::NotApplicable,
        _ => match servers.iter().find_map(|s| {
            s.check("wait")
                .filter(|c| !c.outcome.is_allowed())
                .map(|c| c.outcome.to_string())
        }) {
            Some(why) => ReplicaAcks::Refused(why),
            None => ReplicaAcks::Available {
                replicas: servers.iter().filter_map(|s| s.replicas).min().unwrap_or(0),
            },
        },
    };
    let fencing = match deployment {
        Deployment::InProcess => true,
        Deployment::Redlock => false,
        Deployment::Server | Deployment::Cluster => servers.iter().all(|s| s.allows("evalsha")),
    };
    Diagnosis {
        deployment,
        servers,
        waiting,
        fencing,
        replica_acks,
        refused,
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "deployment: {}", self.deployment)?;
        for (n, server) in self.servers.iter().enumerate() {
            let unknown = || "unknown".to_owned();
            writeln!(
                f,
                "server #{}: {} {} ({}), round trip {:?}, clock offset {}, replicas {}",
                n + 1,
                server.server.clone().unwrap_or_else(unknown),
                server.version.clone().unwrap_or_else(unknown),
                server.mode.clone().unwrap_or_else(unknown),
                server.round_trip,
                server
                    .clock_offset_ms
                    .map_or_else(unknown, |ms| format!("{ms} ms")),
                server.replicas.map_or_else(unknown, |n| n.to_string()),
            )?;
            for check in &server.checks {
                writeln!(
                    f,
                    "  {:<22} {:<9} {}",
                    check.name,
                    if check.outcome.is_allowed() {
                        "ok"
                    } else {
                        "NO"
                    },
                    match &check.outcome {
                        CheckOutcome::Allowed => check.needed_for.to_owned(),
                        other => format!("{} ({other})", check.needed_for),
                    }
                )?;
            }
        }
        writeln!(f, "what rlock will do:")?;
        match &self.waiting {
            Waiting::Announced => writeln!(
                f,
                "  waiting: herd-free, each waiter told by the release that hands it the lock"
            )?,
            Waiting::Polling { every, because } => writeln!(
                f,
                "  waiting: every waiter checks in every {every:?} (releases still hand the \
                 lock on in queue order), because {because}"
            )?,
            Waiting::InProcess => writeln!(f, "  waiting: in process, woken directly")?,
        }
        writeln!(
            f,
            "  fencing tokens: {}",
            if self.fencing {
                "available"
            } else {
                "not available"
            }
        )?;
        match &self.replica_acks {
            ReplicaAcks::Available { replicas } => writeln!(
                f,
                "  min_replicas: up to {replicas} (replicas connected now)"
            )?,
            ReplicaAcks::Refused(why) => {
                writeln!(f, "  min_replicas: fails at once, WAIT is {why}")?;
            }
            ReplicaAcks::NotApplicable => writeln!(f, "  min_replicas: not applicable")?,
        }
        if self.refused.is_empty() {
            writeln!(f, "  every command rlock needs is allowed")
        } else {
            writeln!(
                f,
                "  locks will fail: these commands rlock needs are refused or missing:"
            )?;
            for refused in &self.refused {
                writeln!(f, "    {refused}")?;
            }
            Ok(())
        }
    }
}
