//! `rlock`: the operator's command line. Who holds a lock, since when, on which host, and
//! who waits; which locks match a pattern; a lock watched as it changes hands; a stuck lock
//! broken, on any topology's URL; and what rlock will do on a server (`doctor`).
//!
//! ```text
//! rlock --redis redis://127.0.0.1:6379 inspect order:42
//! rlock list 'order:*' --limit 50 --json
//! rlock watch order:42
//! rlock force-unlock order:42 --yes
//! rlock doctor redis://127.0.0.1:6379 --json
//! ```
//!
//! It reads what every rlock client publishes about its holds (the holder card: service,
//! host, pid, grant time) and never runs `KEYS`: `list` scans with a page size and a limit.

// The test build of `run`, whose future holds every command's branch, needs more query depth
// than the default 128 to lay out.
#![recursion_limit = "256"]

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Parser, Subcommand};
use rlock_runtime::{
    Check, CheckOutcome, Diagnosis, LockClient, LockError, LockInfo, ReplicaAcks, ServerReport,
    Waiting,
};
use serde_json::{Value, json};

/// Inspect, list, watch and break rlock's locks in Redis.
#[derive(Debug, Parser)]
#[command(name = "rlock", version, about)]
struct Cli {
    /// The Redis the locks live in: `redis://`, `rediss://`, `redis+cluster://`,
    /// `redis+sentinel://` or `redlock://`, as the services' clients are given it.
    #[arg(long, value_name = "URL", env = "REDIS_URL", global = true)]
    redis: Option<String>,
    /// The services' namespace, if their clients set one.
    #[arg(long, value_name = "NAME", global = true)]
    namespace: Option<String>,
    /// How long one Redis command may take.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = duration, global = true)]
    timeout: Duration,
    /// JSON output, one object per line.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Who holds a lock (service, host, pid), since when, its lease left, and its waiters.
    Inspect {
        /// The lock's key, as the service names it (`order:42`).
        key: String,
    },
    /// The locks whose keys match a pattern (`*`, `?`, `[…]`), each inspected.
    List {
        /// The pattern (`order:*`).
        pattern: String,
        /// Most keys to list; the scan stops there.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Prints the lock's state now and on every change, until interrupted.
    Watch {
        /// The lock's key.
        key: String,
        /// How often to look.
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = duration)]
        every: Duration,
        /// Stop after this many states printed.
        #[arg(long, value_name = "N")]
        changes: Option<usize>,
    },
    /// What rlock will do on this server, as this user: its version, round trip and clock,
    /// every command and channel right rlock needs, tried; herd-free waiting or polling,
    /// fencing, replica acknowledgement. Exits 1 when locks would fail.
    Doctor {
        /// The server's URL (instead of --redis).
        url: Option<String>,
    },
    /// Deletes a lock whoever holds it; the holder is not told until its next renewal.
    ForceUnlock {
        /// The lock's key.
        key: String,
        /// Confirms: without it nothing is deleted.
        #[arg(long)]
        yes: bool,
    },
}

/// A duration as people write it: `500ms`, `2s`, `1m`.
fn duration(text: &str) -> Result<Duration, String> {
    let parsed = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if parsed.is_zero() {
        return Err(format!("{text:?}: must be more than zero"));
    }
    Ok(parsed)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rlock: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, LockError> {
    let named = match &cli.command {
        Command::Doctor { url: Some(url) } => Some(url.clone()),
        _ => cli.redis.clone(),
    };
    let Some(url) = named else {
        return Err(LockError::InvalidConfig(
            "no Redis named: give --redis URL or set REDIS_URL".into(),
        ));
    };
    let mut builder = LockClient::builder().url(url).command_timeout(cli.timeout);
    if let Some(ns) = &cli.namespace {
        builder = builder.namespace(ns.clone());
    }
    let out = Output { json: cli.json };
    let client = match builder.connect().await {
        Ok(client) => client,
        // The doctor's first finding: connecting itself failed, and why.
        Err(e) if matches!(cli.command, Command::Doctor { .. }) => {
            out.unusable(&e);
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e),
    };
    match cli.command {
        Command::Doctor { .. } => {
            let diagnosis = client.diagnose().await?;
            out.diagnosis(&diagnosis);
            if !diagnosis.usable() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Inspect { key } => {
            let info = client.inspect(key.as_str()).await?;
            out.lock(&key, &info);
        }
        Command::List { pattern, limit } => {
            let found = client.list(&pattern, limit).await?;
            for key in &found.keys {
                let info = client.inspect(key.as_str()).await?;
                out.lock(key, &info);
            }
            if !found.complete {
                eprintln!("rlock: stopped at the limit of {limit} keys; more may match");
            }
        }
        Command::Watch {
            key,
            every,
            changes,
        } => watch(&client, &out, &key, every, changes).await?,
        Command::ForceUnlock { key, yes } => {
            if !yes {
                eprintln!(
                    "rlock: force-unlock deletes the lock whoever holds it; its holder keeps \
                     running until its next renewal. Add --yes to do it."
                );
                return Ok(ExitCode::from(2));
            }
            let info = client.inspect(key.as_str()).await?;
            let deleted = client.force_unlock(key.as_str()).await?;
            out.unlocked(&key, deleted, &info);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the lock's state now and each time its holder or waiters change.
async fn watch(
    client: &LockClient,
    out: &Output,
    key: &str,
    every: Duration,
    changes: Option<usize>,
) -> Result<(), LockError> {
    let mut last: Option<(Option<String>, Option<u32>)> = None;
    let mut printed = 0;
    let mut ticks = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let info = client.inspect(key).await?;
        // A holder's card appears about a second into its hold: a change too.
        let seen = (
            info.token
                .clone()
                .map(|t| format!("{t} {}", info.holder.is_some())),
            info.waiters,
        );
        if last.as_ref() != Some(&seen) {
            out.lock(key, &info);
            last = Some(seen);
            printed += 1;
            if changes.is_some_and(|most| printed >= most) {
                return Ok(());
            }
        }
    }
}

/// How results are printed: for people, or as JSON lines.
struct Output {
    json: bool,
}

/// Prints `text` and a newline; a reader that went away (`rlock list … | head`) ends the
/// output quietly instead of with a panic.
fn emit(text: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

impl Output {
    fn lock(&self, key: &str, info: &LockInfo) {
        if self.json {
            emit(lock_json(key, info));
        } else {
            emit(lock_line(key, info));
        }
    }

    fn unlocked(&self, key: &str, deleted: bool, before: &LockInfo) {
        if self.json {
            emit(json!({ "key": key, "deleted": deleted, "was": lock_json(key, before) }));
        } else if deleted {
            emit(format!("{key}: deleted (it was {})", holder_text(before)));
        } else {
            emit(format!("{key}: not held; nothing deleted"));
        }
    }
}

impl Output {
    fn diagnosis(&self, diagnosis: &Diagnosis) {
        if self.json {
            emit(diagnosis_json(diagnosis));
        } else {
            emit(diagnosis.to_string().trim_end());
        }
    }

    fn unusable(&self, e: &LockError) {
        let why = error_chain(e);
        if self.json {
            emit(json!({ "usable": false, "connect_error": why }));
        } else {
            emit(format!("connecting failed: {why}"));
        }
    }
}

/// An error and its sources, as one line.
fn error_chain(e: &LockError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

fn diagnosis_json(diagnosis: &Diagnosis) -> Value {
    let servers: Vec<Value> = diagnosis.servers.iter().map(server_json).collect();
    let mut report = serde_json::Map::new();
    report.insert("usable".into(), Value::Bool(diagnosis.usable()));
    report.insert(
        "deployment".into(),
        Value::String(diagnosis.deployment.to_string()),
    );
    report.insert("servers".into(), Value::Array(servers));
    report.insert("waiting".into(), waiting_json(&diagnosis.waiting));
    report.insert("fencing".into(), Value::Bool(diagnosis.fencing));
    report.insert(
        "replica_acks".into(),
        replica_acks_json(&diagnosis.replica_acks),
    );
    report.insert("refused".into(), json!(diagnosis.refused));
    Value::Object(report)
}

fn server_json(server: &ServerReport) -> Value {
    let checks: Vec<Value> = server.checks.iter().map(check_json).collect();
    let round_trip_us = u64::try_from(server.round_trip.as_micros()).unwrap_or(u64::MAX);
    let mut report = serde_json::Map::new();
    report.insert("server".into(), json!(server.server));
    report.insert("version".into(), json!(server.version));
    report.insert("mode".into(), json!(server.mode));
    report.insert("round_trip_us".into(), json!(round_trip_us));
    report.insert("clock_offset_ms".into(), json!(server.clock_offset_ms));
    report.insert("replicas".into(), json!(server.replicas));
    report.insert("checks".into(), Value::Array(checks));
    Value::Object(report)
}

fn check_json(check: &Check) -> Value {
    let (outcome, detail) = match &check.outcome {
        CheckOutcome::Allowed => ("allowed", None),
        CheckOutcome::Refused(why) => ("refused", Some(why.clone())),
        CheckOutcome::Missing(why) => ("missing", Some(why.clone())),
        CheckOutcome::Unknown(why) => ("unknown", Some(why.clone())),
        other => ("unknown", Some(other.to_string())),
    };
    json!({
        "name": check.name,
        "needed_for": check.needed_for,
        "outcome": outcome,
        "detail": detail,
    })
}

fn waiting_json(waiting: &Waiting) -> Value {
    match waiting {
        Waiting::Announced => json!({ "mode": "announced" }),
        Waiting::Polling { every, because } => {
            let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
            json!({ "mode": "polling", "every_ms": every_ms, "because": because })
        }
        _ => json!({ "mode": "in process" }),
    }
}

fn replica_acks_json(acks: &ReplicaAcks) -> Value {
    match acks {
        ReplicaAcks::Available { replicas } => json!({ "available": true, "replicas": replicas }),
        ReplicaAcks::Refused(why) => json!({ "available": false, "because": why }),
        _ => json!({ "available": false }),
    }
}

fn lock_json(key: &str, info: &LockInfo) -> Value {
    let holder = info
        .holder
        .as_ref()
        .map(|h| json!({ "service": h.service, "host": h.host, "pid": h.pid }));
    json!({
        "key": key,
        "held": info.held,
        "token": info.token,
        "holder": holder,
        "granted_at": info.granted_at.map(|t| humantime::format_rfc3339_millis(t).to_string()),
        "fence": info.fence,
        "remaining_ms": info.remaining.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        "waiters": info.waiters,
    })
}

fn lock_line(key: &str, info: &LockInfo) -> String {
    if !info.held {
        return match info.waiters {
            Some(n) if n > 0 => format!("{key}: free ({})", waiters(n)),
            _ => format!("{key}: free"),
        };
    }
    let mut line = format!("{key}: held by {}", holder_text(info));
    if let Some(fence) = info.fence {
        line += &format!(", fencing token {fence}");
    }
    if let Some(at) = info.granted_at {
        let ago = SystemTime::now().duration_since(at).unwrap_or_default();
        line += &format!(
            ", granted {} ({} ago)",
            humantime::format_rfc3339_millis(at),
            humantime::format_duration(Duration::from_millis(
                u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)
            ))
        );
    }
    if let Some(left) = info.remaining {
        line += &format!(", lease left {} ms", left.as_millis());
    }
    if let Some(n) = info.waiters {
        line += &format!(", {}", waiters(n));
    }
    line
}

fn holder_text(info: &LockInfo) -> String {
    match (&info.holder, &info.token) {
        (Some(holder), Some(token)) => format!("{holder} [{token}]"),
        (None, Some(token)) => format!("an unnamed holder [{token}]"),
        _ => "nobody".to_owned(),
    }
}

fn waiters(n: u32) -> String {
    if n == 1 {
        "1 waiter".to_owned()
    } else {
        format!("{n} waiters")
    }
}
