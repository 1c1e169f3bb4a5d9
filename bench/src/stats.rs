//! Measuring: latency percentiles, Redis `INFO` snapshots and the process's CPU time.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::BenchError;

/// The value at quantile `q` (0..=1) of sorted samples (nearest rank).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of some rates.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What the server had counted at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `calls + rejected_calls` per command, from `INFO commandstats` (`evalsha`, `script|load`…).
    calls: HashMap<String, u64>,
    total_commands: u64,
    connections: u64,
    cpu_seconds: f64,
}

/// The difference between two snapshots.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    /// Calls of each command, the admin `INFO` excluded.
    pub calls: HashMap<String, u64>,
    /// `total_commands_processed`, the admin `INFO` excluded (includes commands run by Lua).
    pub total_commands: u64,
    /// Connections the server accepted.
    pub connections: u64,
    /// Server CPU (user + sys).
    pub cpu_seconds: f64,
}

impl Delta {
    /// Calls of the listed top-level commands: the client's round trips.
    pub fn round_trips(&self, top_level: &[&str]) -> u64 {
        top_level
            .iter()
            .map(|c| self.calls.get(*c).copied().unwrap_or(0))
            .sum()
    }

    /// `name=count` of every command seen, most frequent first.
    pub fn describe(&self) -> String {
        let mut v: Vec<_> = self.calls.iter().filter(|(_, n)| **n > 0).collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Reads counters through a connection of its own.
pub struct Probe {
    conn: MultiplexedConnection,
}

/// The CPU seconds the servers behind `probes` have spent so far, together.
pub async fn cpu_seconds(probes: &mut [Probe]) -> Result<f64, BenchError> {
    let mut total = 0.0;
    for probe in probes {
        total += probe.snapshot().await?.cpu_seconds;
    }
    Ok(total)
}

impl Probe {
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let client = redis::Client::open(url)?;
        let conn = tokio::time::timeout(
            Duration::from_secs(5),
            client.get_multiplexed_async_connection(),
        )
        .await??;
        Ok(Self { conn })
    }

    async fn info(&mut self, sections: &[&str]) -> Result<String, BenchError> {
        let mut cmd = redis::cmd("INFO");
        for s in sections {
            cmd.arg(*s);
        }
        let text: String =
            tokio::time::timeout(Duration::from_secs(5), cmd.query_async(&mut self.conn)).await??;
        Ok(text)
    }

    /// One `INFO commandstats stats cpu` call.
    pub async fn snapshot(&mut self) -> Result<Snapshot, BenchError> {
        // Several sections in one call need Redis 7; older servers get them all.
        let text = match self.info(&["commandstats", "stats", "cpu"]).await {
            Ok(text) => text,
            Err(_) => self.info(&["all"]).await?,
        };
        let mut snap = Snapshot::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("cmdstat_") {
                let Some((name, fields)) = rest.split_once(':') else {
                    continue;
                };
                let mut n = 0;
                for field in fields.split(',') {
                    if let Some(v) = field
                        .strip_prefix("calls=")
                        .or_else(|| field.strip_prefix("rejected_calls="))
                    {
                        n += v.parse::<u64>().unwrap_or(0);
                    }
                }
                snap.calls.insert(name.to_owned(), n);
            } else if let Some(v) = line.strip_prefix("total_commands_processed:") {
                snap.total_commands = v.parse().unwrap_or(0);
            } else if let Some(v) = line.strip_prefix("total_connections_received:") {
                snap.connections = v.parse().unwrap_or(0);
            } else if let Some(v) = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))
            {
                snap.cpu_seconds += v.parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(snap)
    }

    /// `redis_version` from `INFO server`.
    pub async fn version(&mut self) -> Result<String, BenchError> {
        let text = self.info(&["server"]).await?;
        Ok(text
            .lines()
            .find_map(|l| l.trim().strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .to_owned())
    }
}

/// `after - before`, without the `INFO` call that took `before` (its own count lands after
/// its reply was built, so it shows in the difference; the one taking `after` does not).
pub fn delta(before: &Snapshot, after: &Snapshot) -> Delta {
    let mut calls = HashMap::new();
    for (k, &n) in &after.calls {
        let d = n.saturating_sub(before.calls.get(k).copied().unwrap_or(0));
        if k != "info" && d > 0 {
            calls.insert(k.clone(), d);
        }
    }
    let info = after
        .calls
        .get("info")
        .copied()
        .unwrap_or(0)
        .saturating_sub(before.calls.get("info").copied().unwrap_or(0));
    Delta {
        calls,
        total_commands: after
            .total_commands
            .saturating_sub(before.total_commands)
            .saturating_sub(info),
        connections: after.connections.saturating_sub(before.connections),
        cpu_seconds: (after.cpu_seconds - before.cpu_seconds).max(0.0),
    }
}

/// This process's CPU time (user + system) from `/proc/self/stat`.
pub fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may contain spaces) close with ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; 11 and 12 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// This process's resident memory (`VmRSS` of `/proc/self/status`), in bytes; 0 where it
/// cannot be read.
pub fn resident_bytes() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
