//! The report of a soak run: its shape, the faults and what followed them, the outcomes (a
//! semaphore's permit excesses listed one by one), the timer lateness, the errors and the
//! waiting mix (Markdown tables, as RELIABILITY.md keeps
//! them).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::config::Config;
use super::deployment::Deployment;
use super::history::{History, Waits};
use super::nemesis::{Fault, Nemesis};
use super::verdict::{self, Cause, Verdict};
use super::waits::{self, Rules};

/// The deployments of the run, for its report.
pub(super) fn deployments(config: &Config) -> String {
    let names: Vec<String> = config
        .on
        .iter()
        .map(|d| match d {
            Deployment::Single if config.aof => "one server (AOF, `appendfsync always`)".into(),
            Deployment::Single => "one server (no persistence)".into(),
            Deployment::Sentinel => "Sentinel (a master, two replicas)".into(),
            Deployment::Cluster => "Cluster (three masters, a replica each)".into(),
        })
        .collect();
    let mut out = names.join(", ");
    if config.on.iter().any(|d| d.fails_over()) {
        let _ = write!(out, "; min_replicas {}", config.min_replicas);
    }
    out
}

pub(super) fn report(
    config: &Config,
    history: &History,
    verdict: &Verdict,
    nemesis: &Nemesis,
    orphans: &[String],
    elapsed: Duration,
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "| run | |\n|---|---|\n| command | `soak {}` |\n| workers × tasks | {} × {} |\n\
         | ttl | {} ms (waiting mix: {} ms, {} waiters per key and worker) |\n\
         | deployments | {} |\n| wall time | {:.0} s |\n\
         | acquisitions | {} ({:.0}/s; {} of them semaphore permits) |",
        command_line(config),
        config.workers,
        config.tasks,
        config.ttl.as_millis(),
        config.wait_ttl.as_millis(),
        config.waiters,
        deployments(config),
        elapsed.as_secs_f64(),
        verdict.sections,
        verdict.sections as f64 / elapsed.as_secs_f64().max(1e-9),
        verdict.semaphore_sections,
    );
    // Each signalled overlap and permit excess, put down to the fault around its later grant.
    let mut after: BTreeMap<Option<Fault>, (u64, u64)> = BTreeMap::new();
    for overlap in &verdict.signalled_overlaps {
        let cause = nemesis.cause(overlap.later.grant_us, history.key(&overlap.later));
        after.entry(cause).or_default().0 += 1;
    }
    for excess in &verdict.signalled_excesses {
        let cause = nemesis.cause(excess.later.grant_us, history.key(&excess.later));
        after.entry(cause).or_default().1 += 1;
    }
    let _ = writeln!(
        o,
        "\n| fault | injected | overlaps (holder told late) after it | permit excesses (holders \
         told late) after it |\n|---|---:|---:|---:|"
    );
    for (fault, n) in &nemesis.injected {
        let (overlaps, excesses) = after.get(&Some(*fault)).copied().unwrap_or_default();
        let _ = writeln!(o, "| {fault:?} | {n} | {overlaps} | {excesses} |");
    }
    if let Some((overlaps, excesses)) = after.get(&None) {
        let _ = writeln!(o, "| (no fault nearby) | | {overlaps} | {excesses} |");
    }
    let _ = writeln!(
        o,
        "\n| outcome | count |\n|---|---:|\n| leases lost (`lost()` fired) | {} |\n\
         | overlaps, the earlier holder told late (`lost()` or its release) | {} |\n\
         | overlaps, the earlier holder never told | {} |\n\
         | writes refused by fencing | {} |\n| stale writes accepted | {} |\n\
         | fence regressions | {} |\n\
         | fences granted twice (on a leader's seat: two leaders of one term) | {} |\n\
         | semaphore sections | {} |\n\
         | read-write lock sections (their overlaps with a writer counted above) | {} |\n\
         | of which upgrades of an upgradeable read (two upgradeable readers counted above) \
         | {} |\n\
         | permit excesses, enough holders told late | {} |\n\
         | permit excesses, too few holders ever told | {} |\n\
         | overlaps or permit excesses never told, across a failover without replica \
         acknowledgement | {} |\n\
         | sections on names every kind asks for | {} |\n\
         | requests refused as another kind (`WrongKind`) | {} |\n\
         | overlaps of two kinds on one name (counted above) | {} |\n\
         | panics | {} |\n| orphan keys | {} |",
        verdict.lost,
        verdict.signalled_overlaps.len(),
        verdict.silent_overlaps.len(),
        verdict.rejected_writes,
        verdict.stale_writes.len(),
        verdict.fence_regressions.len(),
        verdict.repeated_fences.len(),
        verdict.semaphore_sections,
        verdict.read_write_sections,
        verdict.upgrade_sections,
        verdict.signalled_excesses.len(),
        verdict.silent_excesses.len(),
        verdict.across_failovers.len(),
        history
            .records
            .iter()
            .filter(|r| history.key(r).contains(":mixed:"))
            .count(),
        history.errors.get("WrongKind").copied().unwrap_or(0),
        verdict.kind_overlaps,
        history.panics,
        orphans.len(),
    );
    let _ = writeln!(
        o,
        "\nHow long after the later grant the earlier holder was told, p50 / p99 / max: {} ms",
        verdict::percentiles_ms(&verdict.lost_windows_us)
    );
    // Overlaps by cause: a fault nearby, else the holder's process running late, else none.
    let mut by_cause: BTreeMap<Cause, (u64, u64)> = [Cause::Fault, Cause::SchedulingDelay]
        .into_iter()
        .map(|c| (c, (0, 0)))
        .collect();
    by_cause.insert(Cause::Unexplained, (0, 0));
    for (overlaps, silent) in [
        (&verdict.signalled_overlaps, false),
        (&verdict.silent_overlaps, true),
    ] {
        for overlap in overlaps {
            let nearby = nemesis
                .cause(overlap.later.grant_us, history.key(&overlap.later))
                .is_some();
            let counts = by_cause
                .entry(verdict::classify(history, overlap, nearby))
                .or_default();
            if silent {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
    }
    let _ = writeln!(
        o,
        "\n| overlaps by cause | holder told late | holder never told |\n|---|---:|---:|"
    );
    for (cause, (told, never)) in &by_cause {
        let _ = writeln!(o, "| {} | {told} | {never} |", cause.describe());
    }
    o.push_str(&excesses(history, verdict, nemesis));
    let _ = writeln!(
        o,
        "\nTimer lateness of the workers (worst per 100 ms, reported from 1 ms), per worker: \
         windows ≥ 10 ms / ≥ 100 ms, worst: {}",
        lateness_summary(config, history)
    );
    let _ = writeln!(o, "\n| error (`LockError`) | count |\n|---|---:|");
    for (variant, n) in &history.errors {
        let _ = writeln!(o, "| {variant} | {n} |");
    }
    o
}

/// Every permit excess, one line each: key, when, the holder that should have stopped and
/// what it is put down to (a silent one is always unexplained).
fn excesses(history: &History, verdict: &Verdict, nemesis: &Nemesis) -> String {
    let mut o = String::new();
    let all = [
        (&verdict.signalled_excesses, "told late"),
        (&verdict.silent_excesses, "never told"),
    ];
    if all.iter().all(|(excesses, _)| excesses.is_empty()) {
        return o;
    }
    let _ = writeln!(
        o,
        "\n| permit excess on | permits | at (µs) | holder that should have stopped | it was | \
         put down to |\n|---|---:|---:|---|---|---|"
    );
    for (excesses, told) in all {
        for e in excesses {
            let key = history.key(&e.later);
            let nearby = nemesis.cause(e.later.grant_us, key).is_some();
            let _ = writeln!(
                o,
                "| `{key}` | {} | {} | worker {}, granted at {} | {told} | {} |",
                e.later.permits().unwrap_or(0),
                e.since_us,
                e.earlier.worker,
                e.earlier.grant_us,
                verdict::classify(history, e, nearby).describe()
            );
        }
    }
    o
}

/// Per worker: its windows at least 10 ms and 100 ms late, and its worst lateness.
pub(super) fn lateness_summary(config: &Config, history: &History) -> String {
    let per_worker: Vec<String> = (0..config.workers)
        .map(|w| {
            let late: Vec<u64> = history
                .lateness
                .iter()
                .filter(|l| u64::from(l.worker) == w)
                .map(|l| l.late_us)
                .collect();
            let at_least = |us: u64| late.iter().filter(|&&l| l >= us).count();
            format!(
                "{w}: {} / {} / {:.1} ms",
                at_least(10_000),
                at_least(100_000),
                late.iter().max().copied().unwrap_or(0) as f64 / 1000.0
            )
        })
        .collect();
    per_worker.join("; ")
}

/// Whether a waiting-mix key (`soak:<name>:wait:<k>`) is waited for `fair`ly: even `k`.
pub(super) fn fair_key(key: &str) -> bool {
    key.rsplit(':')
        .next()
        .and_then(|k| k.parse::<u64>().ok())
        .is_some_and(|k| k.is_multiple_of(2))
}

/// The waiting mix: per waiting client and key, then the rules' verdicts.
pub(super) fn waiting_report(
    config: &Config,
    history: &History,
    waiting: &waits::Verdict,
    check_ins: &BTreeMap<(u32, u32), u64>,
    unattributed: u64,
) -> String {
    let mut o = String::new();
    if config.waiters == 0 {
        return o;
    }
    let _ = writeln!(
        o,
        "\n| waiting client | key | fair | requests | grants | gave up (`Busy`) | cancelled | \
         other errors | waiting (s) | check ins | per s per waiting request |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut total = waits::Row {
        worker: 0,
        key: 0,
        waits: Waits::default(),
        checkins: 0,
    };
    for row in &waiting.rows {
        let key = history
            .keys
            .get(row.key as usize)
            .map_or("", String::as_str);
        let w = &row.waits;
        let _ = writeln!(
            o,
            "| {} | `{key}` | {} | {} | {} | {} | {} | {} | {:.0} | {} | {:.2} |",
            row.worker,
            if fair_key(key) { "yes" } else { "no" },
            w.requests,
            w.grants,
            w.busy,
            w.cancelled,
            w.errors,
            w.waited_us as f64 / 1e6,
            row.checkins,
            row.rate()
        );
        total.waits.requests += w.requests;
        total.waits.grants += w.grants;
        total.waits.busy += w.busy;
        total.waits.cancelled += w.cancelled;
        total.waits.errors += w.errors;
        total.waits.waited_us += w.waited_us;
        total.checkins += row.checkins;
    }
    let t = &total.waits;
    let _ = writeln!(
        o,
        "| all | | | {} | {} | {} | {} | {} | {:.0} | {} | {:.2} |",
        t.requests,
        t.grants,
        t.busy,
        t.cancelled,
        t.errors,
        t.waited_us as f64 / 1e6,
        total.checkins,
        total.rate()
    );
    let elsewhere: u64 = check_ins
        .iter()
        .filter(|((w, k), _)| !history.waits.contains_key(&(*w, *k)))
        .map(|(_, n)| n)
        .sum();
    let rules = waiting.rules.unwrap_or_else(|| Rules::for_run(0));
    let highest = waiting
        .rows
        .iter()
        .filter(|r| r.waits.waited_us as f64 / 1e6 >= rules.min_waiting_s)
        .map(waits::Row::rate)
        .fold(0.0, f64::max);
    let _ = writeln!(
        o,
        "\nCheck ins seen by Redis (a queued waiter's `LPOS`): {} on the waiting keys, {elsewhere} \
         on other keys (the hot keys' waiters), {unattributed} not attributable.\n\
         Check-in rate: highest {highest:.2}/s per waiting request (bound {}/s, judged from {} s \
         of waiting); over the bound: {}.\n\
         Starvation (no grant all run while the others got a round; or `Busy` after more than \
         (1 + faults) × ({} waiters + busiest grants in {} ms) grants to others): {}; \
         `Busy` waits not judged, their process having stalled ≥ {} ms: {}.",
        total.checkins,
        rules.max_checkins_per_s,
        rules.min_waiting_s,
        waiting.too_fast.len(),
        rules.waiters_per_key,
        rules.check_interval_us / 1000,
        waiting.starved.len(),
        rules.stall_us / 1000,
        waiting.stalled_waits,
    );
    o
}

pub(super) fn command_line(config: &Config) -> String {
    let mut line = if config.quick {
        "--quick".to_owned()
    } else if config.acquisitions > 0 {
        format!("--acquisitions {}", config.acquisitions)
    } else {
        format!("--duration-s {}", config.duration.as_secs())
    };
    if config.aof {
        line.push_str(" --aof");
    }
    if !config.quick {
        let names: Vec<&str> = config.on.iter().map(|d| d.name()).collect();
        let _ = write!(line, " --on {}", names.join(","));
    }
    if config.on.iter().any(|d| d.fails_over()) {
        let _ = write!(line, " --min-replicas {}", config.min_replicas);
    }
    if !config.quick {
        let _ = write!(line, " --waiters {}", config.waiters);
    }
    let _ = write!(line, " --seed {}", config.seed);
    line
}
