//! The leader section of a soak run: candidate processes campaign for every deployment's
//! leader seat (`soak:<name>:leader`, [`super::worker::leader_key`]) while the nemesis kills,
//! stops and partitions whichever of them leads; each such fault's failover time (until
//! another candidate is elected) is measured from the merged history.
//!
//! A candidate's terms are sections of a fenced lock whose fence is the term, so the run's
//! checks hold them to the lock's rules (no silent overlap, no stale write accepted, the
//! fence never going back) and one more: no term granted twice.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rlock_runtime::LockClient;

use super::COMMAND_TIMEOUT;
use super::config::Config;
use super::deployment::Deployment;
use super::history::{History, Write};
use super::nemesis::Fault;
use super::now_us;
use super::run::{Recipe, Role, Worker};
use super::verdict::percentiles_ms;
use super::worker::leader_key;

/// A candidate process: its worker id in the history, and when the nemesis killed it.
struct Candidate {
    worker: Worker,
    id: u32,
    killed_us: Option<u64>,
}

/// The candidate processes of a run, the live ones and those the nemesis killed (each
/// replaced at once by a new one).
pub(super) struct Candidates {
    recipe: Recipe,
    live: Vec<Candidate>,
    killed: Vec<Candidate>,
    next_id: u32,
}

/// A fault dealt to the leader of `key`: who led (the candidate's worker id), and when.
#[derive(Debug, Clone)]
pub(super) struct LeaderFault {
    pub(super) fault: Fault,
    pub(super) key: String,
    pub(super) victim: u32,
    pub(super) began_us: u64,
}

/// How long the nemesis looks for a leader to strike: a term is listed on its holder card
/// within about a second of its start, and a term lasts at least two ttl.
const FIND_LEADER_FOR: Duration = Duration::from_secs(4);

impl Candidates {
    /// Starts `count` candidates, their ids after the locking workers'.
    pub(super) fn start(recipe: Recipe, count: u64) -> Result<Candidates, String> {
        let first = u32::try_from(recipe.workers()).unwrap_or(u32::MAX);
        let mut candidates = Candidates {
            recipe,
            live: Vec::new(),
            killed: Vec::new(),
            next_id: first,
        };
        for _ in 0..count {
            let candidate = candidates.spawn()?;
            candidates.live.push(candidate);
        }
        Ok(candidates)
    }

    fn spawn(&mut self) -> Result<Candidate, String> {
        let id = self.next_id;
        self.next_id += 1;
        let worker = self.recipe.spawn(u64::from(id), Role::Candidate)?;
        Ok(Candidate {
            worker,
            id,
            killed_us: None,
        })
    }

    /// The leader faults the deck gains: none without candidates; a partition only where
    /// the candidates reach the one server through their proxies.
    pub(super) fn faults(&self, with_single: bool) -> Vec<Fault> {
        if self.live.is_empty() {
            return Vec::new();
        }
        let mut faults = vec![Fault::KillLeader, Fault::StopLeader];
        if with_single {
            faults.push(Fault::PartitionLeader);
        }
        faults
    }

    /// Deals `fault` (a kill, a stop or a partition of 1.5–3 `ttl`) to whoever leads on
    /// `deployment` (at `url`), and waits it out; `None` when no candidate could be seen
    /// leading there.
    pub(super) async fn strike(
        &mut self,
        fault: Fault,
        deployment: Deployment,
        url: &str,
        pause: Duration,
    ) -> Result<Option<LeaderFault>, String> {
        let key = leader_key(deployment.name());
        let Some(victim) = self.find_leader(url, &key).await else {
            return Ok(None);
        };
        let began_us = now_us();
        let candidate = &mut self.live[victim];
        let id = candidate.id;
        match fault {
            Fault::KillLeader => {
                let _ = candidate.worker.child.kill();
                let _ = candidate.worker.child.wait();
                candidate.killed_us = Some(now_us());
                let replacement = self.spawn()?;
                let killed = std::mem::replace(&mut self.live[victim], replacement);
                self.killed.push(killed);
            }
            Fault::StopLeader => {
                candidate.worker.signal("STOP");
                tokio::time::sleep(pause).await;
                candidate.worker.signal("CONT");
            }
            Fault::PartitionLeader => {
                let Some(proxy) = &candidate.worker.proxy else {
                    return Ok(None);
                };
                proxy.partition();
                tokio::time::sleep(pause).await;
                proxy.heal();
            }
            other => return Err(format!("{other:?} is not a leader's fault")),
        }
        Ok(Some(LeaderFault {
            fault,
            key,
            victim: id,
            began_us,
        }))
    }

    /// The live candidate that leads `key`, by the process id on its holder card.
    async fn find_leader(&self, url: &str, key: &str) -> Option<usize> {
        let client = LockClient::builder()
            .url(url)
            .command_timeout(COMMAND_TIMEOUT)
            .connect()
            .await
            .ok()?;
        let give_up = Instant::now() + FIND_LEADER_FOR;
        while Instant::now() < give_up {
            let info = client.leader(key).observe().await.ok().flatten();
            let pid = info.and_then(|info| info.holder).map(|holder| holder.pid);
            if let Some(i) = self
                .live
                .iter()
                .position(|c| Some(c.worker.child.id()) == pid)
            {
                return Some(i);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Ends the campaigns (closes every candidate's stdin) and waits for the candidates to
    /// write their histories, at most a term and a campaign past the end; the problems found.
    pub(super) fn finish(&mut self, config: &Config) -> Vec<String> {
        for c in &mut self.live {
            c.worker.child.stdin = None;
        }
        let give_up = Instant::now() + config.ttl * 8 + Duration::from_secs(10);
        let mut problems = Vec::new();
        for c in &mut self.live {
            let exit = loop {
                match c.worker.child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if Instant::now() < give_up => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => break None,
                }
            };
            if !exit.is_some_and(|s| s.success()) {
                problems.push(format!("candidate {} exited with {exit:?}", c.id));
            }
        }
        problems
    }

    /// Adds every candidate's history, the killed ones' terms ending at their deaths.
    pub(super) fn add_histories(&self, history: &mut History, problems: &mut Vec<String>) {
        for c in self.killed.iter().chain(&self.live) {
            let added = std::fs::read_to_string(&c.worker.history)
                .map_err(|e| format!("candidate {}: {}: {e}", c.id, c.worker.history.display()))
                .and_then(|text| history.add_candidate(c.id, &text, c.killed_us));
            if let Err(e) = added {
                problems.push(e);
            }
        }
    }
}

/// The failover times of one kind of leader fault.
#[derive(Debug, Default)]
pub(super) struct Failovers {
    /// Until another candidate was elected, µs, one per fault it followed.
    pub(super) times_us: Vec<u64>,
    /// Faults after which no other candidate was elected before the run ended.
    pub(super) unreplaced: u64,
}

/// Each leader fault's failover time: from the fault until another candidate's term on the
/// same seat began.
pub(super) fn failovers(history: &History, faults: &[LeaderFault]) -> Vec<(Fault, Failovers)> {
    let mut out: Vec<(Fault, Failovers)> = Vec::new();
    for f in faults {
        let next = replaced_at(history, f);
        let i = match out.iter().position(|(fault, _)| *fault == f.fault) {
            Some(i) => i,
            None => {
                out.push((f.fault, Failovers::default()));
                out.len() - 1
            }
        };
        match next {
            Some(at_us) => out[i].1.times_us.push(at_us - f.began_us),
            None => out[i].1.unreplaced += 1,
        }
    }
    out
}

/// A leader fault after which no other candidate was elected, though the run went on this
/// long: the lease (at most a ttl) and the campaign's check-in at its end are far shorter.
const STUCK_AFTER: Duration = Duration::from_secs(10);

/// The leader faults after which no other candidate was elected though the run went on for
/// [`STUCK_AFTER`] and two ttl (`campaigns_ended_us`: when the candidates were told to stop).
pub(super) fn stuck_elections(
    history: &History,
    faults: &[LeaderFault],
    ttl: Duration,
    campaigns_ended_us: u64,
) -> Vec<String> {
    let grace_us = u64::try_from((STUCK_AFTER + ttl * 2).as_micros()).unwrap_or(u64::MAX);
    faults
        .iter()
        .filter(|f| f.began_us.saturating_add(grace_us) < campaigns_ended_us)
        .filter(|f| replaced_at(history, f).is_none())
        .map(|f| {
            format!(
                "no candidate replaced the leader of {} (candidate {}) after {:?} at {}",
                f.key, f.victim, f.fault, f.began_us
            )
        })
        .collect()
}

/// When another candidate than the one struck by `f` was first elected after it.
fn replaced_at(history: &History, f: &LeaderFault) -> Option<u64> {
    let key = history.key_id(&f.key)?;
    history
        .records
        .iter()
        .filter(|r| r.key == key && r.worker != f.victim && r.grant_us >= f.began_us)
        .map(|r| r.grant_us)
        .min()
}

/// The report's lines on leaders: terms, and failover times by fault.
pub(super) fn report(history: &History, faults: &[LeaderFault], ttl: Duration) -> String {
    let terms: Vec<_> = history
        .records
        .iter()
        .filter(|r| history.key(r).ends_with(":leader"))
        .collect();
    let refused = terms.iter().filter(|r| r.write == Write::Rejected).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nLeaders: {} terms, {refused} of their writes refused for a stale term; failover \
         (from the fault until another candidate leads; ttl {ttl:?}): faults, p50 / p99 / max \
         ms:",
        terms.len()
    );
    for (fault, f) in failovers(history, faults) {
        let _ = writeln!(
            out,
            "  {fault:?}: {}, {}{}",
            f.times_us.len(),
            percentiles_ms(&f.times_us),
            if f.unreplaced > 0 {
                format!(" ({} not replaced before the run ended)", f.unreplaced)
            } else {
                String::new()
            }
        );
    }
    out
}
