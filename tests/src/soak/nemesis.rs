//! The nemesis: faults of the servers, the network and the workers, dealt from a shuffled
//! deck, and the log of when each began and was healed, by which the checks tell what was
//! around an event.

use std::collections::BTreeMap;
use std::time::Duration;

use super::COMMAND_TIMEOUT;
use super::deployment::{Deployment, Locks};
use super::leaders::{Candidates, LeaderFault};
use super::now_us;
use super::run::Worker;
use crate::RedisServer;
use crate::proxy::FaultProxy;

/// The kinds of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Fault {
    /// `kill -9` of the lock server, restarted at once on the same port.
    KillRestart,
    /// SIGSTOP of the lock server for 0.5–2 ttl, then SIGCONT.
    PauseServer,
    /// `CLIENT PAUSE` for 0.5–2 ttl.
    ClientPause,
    /// `DEBUG SLEEP` for 0.5–2 ttl.
    DebugSleep,
    /// One worker's flows delayed by 5–50 ms for 1–3 ttl.
    Delay,
    /// One worker's flows batched on a 5–30 ms tick for 1–3 ttl.
    Batch,
    /// One worker's open flows go silent (no FIN, no RST).
    Blackhole,
    /// One worker's flows reset.
    Reset,
    /// SIGSTOP of one worker process for 1.5–3 ttl (a GC pause past the lease).
    PauseHolder,
    /// SIGSTOP of one worker process, whose waiters are queued, for the waiting keys'
    /// hand-off lease plus 0.5–1.5 s (a stalled waiter, handed locks it cannot take).
    StallWaiter,
    /// Sentinel: `SENTINEL FAILOVER`, the old master staying up as a replica.
    SentinelSwitchOver,
    /// Sentinel: the master killed, a replica promoted, the old one restarted.
    SentinelKill,
    /// Cluster: `CLUSTER FAILOVER` on a master's replica, the old master staying up as its
    /// replica.
    ClusterSwitchOver,
    /// Cluster: a master killed, its replica promoted, the old one restarted.
    ClusterKill,
    /// `kill -9` of the leader candidate that leads a deployment's seat (a new candidate
    /// takes its place).
    KillLeader,
    /// SIGSTOP of the leading candidate for 1.5–3 ttl.
    StopLeader,
    /// The leading candidate cut off from the one server (every flow silent, new ones too)
    /// for 1.5–3 ttl.
    PartitionLeader,
}

/// How long after a failover two masters may still take writes: the sentinels turn a
/// restarted old master (which comes back believing it is the master) into a replica when
/// they next read its `INFO`, which they do every 10 s; a Cluster node learns the new epoch
/// from the gossip within about the same time.
pub(super) const FAILOVER_SETTLE: Duration = Duration::from_secs(10);

impl Fault {
    /// Whether this fault promotes a replica (a failover), which may lose writes the old
    /// master acknowledged and leave two masters for a moment.
    pub(super) fn is_failover(self) -> bool {
        matches!(
            self,
            Fault::SentinelSwitchOver
                | Fault::SentinelKill
                | Fault::ClusterSwitchOver
                | Fault::ClusterKill
        )
    }

    /// Whether this fault stops a lock server's process (a script it was running then
    /// resumes past any time limit, and Redis answers `BUSY` for the rest of it).
    pub(super) fn stops_a_server(self) -> bool {
        matches!(
            self,
            Fault::PauseServer | Fault::KillRestart | Fault::SentinelKill | Fault::ClusterKill
        )
    }

    /// Whether this fault reaches the locks on `deployment`, when the server faults hit
    /// `server_faults_on`.
    pub(super) fn hits(self, deployment: Deployment, server_faults_on: Deployment) -> bool {
        match self {
            Fault::PauseHolder
            | Fault::StallWaiter
            | Fault::KillLeader
            | Fault::StopLeader
            | Fault::PartitionLeader => true,
            Fault::PauseServer | Fault::ClientPause => deployment == server_faults_on,
            Fault::KillRestart
            | Fault::DebugSleep
            | Fault::Delay
            | Fault::Batch
            | Fault::Blackhole
            | Fault::Reset => deployment == Deployment::Single,
            Fault::SentinelSwitchOver | Fault::SentinelKill => deployment == Deployment::Sentinel,
            Fault::ClusterSwitchOver | Fault::ClusterKill => deployment == Deployment::Cluster,
        }
    }
}

/// Without the one server (no proxy, no debug command), the faults that still apply: they
/// hit a current master.
pub(super) const MASTER_FAULTS: [Fault; 3] =
    [Fault::PauseServer, Fault::ClientPause, Fault::PauseHolder];

/// With the one server: every fault of a server, a network and a process.
pub(super) const SINGLE_FAULTS: [Fault; 9] = [
    Fault::KillRestart,
    Fault::PauseServer,
    Fault::ClientPause,
    Fault::DebugSleep,
    Fault::Delay,
    Fault::Batch,
    Fault::Blackhole,
    Fault::Reset,
    Fault::PauseHolder,
];

pub(super) struct Nemesis {
    pub(super) rng: fastrand::Rng,
    pub(super) deck: Vec<Fault>,
    /// The kinds the deck holds.
    pub(super) faults: Vec<Fault>,
    /// Where `PauseServer` and `ClientPause` strike (see [`Locks::server`]).
    pub(super) server_faults_on: Deployment,
    pub(super) injected: BTreeMap<Fault, u64>,
    /// Every fault: its kind, when it began and when it was healed (µs since the epoch).
    pub(super) log: Vec<(Fault, u64, u64)>,
    /// The leader faults, with the leader each struck.
    pub(super) leader_faults: Vec<LeaderFault>,
    pub(super) ttl: Duration,
    /// The lease a release hands a waiter of the waiting mix.
    pub(super) handoff_lease: Duration,
}

impl Nemesis {
    pub(super) fn ttl_times(&mut self, low: f64, high: f64) -> Duration {
        self.ttl.mul_f64(low + (high - low) * self.rng.f64())
    }

    /// Injects the next fault of the deck, waits it out and heals it.
    pub(super) async fn strike(
        &mut self,
        locks: &Locks,
        workers: &mut [Worker],
        candidates: &mut Candidates,
    ) -> Result<(), String> {
        let Some(server) = locks.server() else {
            return Ok(());
        };
        if self.deck.is_empty() {
            self.deck = self.faults.clone();
            self.rng.shuffle(&mut self.deck);
        }
        let Some(fault) = self.deck.pop() else {
            return Ok(());
        };
        let began = now_us();
        let injected = match fault {
            Fault::KillLeader | Fault::StopLeader | Fault::PartitionLeader => {
                self.strike_leader(fault, locks, candidates).await?
            }
            _ => self.inject(fault, locks, server, workers).await?,
        };
        if injected {
            // A leader fault begins once its leader is found, not when the search did.
            let began = match self.leader_faults.last() {
                Some(struck) if struck.fault == fault && struck.began_us >= began => {
                    struck.began_us
                }
                _ => began,
            };
            *self.injected.entry(fault).or_default() += 1;
            self.log.push((fault, began, now_us()));
        } else {
            // Dealt again later, so that every kind still comes up as often.
            self.deck.insert(0, fault);
        }
        Ok(())
    }

    /// Injects `fault`, waits it out and heals it; `false` when the deployment was not in a
    /// state to take it (no replica in sync for a failover, one already under way).
    pub(super) async fn inject(
        &mut self,
        fault: Fault,
        locks: &Locks,
        server: &RedisServer,
        workers: &mut [Worker],
    ) -> Result<bool, String> {
        let victim = self.rng.usize(..workers.len());
        match fault {
            Fault::KillRestart => {
                server.kill();
                tokio::time::sleep(Duration::from_millis(self.rng.u64(0..100))).await;
                server.restart();
            }
            Fault::PauseServer => {
                let pause = self.ttl_times(0.5, 2.0);
                server.pause();
                tokio::time::sleep(pause).await;
                server.resume();
            }
            Fault::ClientPause | Fault::DebugSleep => {
                let pause = self.ttl_times(0.5, 2.0);
                let mut admin = server.raw_with_timeout(COMMAND_TIMEOUT + pause).await;
                let command = if fault == Fault::ClientPause {
                    redis::cmd("CLIENT")
                        .arg("PAUSE")
                        .arg(pause.as_millis().to_string())
                        .arg("ALL")
                        .clone()
                } else {
                    redis::cmd("DEBUG")
                        .arg("SLEEP")
                        .arg(format!("{:.3}", pause.as_secs_f64()))
                        .clone()
                };
                command
                    .query_async::<()>(&mut admin)
                    .await
                    .map_err(|e| format!("{fault:?}: {e}"))?;
                if fault == Fault::ClientPause {
                    tokio::time::sleep(pause).await;
                }
            }
            Fault::Delay | Fault::Batch => {
                let span = self.ttl_times(1.0, 3.0);
                let Some(proxy) = &workers[victim].proxy else {
                    return Ok(false);
                };
                if fault == Fault::Delay {
                    proxy.set_delay(Duration::from_millis(self.rng.u64(5..=50)));
                } else {
                    proxy.set_batching(Some(Duration::from_millis(self.rng.u64(5..=30))));
                }
                tokio::time::sleep(span).await;
                proxy.set_delay(Duration::ZERO);
                proxy.set_batching(None);
            }
            Fault::Blackhole => workers[victim]
                .proxy
                .iter()
                .for_each(FaultProxy::blackhole_existing),
            Fault::Reset => workers[victim].proxy.iter().for_each(FaultProxy::reset_all),
            Fault::SentinelSwitchOver | Fault::SentinelKill => {
                let Some(d) = &locks.sentinel else {
                    return Ok(false);
                };
                // Only with a replica in sync to promote; and a switch-over the sentinels
                // refuse or abort (one a pause set off is under way) is not injected.
                if d.try_wait_synced().is_err() {
                    return Ok(false);
                }
                if fault == Fault::SentinelSwitchOver {
                    if d.try_switch_over().is_err() {
                        return Ok(false);
                    }
                } else {
                    let old = d.master().map(RedisServer::port);
                    let failed_over = d.try_fail_over();
                    // Back as a replica (Sentinel turns the old master into one), or as the
                    // master again if no replica could take over.
                    if let Some(old) = d.servers.iter().find(|s| Some(s.port()) == old) {
                        old.restart();
                    }
                    if let Err(e) = failed_over {
                        eprintln!("soak: {fault:?}: {e}; the old master was restarted");
                    }
                }
            }
            Fault::ClusterSwitchOver | Fault::ClusterKill => {
                let Some(d) = &locks.cluster else {
                    return Ok(false);
                };
                // Only on a settled cluster (every master with a replica in sync).
                if d.try_wait_healthy(&[]).is_err() {
                    return Ok(false);
                }
                let masters = d.masters();
                let Some(master) = masters.get(self.rng.usize(..masters.len().max(1))) else {
                    return Ok(false);
                };
                let done = if fault == Fault::ClusterSwitchOver {
                    d.switch_over(master)
                } else {
                    d.kill_and_rejoin(master)
                };
                // The fault was dealt either way; a cluster that has not settled after it is
                // the next fault's starting point (and the checker's business).
                if let Err(e) = done {
                    eprintln!("soak: {fault:?}: {e}");
                }
            }
            Fault::KillLeader | Fault::StopLeader | Fault::PartitionLeader => return Ok(false),
            Fault::PauseHolder | Fault::StallWaiter => {
                let pause = if fault == Fault::PauseHolder {
                    self.ttl_times(1.5, 3.0)
                } else {
                    self.handoff_lease + Duration::from_millis(self.rng.u64(500..=1500))
                };
                let worker = &mut workers[victim];
                if worker.child.try_wait().ok().flatten().is_none() {
                    worker.signal("STOP");
                    tokio::time::sleep(pause).await;
                    worker.signal("CONT");
                }
            }
        }
        Ok(true)
    }

    /// Deals a leader fault on one of the deployments (a partition: on the one server, which
    /// the candidates reach through their proxies); `false` when nobody could be seen leading.
    async fn strike_leader(
        &mut self,
        fault: Fault,
        locks: &Locks,
        candidates: &mut Candidates,
    ) -> Result<bool, String> {
        let on: Vec<Deployment> = Deployment::ALL
            .into_iter()
            .filter(|&d| locks.url(d).is_some())
            .filter(|&d| fault != Fault::PartitionLeader || d == Deployment::Single)
            .collect();
        let Some(&deployment) = on.get(self.rng.usize(..on.len().max(1))) else {
            return Ok(false);
        };
        let Some(url) = locks.url(deployment) else {
            return Ok(false);
        };
        let pause = self.ttl_times(1.5, 3.0);
        let struck = candidates.strike(fault, deployment, &url, pause).await?;
        let injected = struck.is_some();
        self.leader_faults.extend(struck);
        Ok(injected)
    }

    /// The fault most likely behind an event at `at_us` on `key`: the last one that reaches
    /// the key's deployment begun before it, if it was healed less than three leases before.
    pub(super) fn cause(&self, at_us: u64, key: &str) -> Option<Fault> {
        let slack_us = 3 * u64::try_from(self.ttl.as_micros()).unwrap_or(u64::MAX);
        let deployment = Deployment::of_key(key)?;
        self.log
            .iter()
            .rev()
            .filter(|(fault, _, _)| fault.hits(deployment, self.server_faults_on))
            .find(|(_, began, _)| *began <= at_us)
            .filter(|(_, _, healed)| at_us <= healed.saturating_add(slack_us))
            .map(|(fault, _, _)| *fault)
    }

    /// The failover of `key`'s deployment under way at `at_us`, or healed less than
    /// [`FAILOVER_SETTLE`] before it.
    pub(super) fn failover_around(&self, at_us: u64, key: &str) -> Option<Fault> {
        let deployment = Deployment::of_key(key)?;
        let settle_us = u64::try_from(FAILOVER_SETTLE.as_micros()).unwrap_or(u64::MAX);
        self.log
            .iter()
            .rev()
            .filter(|(fault, _, _)| {
                fault.is_failover() && fault.hits(deployment, self.server_faults_on)
            })
            .find(|(_, began, healed)| *began <= at_us && at_us <= healed.saturating_add(settle_us))
            .map(|(fault, _, _)| *fault)
    }

    /// Whether a fault that stops a server was under way at `at_us`, or healed less than a
    /// second before it.
    pub(super) fn server_stopped_around(&self, at_us: u64) -> bool {
        self.log.iter().any(|(fault, began, healed)| {
            fault.stops_a_server() && *began <= at_us && at_us <= healed.saturating_add(1_000_000)
        })
    }

    /// How many faults that reach `key`'s deployment were under way in `from_us..=to_us`,
    /// or healed less than a second before it (a feed reconnects within a second).
    pub(super) fn faults_during(&self, key: &str, from_us: u64, to_us: u64) -> u64 {
        let Some(deployment) = Deployment::of_key(key) else {
            return 0;
        };
        self.log
            .iter()
            .filter(|(fault, began, healed)| {
                fault.hits(deployment, self.server_faults_on)
                    && *began <= to_us
                    && healed.saturating_add(1_000_000) >= from_us
            })
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nemesis(log: Vec<(Fault, u64, u64)>) -> Nemesis {
        Nemesis {
            rng: fastrand::Rng::with_seed(1),
            deck: Vec::new(),
            faults: Vec::new(),
            server_faults_on: Deployment::Single,
            injected: BTreeMap::new(),
            log,
            leader_faults: Vec::new(),
            ttl: Duration::from_millis(500),
            handoff_lease: Duration::from_secs(2),
        }
    }

    /// A grant is across a failover from the failover's start until it has settled, on the
    /// deployment that failed over only, whatever fault began after it.
    #[test]
    fn a_failover_covers_its_deployment_until_it_settled() {
        let settle = u64::try_from(FAILOVER_SETTLE.as_micros()).expect("10 s in µs");
        let n = nemesis(vec![
            (Fault::SentinelKill, 1_000_000, 2_000_000),
            (Fault::StallWaiter, 3_000_000, 6_000_000),
        ]);
        let on = "soak:sentinel:wait:1";
        assert_eq!(n.failover_around(999_999, on), None);
        assert_eq!(n.failover_around(1_500_000, on), Some(Fault::SentinelKill));
        assert_eq!(n.failover_around(4_000_000, on), Some(Fault::SentinelKill));
        assert_eq!(
            n.failover_around(2_000_000 + settle, on),
            Some(Fault::SentinelKill)
        );
        assert_eq!(n.failover_around(2_000_001 + settle, on), None);
        assert_eq!(n.failover_around(1_500_000, "soak:cluster:wait:1"), None);
        assert_eq!(n.failover_around(1_500_000, "soak:single:wait:1"), None);
    }
}
