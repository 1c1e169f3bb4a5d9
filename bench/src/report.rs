//! The markdown report, the summary line and BENCHMARKS.md.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::beyond::{self, Beyond};
use crate::lockers::Kind;
use crate::scale::{self, Scale};
use crate::stats::{median, percentile};
use crate::workloads::{Batch, Contended, Contender, REDLOCK_MASTERS};
use crate::{BenchError, Config, Results, read_write, semaphores};

const BEGIN: &str = "<!-- bench:results:begin -->";
const END: &str = "<!-- bench:results:end -->";

/// Where and how the run happened.
#[derive(Debug)]
pub struct Machine {
    pub redis_version: String,
    pub load_before: String,
    pub load_after: String,
    pub duration: Duration,
    pub command: String,
}

/// The first three fields of `/proc/loadavg`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown date".to_owned())
}

pub fn command_line(args: &[String]) -> String {
    let mut c = "cargo run --release -p rlock-bench".to_owned();
    if !args.is_empty() {
        c.push_str(" -- ");
        c.push_str(&args.join(" "));
    }
    c
}

/// The ratios of the last line, and what they rest on.
#[derive(Debug, Default)]
pub struct Summary {
    pub uncontended: f64,
    pub distinct: f64,
    pub contended_throughput: f64,
    pub contended_p99_gain: f64,
    pub macro_overhead: f64,
    /// Highest rlock round trips per handoff over both holds (its default clients).
    pub rlock_round_trips: f64,
    /// rlock fair p99 wait ÷ the FIFO limit, 16 clients, longest hold.
    pub fair_p99_vs_limit: f64,
    /// Commands per handoff, rlock default waiting, 16 clients, longest hold (the waiter's
    /// arrival included).
    pub handoff_cmds_16_clients: f64,
    /// The same with 4 clients.
    pub handoff_cmds_4_clients: f64,
    /// rlock default waiting: rslock p99 ÷ rlock p99 at 16 clients.
    pub p99_gain_16_clients: f64,
    /// (e) rlock ÷ floor throughput on the cluster, when (e) ran.
    pub cluster_distinct: Option<f64>,
    /// (e) Redlock over 3 masters p50 ÷ single-node p50 of acquire, when (e) ran.
    pub redlock3_p50: Option<f64>,
    /// (f) rlock's permit ÷ the semaphore's scripts by hand, ops/s, when (f) ran.
    pub permit_vs_floor: Option<f64>,
    /// (f) the contended semaphore's wait p99 ÷ its FIFO limit (4 clients), when (f) ran.
    pub semaphore_p99_vs_limit: Option<f64>,
    /// (f) the same, with every fourth task taking several permits at once.
    pub weighted_p99_vs_limit: Option<f64>,
    /// (f) commands per grant of the weighted run.
    pub weighted_cmds_per_grant: Option<f64>,
    /// (f) commands per grant with 16 clients ÷ with 4, when (f) ran.
    pub semaphore_cmds_16_vs_4: Option<f64>,
    /// (g) rlock's read ÷ the read-write lock's scripts by hand, ops/s, when (g) ran.
    pub read_vs_floor: Option<f64>,
    /// (g) rlock's write ÷ the scripts by hand, ops/s, when (g) ran.
    pub write_vs_floor: Option<f64>,
    /// (g) script calls from a writer's release until every queued reader held (median of
    /// the rounds; 1 when the release admits them all), when (g) ran.
    pub admission_scripts: Option<f64>,
    /// (h) most computations in one burst of once-only callers, when (h) ran (the target: 1).
    pub once_computations: Option<f64>,
    /// (h) once-only calls on a stored result ÷ plain `GET`s of it, ops/s, when (h) ran.
    pub once_stored_vs_get: Option<f64>,
    /// (h) µs the idempotency layer adds to a request, when (h) ran.
    pub idempotency_overhead_us: Option<f64>,
    /// (d) at scale, the run with the most holds: the client's resident memory per hold, in
    /// bytes (target ≤ 1024).
    pub bytes_per_hold: Option<f64>,
    /// Its renewal calls per period ÷ holds/200 (target ≤ 1).
    pub renew_calls_vs_limit: Option<f64>,
    /// Commands Redis ran per renewed key (target ≤ 2).
    pub cmds_per_renewal: Option<f64>,
    /// Other acquisitions per second while it held them ÷ holding nothing.
    pub rate_while_held: Option<f64>,
}

impl Summary {
    pub fn line(&self) -> String {
        let measured = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
        format!(
            "bench: uncontended={:.3} distinct={:.3} contended_throughput={:.3} contended_p99_gain={:.3} macro_overhead={:.3} fair_p99_vs_limit={:.3} handoff_cmds_16_clients={:.1} cluster_distinct={} redlock3_p50={} permit_vs_floor={} semaphore_p99_vs_limit={} semaphore_cmds_16_vs_4={} weighted_p99_vs_limit={} weighted_cmds_per_grant={} read_vs_floor={} write_vs_floor={} admission_scripts={} once_computations={} once_stored_vs_get={} idempotency_overhead_us={} bytes_per_hold={} renew_calls_vs_limit={} cmds_per_renewal={} rate_while_held={}",
            self.uncontended,
            self.distinct,
            self.contended_throughput,
            self.contended_p99_gain,
            self.macro_overhead,
            self.fair_p99_vs_limit,
            self.handoff_cmds_16_clients,
            measured(self.cluster_distinct),
            measured(self.redlock3_p50),
            measured(self.permit_vs_floor),
            measured(self.semaphore_p99_vs_limit),
            measured(self.semaphore_cmds_16_vs_4),
            measured(self.weighted_p99_vs_limit),
            measured(self.weighted_cmds_per_grant),
            measured(self.read_vs_floor),
            measured(self.write_vs_floor),
            measured(self.admission_scripts),
            measured(self.once_computations),
            measured(self.once_stored_vs_get),
            measured(self.idempotency_overhead_us),
            measured(self.bytes_per_hold),
            measured(self.renew_calls_vs_limit),
            measured(self.cmds_per_renewal),
            measured(self.rate_while_held)
        )
    }
}

fn rate(batches: Option<&Vec<Batch>>) -> f64 {
    batches.map_or(0.0, |b| {
        median(&b.iter().map(Batch::rate).collect::<Vec<_>>())
    })
}

/// Per-round ratios of `a`'s rate to `b`'s (rounds run both, one after the other): their
/// median, minimum and maximum. Pairing rounds cancels drift in the machine's load.
fn paired(batches: &HashMap<&'static str, Vec<Batch>>, a: Kind, b: Kind) -> (f64, f64, f64) {
    per_round(batches.get(a.label()), batches.get(b.label()), Batch::rate)
}

/// Per-round ratios of `metric` of `a` to that of `b`: median, minimum and maximum.
fn per_round(
    a: Option<&Vec<Batch>>,
    b: Option<&Vec<Batch>>,
    metric: impl Fn(&Batch) -> f64,
) -> (f64, f64, f64) {
    let (Some(a), Some(b)) = (a, b) else {
        return (0.0, 0.0, 0.0);
    };
    let ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| ratio(metric(a), metric(b)))
        .collect();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    (
        median(&ratios),
        if min.is_finite() { min } else { 0.0 },
        max,
    )
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Every latency of some batches, sorted.
fn latencies<'a>(batches: impl IntoIterator<Item = &'a Batch>) -> Vec<Duration> {
    let mut lat: Vec<Duration> = batches
        .into_iter()
        .flat_map(|b| b.latencies.iter().copied())
        .collect();
    lat.sort();
    lat
}

/// The acquire latency at quantile `q` over all rounds of the client on `masters` masters.
fn acquire_p(results: &Results, masters: usize, q: f64) -> Duration {
    percentile(
        &latencies(results.redlock.get(&masters).into_iter().flatten()),
        q,
    )
}

/// Quantile `q` of the raw fan-out to `masters` servers.
fn fanout_p(results: &Results, masters: usize, q: f64) -> Duration {
    percentile(
        &latencies(results.fanout.get(&masters).into_iter().flatten()),
        q,
    )
}

/// Quantile `q` of Redlock over `masters` ÷ that of the single node, when (e) ran.
fn vs_single(results: &Results, masters: usize, q: f64) -> Option<f64> {
    let single = acquire_p(results, 1, q).as_secs_f64();
    let many = acquire_p(results, masters, q).as_secs_f64();
    (single > 0.0 && many > 0.0).then(|| many / single)
}

const RSLOCK_DEFAULT: Contender = Contender::Rslock {
    delay: Duration::from_millis(200),
};

fn find(results: &Results, who: Contender, hold: Duration) -> Option<&Contended> {
    results
        .contended
        .iter()
        .find(|(w, h, _)| *w == who && *h == hold)
        .map(|(_, _, c)| c)
}

/// rlock's run at `hold` with `clients` clients, fair or not.
fn find_rlock(results: &Results, fair: bool, clients: usize, hold: Duration) -> Option<&Contended> {
    find(results, Contender::Rlock { fair, clients }, hold)
}

pub fn summary(results: &Results) -> Summary {
    let hold = results
        .contended
        .iter()
        .map(|(_, h, _)| *h)
        .max()
        .unwrap_or_default();
    let rs = find(results, RSLOCK_DEFAULT, hold);
    let peer_clients = rs.map_or(4, |rs| rs.clients);
    let tasks = rs.map_or(16, |rs| rs.tasks);
    let rl = find_rlock(results, false, peer_clients, hold);
    let rl_many = find_rlock(results, false, tasks, hold);
    let fair_many = find_rlock(results, true, tasks, hold);
    let p99_gain = |rl: Option<&Contended>| match (rl, rs) {
        (Some(rl), Some(rs)) => ratio(rs.p(0.99).as_secs_f64(), rl.p(0.99).as_secs_f64().max(1e-9)),
        _ => 0.0,
    };
    let (contended_throughput, contended_p99_gain) = match (rl, rs) {
        (Some(rl), Some(rs)) => (
            ratio(rl.rate(), rs.rate()),
            ratio(rs.p(0.99).as_secs_f64(), rl.p(0.99).as_secs_f64().max(1e-9)),
        ),
        _ => (0.0, 0.0),
    };
    let rlock_round_trips = results
        .contended
        .iter()
        .filter(|(w, _, c)| {
            matches!(w, Contender::Rlock { fair: false, .. }) && c.clients == peer_clients
        })
        .map(|(_, _, c)| c.round_trips as f64 / c.handoffs.max(1) as f64)
        .fold(0.0, f64::max);
    let commands = |c: Option<&Contended>| c.map_or(0.0, Contended::commands_per_handoff);
    Summary {
        uncontended: paired(&results.sequential, Kind::Manual, Kind::Floor).0,
        distinct: paired(&results.distinct, Kind::Manual, Kind::Floor).0,
        contended_throughput,
        contended_p99_gain,
        macro_overhead: paired(&results.sequential, Kind::Macro, Kind::Manual).0,
        rlock_round_trips,
        fair_p99_vs_limit: fair_many.map_or(0.0, |c| {
            ratio(c.p(0.99).as_secs_f64(), c.fifo_limit().as_secs_f64())
        }),
        handoff_cmds_16_clients: commands(rl_many),
        handoff_cmds_4_clients: commands(rl),
        p99_gain_16_clients: p99_gain(rl_many),
        cluster_distinct: Some(paired(&results.cluster, Kind::Manual, Kind::Floor).0)
            .filter(|r| *r > 0.0),
        redlock3_p50: vs_single(results, 3, 0.5),
        permit_vs_floor: {
            let rate = |way: semaphores::Way| {
                results
                    .permits
                    .get(way.label())
                    .map_or(0.0, |rates| median(rates))
            };
            Some(ratio(
                rate(semaphores::Way::Permit),
                rate(semaphores::Way::Floor),
            ))
            .filter(|r| *r > 0.0)
        },
        semaphore_p99_vs_limit: results
            .semaphore
            .first()
            .map(|run| ratio(run.p(0.99).as_secs_f64(), run.fifo_limit().as_secs_f64())),
        weighted_p99_vs_limit: results
            .semaphore
            .iter()
            .find(|run| run.heavy > 1)
            .map(|run| ratio(run.p(0.99).as_secs_f64(), run.fifo_limit().as_secs_f64())),
        weighted_cmds_per_grant: results
            .semaphore
            .iter()
            .find(|run| run.heavy > 1)
            .map(semaphores::Contended::commands_per_grant),
        semaphore_cmds_16_vs_4: match results.semaphore.as_slice() {
            [few, many, ..] => Some(ratio(many.commands_per_grant(), few.commands_per_grant())),
            _ => None,
        },
        read_vs_floor: rw_vs_floor(results, read_write::Role::Read),
        write_vs_floor: rw_vs_floor(results, read_write::Role::Write),
        admission_scripts: results
            .admission
            .as_ref()
            .map(|a| median(&a.script_calls.iter().map(|&n| n as f64).collect::<Vec<_>>())),
        once_computations: results
            .beyond
            .as_ref()
            .and_then(|b| b.computations.iter().max().map(|&n| n as f64)),
        once_stored_vs_get: results.beyond.as_ref().map(Beyond::stored_vs_get),
        idempotency_overhead_us: results.beyond.as_ref().map(Beyond::layer_overhead_us),
        bytes_per_hold: largest_scale(results).map(|run| run.bytes_per_hold),
        renew_calls_vs_limit: largest_scale(results)
            .map(|run| ratio(run.round_trips_per_period(), run.holds as f64 / 200.0)),
        cmds_per_renewal: largest_scale(results).map(Scale::commands_per_renewal),
        rate_while_held: largest_scale(results).map(Scale::rate_while_held),
    }
}

/// (d)'s run at scale with the most holds.
fn largest_scale(results: &Results) -> Option<&Scale> {
    results.scale.iter().max_by_key(|run| run.holds)
}

/// (g)'s median rate of `way`, 0 when not measured.
fn rw_rate(results: &Results, way: read_write::Way) -> f64 {
    results
        .read_write
        .get(way.label())
        .map_or(0.0, |rates| median(rates))
}

/// (g) rlock's `role` ÷ the floor's, when (g) ran.
fn rw_vs_floor(results: &Results, role: read_write::Role) -> Option<f64> {
    let way = |who| read_write::Way { role, who };
    Some(ratio(
        rw_rate(results, way(read_write::Who::Rlock)),
        rw_rate(results, way(read_write::Who::Floor)),
    ))
    .filter(|r| *r > 0.0)
}

/// Anything that makes the figures meaningless.
pub fn problems(results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for (who, hold, c) in &results.contended {
        if c.overlaps > 0 {
            out.push(format!(
                "{} at hold {hold:?}: two holders at once {} times",
                who.label(),
                c.overlaps
            ));
        }
        if c.gave_up > 0 {
            out.push(format!(
                "{} at hold {hold:?}: {} acquisitions ran out of budget",
                who.label(),
                c.gave_up
            ));
        }
    }
    for run in results.scale.iter().filter(|run| run.lost > 0) {
        out.push(format!(
            "(d) at scale: {} of {} holds were lost while held",
            run.lost, run.holds
        ));
    }
    for (kind, w) in &results.watchdog {
        if w.kept != w.locks {
            out.push(format!(
                "{}: only {} of {} locks survived the renewal window",
                kind.label(),
                w.kept,
                w.locks
            ));
        }
    }
    out
}

/// One line of paired per-round ratios: median (min–max).
fn round_ratios(batches: &HashMap<&'static str, Vec<Batch>>, pairs: &[(Kind, Kind)]) -> String {
    let short = Kind::short;
    // A pair that did not run (`--kinds`) is left out.
    let ran = |k: Kind| batches.contains_key(k.label());
    let parts: Vec<String> = pairs
        .iter()
        .filter(|&&(a, b)| ran(a) && ran(b))
        .map(|&(a, b)| {
            let (med, min, max) = paired(batches, a, b);
            format!("{} ÷ {} {med:.2} ({min:.2}–{max:.2})", short(a), short(b))
        })
        .collect();
    format!(
        "Per-round ratios, median (min–max) over the rounds, each round running both: {}.",
        parts.join("; ")
    )
}

/// `client | server` CPU µs per operation over all batches.
fn cpu_per_op(batches: Option<&Vec<Batch>>) -> String {
    let Some(b) = batches else {
        return "n/a | n/a".to_owned();
    };
    let ops = b.iter().map(|b| b.ops).sum::<u64>().max(1) as f64;
    let client: f64 = b.iter().map(|b| b.client_cpu.as_secs_f64()).sum();
    let server: f64 = b.iter().map(|b| b.server_cpu.as_secs_f64()).sum();
    format!("{:.1} | {:.1}", client * 1e6 / ops, server * 1e6 / ops)
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

fn x(v: f64) -> String {
    if v == 0.0 {
        "n/a".to_owned()
    } else {
        format!("{v:.2}×")
    }
}

/// The generated part of BENCHMARKS.md (also printed), with `charts`, the markdown that
/// shows the run's pictures, above its tables.
pub fn markdown(
    config: &Config,
    m: &Machine,
    results: &Results,
    s: &Summary,
    charts: &str,
) -> String {
    let mut o = String::new();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(o, "## Results\n");
    let _ = writeln!(
        o,
        "- **Command:** `{}` ({} mode, {:.0} s)",
        m.command,
        if config.quick { "quick" } else { "full" },
        m.duration.as_secs_f64()
    );
    let _ = writeln!(o, "- **Date:** {}", today());
    let _ = writeln!(
        o,
        "- **Machine:** {nproc} CPUs ({}), redis-server {} on loopback, same host",
        cpu_model(),
        m.redis_version
    );
    let _ = writeln!(
        o,
        "- **Load average (1/5/15 min):** {} at start, {} at end\n",
        m.load_before, m.load_after
    );
    o.push_str(charts);

    // (a)
    let seq = |k: Kind| rate(results.sequential.get(k.label()));
    let dis = |k: Kind| rate(results.distinct.get(k.label()));
    let _ = writeln!(
        o,
        "### (a) Uncontended: lock + unlock of a fresh key, one after the other\n\n\
         {} rounds of {} cycles per implementation ({} for redlock), each round in {} bursts \
         that the implementations take in turn; ops/s is the median round, latencies are over \
         all rounds.\n",
        config.seq_rounds, config.seq_n, config.seq_redlock, config.seq_bursts
    );
    let _ = writeln!(
        o,
        "| implementation | ops/s | p50 µs | p99 µs | ÷ floor | ÷ rslock | client CPU µs/op | Redis CPU µs/op |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for kind in Kind::ALL
        .into_iter()
        .filter(|k| results.sequential.contains_key(k.label()))
    {
        let lat = latencies(results.sequential.get(kind.label()).into_iter().flatten());
        let r = seq(kind);
        let _ = writeln!(
            o,
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            kind.label(),
            r,
            us(percentile(&lat, 0.5)),
            us(percentile(&lat, 0.99)),
            x(ratio(r, seq(Kind::Floor))),
            x(ratio(r, seq(Kind::Rslock))),
            cpu_per_op(results.sequential.get(kind.label()))
        );
    }

    let _ = writeln!(
        o,
        "\n{}",
        round_ratios(
            &results.sequential,
            &[
                (Kind::Manual, Kind::Floor),
                (Kind::Macro, Kind::Manual),
                (Kind::Scripts, Kind::Floor),
                (Kind::Manual, Kind::Scripts)
            ]
        )
    );

    // (b)
    let _ = writeln!(
        o,
        "\n### (b) {} concurrent tasks, distinct fresh keys, one client\n\n\
         {} rounds of {} tasks × {} cycles ({} for redlock, on blocking threads), each round in \
         {} bursts that the implementations take in turn; median round.\n",
        config.distinct_tasks,
        config.distinct_rounds,
        config.distinct_tasks,
        config.distinct_per_task,
        config.distinct_redlock,
        config.distinct_bursts
    );
    let _ = writeln!(
        o,
        "| implementation | ops/s | ÷ floor | ÷ rslock | client CPU µs/op | Redis CPU µs/op |\n|---|---:|---:|---:|---:|---:|"
    );
    for kind in Kind::ALL
        .into_iter()
        .filter(|k| results.distinct.contains_key(k.label()))
    {
        let r = dis(kind);
        let _ = writeln!(
            o,
            "| {} | {:.0} | {} | {} | {} |",
            kind.label(),
            r,
            x(ratio(r, dis(Kind::Floor))),
            x(ratio(r, dis(Kind::Rslock))),
            cpu_per_op(results.distinct.get(kind.label()))
        );
    }

    let _ = writeln!(
        o,
        "\n{}",
        round_ratios(
            &results.distinct,
            &[
                (Kind::Manual, Kind::Floor),
                (Kind::Macro, Kind::Manual),
                (Kind::Scripts, Kind::Floor),
                (Kind::Manual, Kind::Scripts)
            ]
        )
    );
    if !results.sweep.is_empty() {
        against_tasks(&mut o, config, &results.sweep);
    }

    // (c)
    let _ = writeln!(
        o,
        "\n### (c) One key, {} tasks over {} clients, critical section of {}\n\n\
         Each task takes the key {} times ({} handoffs per run). Wait = from the call to the \
         grant. \"Ideal\" is one handoff per measured hold. Round trips are the calls of the \
         commands the client itself sends (from `INFO commandstats`); commands are \
         `total_commands_processed`, which also counts what the Lua scripts run inside Redis. \
         The floor is not a waiting lock, so it has no row here.\n",
        config.tasks,
        config.clients,
        config
            .holds
            .iter()
            .map(|h| format!("{} ms", h.as_millis()))
            .collect::<Vec<_>>()
            .join(" and "),
        config.per_task,
        config.tasks as u64 * config.per_task
    );
    let _ = writeln!(
        o,
        "| implementation | clients | hold ms (measured) | handoffs/s (ideal) | wait p50 ms | wait p99 ms | wait max ms | FIFO limit ms | p99 ÷ FIFO limit | same task again | same client again | round trips / handoff | commands / handoff | connections / handoff | handoffs/s ÷ rslock | rslock p99 ÷ p99 |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (who, hold, c) in &results.contended {
        let rs = find(results, RSLOCK_DEFAULT, *hold);
        let n = c.handoffs.max(1) as f64;
        let ideal = 1.0 / c.mean_hold.as_secs_f64().max(1e-9);
        let _ = writeln!(
            o,
            "| {} | {} | {} ({}) | {:.0} ({:.0}) | {} | {} | {} | {} | {:.2} | {:.0} % | {:.0} % | {:.2} | {:.2} | {:.2} | {} | {} |",
            who.label(),
            c.clients,
            hold.as_millis(),
            ms(c.mean_hold),
            c.rate(),
            ideal,
            ms(c.p(0.5)),
            ms(c.p(0.99)),
            ms(c.p(1.0)),
            ms(c.fifo_limit()),
            ratio(c.p(0.99).as_secs_f64(), c.fifo_limit().as_secs_f64()),
            100.0 * c.same_task as f64 / n,
            100.0 * c.same_client as f64 / n,
            c.round_trips as f64 / n,
            c.commands_per_handoff(),
            c.server.connections as f64 / n,
            x(rs.map_or(0.0, |rs| ratio(c.rate(), rs.rate()))),
            x(rs.map_or(0.0, |rs| ratio(
                rs.p(0.99).as_secs_f64(),
                c.p(0.99).as_secs_f64().max(1e-9)
            ))),
        );
    }
    let _ = writeln!(
        o,
        "\nCommands the server saw per run (calls, including those made inside Lua):\n"
    );
    for (who, hold, c) in &results.contended {
        let _ = writeln!(
            o,
            "- {}, {} clients @ {} ms: {}",
            who.label(),
            c.clients,
            hold.as_millis(),
            c.server.describe()
        );
    }

    // (d)
    let _ = writeln!(
        o,
        "\n### (d) One client holding {} locks under renewal\n\n\
         Lease {} s; the window of {} s starts half a lease after the last lock was taken, \
         so only renewal runs in it. Client CPU is this process's utime+stime \
         (`/proc/self/stat`), Redis CPU is `used_cpu_user+used_cpu_sys`, both in % of one core.\n",
        config.wd_locks,
        config.wd_ttl.as_secs_f64(),
        config.wd_window.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "| implementation | renewal round trips/s | commands/s | client CPU % | Redis CPU % | locks kept |\n\
         |---|---:|---:|---:|---:|---:|"
    );
    for (kind, w) in &results.watchdog {
        let how = match kind {
            Kind::Rslock => "rslock 0.10 (`LockManager::using`, one timer per lock)",
            _ => "rlock (watchdog, one batched task per client)",
        };
        let _ = writeln!(
            o,
            "| {} | {:.1} | {:.0} | {:.1} | {:.1} | {}/{} |",
            how,
            w.per_second(w.round_trips),
            w.per_second(w.server.total_commands),
            w.client_cpu_pct(),
            w.server_cpu_pct(),
            w.kept,
            w.locks
        );
    }
    let _ = writeln!(
        o,
        "| rlock, `#[distributed_lock]` | same watchdog as the manual API | | | | |\n\
         | floor | n/a (no renewal) | | | | |\n\
         | redlock 2.0 | n/a (no watchdog: a lock lives for its ttl) | | | | |"
    );
    let _ = writeln!(o, "\nCommands the server saw in the window:\n");
    for (kind, w) in &results.watchdog {
        let _ = writeln!(o, "- {}: {}", kind.label(), w.server.describe());
    }
    if !results.scale.is_empty() {
        at_scale(&mut o, config, &results.scale);
    }

    // (e)
    if !results.cluster.is_empty() || !results.redlock.is_empty() {
        beyond_one_redis(&mut o, config, results);
    }

    // (f)
    if !results.semaphore.is_empty() {
        semaphores(&mut o, config, results);
    }

    // (g)
    if let Some(admission) = &results.admission {
        read_write_locks(&mut o, config, results, admission);
    }

    // (h)
    if let Some(beyond) = &results.beyond {
        beyond_the_lock(&mut o, config, beyond);
    }

    // Targets
    let _ = writeln!(
        o,
        "\n### Targets (contended figures at the {} ms hold, against rslock's default retry delay)\n",
        config.holds.iter().max().map_or(0, |h| h.as_millis())
    );
    let _ = writeln!(
        o,
        "| ratio | measured | target | met |\n|---|---:|---:|:---:|"
    );
    let rows = [
        (
            "uncontended (rlock ÷ floor, ops/s)",
            s.uncontended,
            0.95,
            true,
        ),
        ("distinct (rlock ÷ floor, ops/s)", s.distinct, 0.90, true),
        (
            "contended_throughput (rlock ÷ rslock, handoffs/s)",
            s.contended_throughput,
            1.0,
            true,
        ),
        (
            "contended_p99_gain (rslock p99 ÷ rlock p99)",
            s.contended_p99_gain,
            8.0,
            true,
        ),
        (
            "macro_overhead (macro ÷ manual, ops/s)",
            s.macro_overhead,
            0.98,
            true,
        ),
        (
            "rlock round trips per handoff (worst hold)",
            s.rlock_round_trips,
            6.0,
            false,
        ),
        (
            "fair_p99_vs_limit (rlock fair p99 ÷ FIFO limit, 16 clients)",
            s.fair_p99_vs_limit,
            1.3,
            false,
        ),
        (
            "rslock p99 ÷ rlock default p99, 16 clients",
            s.p99_gain_16_clients,
            8.0,
            true,
        ),
        (
            "handoff_cmds_16_clients (commands per handoff, the waiter's arrival included)",
            s.handoff_cmds_16_clients,
            8.0,
            false,
        ),
        (
            "commands per handoff, 16 clients ÷ 4 clients",
            ratio(s.handoff_cmds_16_clients, s.handoff_cmds_4_clients),
            1.1,
            false,
        ),
    ];
    let redlock_row = s.redlock3_p50.map(|v| {
        (
            "redlock3_p50 (Redlock over 3 masters ÷ one node, acquire p50)",
            v,
            1.3,
            false,
        )
    });
    let scale_rows = [
        (
            "bytes_per_hold (client resident memory per hold, most holds)",
            s.bytes_per_hold,
            1024.0,
            false,
        ),
        (
            "renew_calls_vs_limit (renewal calls per period ÷ holds/200)",
            s.renew_calls_vs_limit,
            1.0,
            false,
        ),
        (
            "cmds_per_renewal (Redis commands per renewed key)",
            s.cmds_per_renewal,
            2.0,
            false,
        ),
    ]
    .into_iter()
    .filter_map(|(name, v, target, at_least)| Some((name, v?, target, at_least)));
    for (name, v, target, at_least) in rows.into_iter().chain(redlock_row).chain(scale_rows) {
        let met = if at_least { v >= target } else { v <= target };
        let _ = writeln!(
            o,
            "| {name} | {v:.2} | {} {target} | {} |",
            if at_least { "≥" } else { "≤" },
            if met { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(o, "\n`{}`", s.line());
    o
}

/// Section (h): once-only work and the idempotency layer.
fn beyond_the_lock(o: &mut String, config: &Config, b: &Beyond) {
    let _ = writeln!(
        o,
        "\n### (h) Beyond the lock\n\n\
         **Once-only work.** Each round, {callers} callers over {clients} clients call \
         `once(key).run(…)` on a fresh key at once; the computation takes 50 ms. Then {n} calls \
         one after the other on the stored result, beside {n} plain `GET`s of the same key \
         (the floor: what reading a stored result must cost). {rounds} round(s); medians.\n\n\
         **Idempotent requests.** {n} `POST`s one after the other through `IdempotencyLayer` \
         (each with a key of its own: the first request's full path, five round trips: the \
         kept answer read, the key's lock taken, the answer read again, the answer kept, the \
         lock released), beside {n} to the bare handler, in process (no HTTP), per round.\n",
        callers = beyond::BURST_CALLERS,
        clients = beyond::CLIENTS,
        n = config.seq_n,
        rounds = config.seq_rounds,
    );
    let burst = median(
        &b.burst_times
            .iter()
            .map(Duration::as_secs_f64)
            .collect::<Vec<_>>(),
    );
    let _ = writeln!(
        o,
        "| measure | value |\n|---|---:|\n\
         | computations per burst (most in a round) | {} |\n\
         | burst time, first call to last answer (median) | {:.0} ms |\n\
         | calls on a stored result | {:.0} ops/s |\n\
         | plain `GET` of it | {:.0} ops/s |\n\
         | stored result ÷ `GET` | {:.2} |\n\
         | idempotent requests | {:.0} req/s |\n\
         | bare handler | {:.0} req/s |\n\
         | time the layer adds per request | {:.0} µs |\n\
         | Redis commands per idempotent request, the release script's own included | {:.1} |\n",
        b.computations.iter().max().copied().unwrap_or(0),
        burst * 1e3,
        median(&b.stored_ops),
        median(&b.get_ops),
        b.stored_vs_get(),
        median(&b.idempotent_ops),
        median(&b.bare_ops),
        b.layer_overhead_us(),
        b.commands_per_request,
    );
    let _ = writeln!(o, "Commands of the idempotent requests: {}", b.commands);
}

/// Section (f): uncontended permits beside the lock and the floor; the contended semaphore.
fn semaphores(o: &mut String, config: &Config, results: &Results) {
    let _ = writeln!(
        o,
        "\n### (f) Semaphores\n\n\
         **Uncontended.** Take one of 8 permits of a fresh key and give it back, one after the \
         other: {} rounds of {} cycles per way, the ways taking turns within each round; \
         median round. The floor sends the semaphore's own acquire and release scripts by \
         `EVALSHA` with the arguments rlock gives them: what Redis must do for a permit. \
         rlock's semaphore takes its permit with one script that reads the time from Redis \
         (`TIME`) and gives it back with another, both by `EVALSHA`.\n\n\
         The peers, each given the same 10 s lease and 8 permits of a fresh key per cycle: \
         **distributed-lock 0.2** (`RedisLockProvider`, `create_semaphore(key, 8)`, \
         `try_acquire` then `release` of the handle) sends its acquire script (a sorted set \
         scored by Redis `TIME`, expired tickets purged first) and its `ZREM` release as full \
         `EVAL` text every time, and each handle spawns a renewal task whose first tick fires \
         at once, so a permit may cost a third script call; **redisson 0.1** \
         (`AsyncRedissonClient`, `get_semaphore(key, 8)`, `try_acquire(1, 10s)` then \
         `release(1)`) checks for and writes the count (`EXISTS`, `SET <key>:max`, left without \
         expiry) when it builds the semaphore, scores the permit with the client's clock, and \
         gives back whichever permit sorts first rather than its own, by `ZREMRANGEBYSCORE`, \
         `ZRANGE` and `ZREM` in three round trips. distkit 0.7 offers counters and locks \
         (mutex, read-write) but no semaphore, so it has no row.\n",
        config.sem_rounds, config.sem_n
    );
    let _ = writeln!(
        o,
        "| way | ops/s | ÷ floor | rlock semaphore ÷ this |\n|---|---:|---:|---:|"
    );
    let rate = |way: semaphores::Way| {
        results
            .permits
            .get(way.label())
            .map_or(0.0, |rates| median(rates))
    };
    for way in semaphores::Way::ALL {
        let versus = if way.is_peer() {
            x(ratio(rate(semaphores::Way::Permit), rate(way)))
        } else {
            "—".to_owned()
        };
        let _ = writeln!(
            o,
            "| {} | {:.0} | {} | {versus} |",
            way.label(),
            rate(way),
            x(ratio(rate(way), rate(semaphores::Way::Floor)))
        );
    }
    let _ = writeln!(
        o,
        "\n**Contended.** {} tasks share {} permits of one semaphore, spread over 4 clients \
         and then over 16, each taking a permit {} times and holding it {:?}; every wait from \
         the call to the grant is recorded. The FIFO limit is the longest wait strict \
         first-come grants allow: the other tasks' holds (as measured) once each, spread over \
         the permits. Commands per grant must not grow with the clients. The last row is \
         weighted: every fourth task takes {} permits at once (`permits(n)`), over 4 clients; \
         its FIFO limit counts the permits every task takes.\n",
        config.sem_tasks,
        config.sem_permits,
        config.sem_per_task,
        config.sem_hold,
        crate::SEM_HEAVY,
    );
    let _ = writeln!(
        o,
        "| clients | permits per task | grants/s | wait p50 ms | wait p99 ms | FIFO limit ms | p99 ÷ limit | commands per grant | script calls per grant | most permits held at once |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for run in &results.semaphore {
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {} | {} | {} | {} | {:.1} | {:.2} | {} of {} |",
            run.clients,
            if run.heavy > 1 {
                format!("1, every fourth {}", run.heavy)
            } else {
                "1".to_owned()
            },
            run.grants as f64 / run.elapsed.as_secs_f64().max(1e-9),
            ms(run.p(0.5)),
            ms(run.p(0.99)),
            ms(run.fifo_limit()),
            x(ratio(
                run.p(0.99).as_secs_f64(),
                run.fifo_limit().as_secs_f64()
            )),
            run.commands_per_grant(),
            run.server.round_trips(&["evalsha", "eval"]) as f64 / run.grants.max(1) as f64,
            run.most_inside,
            run.permits
        );
    }
    for run in &results.semaphore {
        let _ = writeln!(
            o,
            "\nCommands the server saw, {} clients{}: {}",
            run.clients,
            if run.heavy > 1 { ", weighted" } else { "" },
            run.server.describe()
        );
    }
}

/// Section (g): uncontended reads and writes beside the floor and the peers; readers
/// admitted together.
fn read_write_locks(
    o: &mut String,
    config: &Config,
    results: &Results,
    admission: &read_write::Admission,
) {
    let _ = writeln!(
        o,
        "\n### (g) Read-write locks\n\n\
         **Uncontended.** Take the read lock (then, in the lower rows, the write lock) of a \
         fresh key and give it back, one after the other: {} rounds of {} cycles per way, the \
         ways taking turns within each round; median round. The floor sends the read-write \
         lock's own acquire and release scripts by `EVALSHA` with the arguments rlock gives \
         them. The peers, each given the same 10 s lease on a fresh key per cycle: \
         **distributed-lock 0.2** (`RedisLockProvider`, `create_reader_writer_lock(key)`, \
         `try_acquire_read()` or `try_acquire_write()`, then `release()` of the handle), \
         **distkit 0.7** (`RwLock::new(LockOptions {{ ttl: 10s, .. }})`, `try_read()` or \
         `try_write()`, then `release()`) and **redisson 0.1** \
         (`AsyncRedissonClient::get_read_write_lock(key, 10s)`, `read_lock()` or \
         `write_lock()`, `try_lock()` then `unlock()`).\n",
        config.rw_rounds, config.rw_n
    );
    let _ = writeln!(
        o,
        "| way | ops/s | ÷ floor | rlock ÷ this |\n|---|---:|---:|---:|"
    );
    for way in read_write::Way::all() {
        let floor = read_write::Way {
            who: read_write::Who::Floor,
            ..way
        };
        let rlock = read_write::Way {
            who: read_write::Who::Rlock,
            ..way
        };
        let vs = if matches!(way.who, read_write::Who::Floor | read_write::Who::Rlock) {
            "—".to_owned()
        } else {
            x(ratio(rw_rate(results, rlock), rw_rate(results, way)))
        };
        let _ = writeln!(
            o,
            "| {} | {:.0} | {} | {} |",
            way.label(),
            rw_rate(results, way),
            x(ratio(rw_rate(results, way), rw_rate(results, floor))),
            vs
        );
    }
    let mut sorted = admission.to_last_grant.clone();
    sorted.sort();
    if !results.read_write_cost.is_empty() {
        let _ = writeln!(
            o,
            "\nWhat Redis ran for each way, measured apart: {} cycles of each, one way at a \
             time, after the rounds (`INFO commandstats`, counting what the scripts run; \
             `used_cpu_user+used_cpu_sys`), beside the cycle's time and the client's CPU \
             (this process's, which runs the client alone meanwhile).\n\n\
             | way | µs per cycle | client CPU µs per cycle | Redis commands per cycle | Redis CPU µs per cycle | commands |\n\
             |---|---:|---:|---:|---:|---|",
            config.rw_n * 10
        );
        for cost in &results.read_write_cost {
            let n = cost.cycles.max(1) as f64;
            let _ = writeln!(
                o,
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                cost.way,
                1e6 / cost.rate.max(f64::MIN_POSITIVE),
                cost.client_cpu.as_secs_f64() * 1e6 / n,
                cost.server.total_commands as f64 / n,
                cost.server.cpu_seconds * 1e6 / n,
                cost.server.describe()
            );
        }
    }
    let _ = writeln!(
        o,
        "\n**Readers admitted together.** A writer holds a fresh key while {} readers, spread \
         over {} clients, wait in its queue; then it releases. {} rounds. Counted on the \
         server from the release's call until the last reader holds: the script calls (the \
         release itself, plus any reader that had to ask again) and the announcements the \
         release sent (one per reader it admitted).\n",
        admission.readers, admission.clients, admission.rounds
    );
    let _ = writeln!(
        o,
        "| readers | script calls per release, median (max) | announcements per release, median | release to last grant, median (max) |\n|---:|---:|---:|---:|"
    );
    let scripts: Vec<f64> = admission.script_calls.iter().map(|&n| n as f64).collect();
    let announced: Vec<f64> = admission.announced.iter().map(|&n| n as f64).collect();
    let _ = writeln!(
        o,
        "| {} | {:.0} ({}) | {:.0} | {} ({}) |",
        admission.readers,
        median(&scripts),
        admission.script_calls.iter().max().copied().unwrap_or(0),
        median(&announced),
        ms(crate::stats::percentile(&sorted, 0.5)),
        ms(sorted.last().copied().unwrap_or_default()),
    );
    let _ = writeln!(
        o,
        "\nCommands the server saw over the rounds: {}",
        admission.server.describe()
    );
}

/// Section (e): the cluster's throughput table and the Redlock latency table.
fn beyond_one_redis(o: &mut String, config: &Config, results: &Results) {
    let _ = writeln!(
        o,
        "\n### (e) Beyond one Redis\n\n\
         **A Redis Cluster, distinct keys.** Three masters with a replica each (six \
         `redis-server`s on this host, joined by `redis-cli --cluster create`). {} concurrent \
         tasks each lock and unlock fresh keys, which spread over the slots (no hash tags): \
         {} rounds of {} tasks × {} cycles per implementation, the two alternating; median \
         round. The floor sends `SET NX PX` and the compare-and-delete script through the \
         `redis` crate's own `cluster_async::ClusterConnection`; rlock is \
         `LockClient::connect(\"redis+cluster://…\")` with the manual API, whose commands \
         go through a connection of its own (one per master, routed by slot), not that \
         one. The floor by node sends the floor's commands by hand to each key's master over \
         a connection per master. Redis CPU is that of all six nodes (`INFO cpu`), replicas \
         included: on this host they share the two cores with the client.\n",
        config.cluster_tasks, config.cluster_rounds, config.cluster_tasks, config.cluster_per_task
    );
    let _ = writeln!(
        o,
        "| implementation | ops/s | ÷ floor | client CPU µs/op | Redis CPU µs/op, six nodes |\n|---|---:|---:|---:|---:|"
    );
    let floor = rate(results.cluster.get(Kind::Floor.label()));
    for kind in [Kind::Floor, Kind::FloorByNode, Kind::Manual] {
        let batches = results.cluster.get(kind.label());
        let r = rate(batches);
        let ops = batches
            .map_or(0, |b| b.iter().map(|b| b.ops).sum::<u64>())
            .max(1) as f64;
        let cpu: f64 = batches.map_or(0.0, |b| b.iter().map(|b| b.client_cpu.as_secs_f64()).sum());
        let server: f64 =
            batches.map_or(0.0, |b| b.iter().map(|b| b.server_cpu.as_secs_f64()).sum());
        let _ = writeln!(
            o,
            "| {} | {r:.0} | {} | {:.1} | {:.1} |",
            kind.label(),
            x(ratio(r, floor)),
            cpu * 1e6 / ops,
            server * 1e6 / ops
        );
    }
    let _ = writeln!(
        o,
        "\n{}",
        round_ratios(
            &results.cluster,
            &[
                (Kind::Manual, Kind::Floor),
                (Kind::Manual, Kind::FloorByNode),
            ]
        )
    );

    let _ = writeln!(
        o,
        "\n**Redlock, acquire latency.** Five independent `redis-server`s on this host. One task \
         takes a fresh key with `acquire().await`, which alone is timed, then releases it: {} \
         rounds of {} acquisitions per client, the three clients alternating; percentiles over \
         all rounds. The single node is a `redis://` client of the first server; Redlock sends \
         each acquire to all its masters at once (`redlock://` over the first three, or all \
         five) and counts the grants when every answer is in. The raw fan-out is the floor \
         under it: one `SET NX PX` sent to as many servers at once with the `redis` crate, \
         timed until all have answered, in the same rounds. On this host every server shares \
         the same two cores, so a fan-out to N servers costs N servers' CPU on them; on \
         separate machines it would cost about one round trip.\n",
        config.redlock_rounds, config.redlock_n
    );
    let _ = writeln!(
        o,
        "| topology | p50 µs | p99 µs | p50 ÷ single | p99 ÷ single | raw fan-out p50 µs | \
         raw fan-out p50 ÷ one SET | p50 ÷ raw fan-out |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for masters in REDLOCK_MASTERS {
        let name = match masters {
            1 => "single node (`redis://`)".to_owned(),
            m => format!("Redlock, {m} masters (`redlock://`)"),
        };
        let fanout = fanout_p(results, masters, 0.5).as_secs_f64();
        let one_set = fanout_p(results, 1, 0.5).as_secs_f64();
        let _ = writeln!(
            o,
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            us(acquire_p(results, masters, 0.5)),
            us(acquire_p(results, masters, 0.99)),
            x(vs_single(results, masters, 0.5).unwrap_or(0.0)),
            x(vs_single(results, masters, 0.99).unwrap_or(0.0)),
            us(fanout_p(results, masters, 0.5)),
            x(ratio(fanout, one_set)),
            x(ratio(
                acquire_p(results, masters, 0.5).as_secs_f64(),
                fanout
            ))
        );
    }
    let p50 = |b: &Batch| percentile(&latencies([b]), 0.5).as_secs_f64();
    let parts: Vec<String> = REDLOCK_MASTERS
        .into_iter()
        .filter(|&m| m > 1)
        .map(|m| {
            let (med, min, max) = per_round(results.redlock.get(&m), results.redlock.get(&1), p50);
            format!("{m} masters ÷ single {med:.2} ({min:.2}–{max:.2})")
        })
        .collect();
    let _ = writeln!(
        o,
        "\nPer-round p50 ratios, median (min–max) over the rounds: {}.",
        parts.join("; ")
    );
}

/// Puts `generated` between the markers of an existing file, keeping the rest; writes the
/// whole template when there is no file or no markers.
pub fn write(path: &Path, generated: &str) -> Result<(), BenchError> {
    let block = format!("{BEGIN}\n{generated}{END}");
    let text = match std::fs::read_to_string(path) {
        Ok(old) => match (old.find(BEGIN), old.find(END)) {
            (Some(b), Some(e)) if b < e => {
                format!("{}{block}{}", &old[..b], &old[e + END.len()..])
            }
            _ => template(&block),
        },
        Err(_) => template(&block),
    };
    std::fs::write(path, text)?;
    Ok(())
}

fn template(block: &str) -> String {
    format!("{TEMPLATE_HEAD}\n{block}\n")
}

const TEMPLATE_HEAD: &str = r#"# Benchmarks

rlock side by side with the minimum a hand-written lock costs and with the peer crates, in one
run, against one `redis-server`; then, in (e), on a Redis Cluster and over Redlock masters.

```sh
cargo run --release -p rlock-bench             # full run (about 1.5 min), rewrites the results below
cargo run --release -p rlock-bench -- --quick  # small counts, < 1 min; what CI runs
cargo run --release -p rlock-bench -- --redis redis://127.0.0.1:6379/ --out /tmp/bench.md
```

Without `--redis` the program starts its own `redis-server` (no persistence) on a free loopback
port. Only the part between the `bench:results` markers is rewritten by a run.

## What is compared

| row | what it does per lock + unlock |
|---|---|
| floor | by hand on one multiplexed connection: `SET key token NX PX ttl`, then the compare-and-delete script by `EVALSHA` (2 round trips) |
| rlock, manual API | `client.lock(key).ttl(10s).acquire().await?` then `guard.release().await?` (2 round trips: a plain `SET NX PX GET`, whose reply also tells a held lock from another kind's state, since no fence is asked for, then the release script with the token alone, as for every lease taken without waiting, which looks for a queue and would be sent again in full to hand the lock on) |
| rlock, `#[distributed_lock]` | `#[distributed_lock(key = "bench:<i>", ttl = "10s", client = client)]` on an empty body |
| rslock 0.10 | `LockManager::new(vec![url])`, `lock(key, ttl)` then `unlock(&lock)`: `SET NX PX`, then `EVALSHA` of its unlock script |
| redlock 2.0 | `RedLock::new(vec![url])`, `lock(key, ttl)` then `unlock(&lock)`; the crate is blocking and opens a new TCP connection for every command, so it runs on Tokio's blocking threads |
| rlock's two scripts by hand (diagnostic) | rlock's own acquire and release scripts, their calls built by the runtime's own code (its hidden `script_calls`) and sent by `EVALSHA` on the floor's connection: the gap floor → this row is what the scripts cost in Redis, the gap this row → rlock is what the client library costs |

Both peers implement Redlock; each is given one server URL, so its quorum is 1.

The semaphore peers in (f)'s uncontended table, each taking one of 8 permits of a fresh key
with a 10 s lease and giving it back:

| row | what it does per permit |
|---|---|
| distributed-lock 0.2 | through its Redis backend (`distributed-lock-redis`): `RedisLockProvider`, `create_semaphore(key, 8)`, `try_acquire()` then `release()` of the handle: its acquire script (a sorted set scored by Redis `TIME`, ended tickets purged first) and a `ZREM` script, each sent as full `EVAL` text; every handle spawns a renewal task whose first tick fires at once |
| redisson 0.1 | `AsyncRedissonClient`, `get_semaphore(key, 8)` (`EXISTS`, then `SET <key>:max`, left without expiry, on a new key), `try_acquire(1, 10s)` (a script; the permit is scored by the client's clock), `release(1)` (`ZREMRANGEBYSCORE`, `ZRANGE`, `ZREM` of whichever permit sorts first, not necessarily its own) |

distkit 0.7 has counters and locks but no semaphore, so it is not in (f).

## Workloads

- **(a) uncontended**: one task locks and unlocks fresh keys one after the other: ops/s and
  the latency of one lock + unlock. The CPU columns divide this process's CPU time and the
  server's (`INFO cpu`) by the operations of the batch: where each microsecond goes.
- **(b) distinct keys**: 64 tasks do the same at once on one client (one multiplexed connection
  per client; redlock: 64 blocking threads). Then the floor, rlock and rslock each run a
  fixed number of cycles shared by 1, 4, 16, 64 and 256 tasks: throughput against tasks.
- **(c) contended**: 16 tasks spread over 4 clients (4 `LockClient`s, 4 `LockManager`s, 4
  `RedLock`s, as 4 service instances would have) take the same key in turn and hold it for
  1 ms or 5 ms (`tokio::time::sleep`, which rounds up to the timer's 1 ms tick, so the measured
  hold is shown). Every waiter has a budget of about 30 s: rlock `wait(30s)`; rslock and redlock
  `set_retry(count, delay)` with `count × delay/2 ≈ 30 s` (both retry after a random delay in
  `[0, delay)`; each failed rslock/redlock attempt is a `SET NX` followed by an unlock
  `EVALSHA`). rslock runs with its default delay (200 ms, which the targets use) and with
  20 ms. A shared flag checks that no two tasks are ever inside the critical section together.
  "Same task again" is the share of handoffs won by the task that had just released (it loops
  straight back to acquire): a measure of barging; "same client again" counts handoffs that
  stayed within the releasing task's client (25 % if the 4 clients took turns at random). The
  diagnostic row "rlock + a FIFO mutex per client" queues each client's tasks on a
  `tokio::sync::Mutex` (first come, first served) before they call rlock, which is what rlock
  would do if a new request queued behind the client's existing waiters for the key instead of
  trying first.
- **(d) watchdog**: one client holds 10,000 locks (lease 5 s) and keeps them alive; the cost is
  what Redis and the client spend on renewal. rlock renews every lease about every ttl/3 from
  one task per client, 256 keys per script call. rslock's renewing API is
  `LockManager::using`, which extends each lock by itself once its validity is down to 500 ms.
  redlock has no renewal. **At scale**, one new client then takes 10,000, 100,000 and
  1,000,000 holds in turn (`--holds N` sets the largest; quick mode: 2,000 and 20,000) and
  keeps them through renewals: its resident memory per hold, its renewal calls per period,
  the commands Redis runs per renewed key, and its rate of other acquisitions meanwhile.
- **(e) beyond one Redis**: the program starts a Redis Cluster (3 masters with a replica each;
  needs `redis-cli`) and measures rlock against the floor there, 64 tasks on distinct keys
  spread over the slots; then five independent servers, and the latency of `acquire()` alone
  on one node against Redlock over 3 and over 5 of them.

## How round trips are counted

The program reads `INFO commandstats` (and `INFO stats`, `INFO cpu`) before and after each
contended run and each renewal window, on a connection of its own (its own `INFO` calls are
subtracted). A **round trip** is one call of a command the client itself sends: `evalsha`,
`eval`, `script|load`, `set` (floor, rslock, redlock), `subscribe`/`unsubscribe` (rlock's
release feed) and connection set-up commands. Commands that a Lua script runs (`SET`, `GET`,
`DEL`, `PEXPIRE`, `PUBLISH`, `TIME`, `PTTL` inside `EVALSHA`) are counted by Redis in
`commandstats` and in `total_commands_processed` as well, but they cost no network round trip;
so both figures are reported: round trips per handoff, and `total_commands_processed` per
handoff (which reflects the server's work). `connections / handoff` shows redlock's new TCP
connection per command.
"#;

/// (d) at scale: one row per number of holds.
fn at_scale(o: &mut String, config: &Config, runs: &[Scale]) {
    let _ = writeln!(
        o,
        "\n#### (d) at scale: one client keeping up to {} holds\n\n\
         One new client takes the holds (lease {} s; a full run's is the default lease) on \
         fresh keys with {} tasks, waits a renewal period, then measures a window in which nothing but renewal runs (one lease; {} \
         leases for the most holds). Memory is the growth of the process's resident set \
         (`VmRSS`) while it took them, guards included, per hold. A renewal period is a \
         third of the lease. Other acquisitions: 16 tasks of the same client lock and unlock \
         fresh keys for a renewal period (at least 2 s), holding nothing first, then while it holds them. Lost: holds \
         found lost when given back, after {} s held or more.\n",
        runs.iter().map(|run| run.holds).max().unwrap_or(0),
        config.scale_ttl.as_secs_f64(),
        scale::TAKERS,
        config.scale_leases,
        runs.iter()
            .map(|run| run.held_for.as_secs())
            .min()
            .unwrap_or(0),
    );
    let _ = writeln!(
        o,
        "| holds | taken/s | memory per hold | renewal calls per period | ÷ holds/200 | commands per renewed key | Redis commands/s | Redis CPU % | client CPU % | other acquisitions/s held ÷ idle | lost |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for run in runs {
        let _ = writeln!(
            o,
            "| {} | {:.0} | {:.0} B | {:.1} | {:.2} | {:.2} | {:.0} | {:.1} | {:.1} | {:.0} ÷ {:.0} = {:.2} | {} |",
            run.holds,
            run.take_rate,
            run.bytes_per_hold,
            run.round_trips_per_period(),
            ratio(run.round_trips_per_period(), run.holds as f64 / 200.0),
            run.commands_per_renewal(),
            run.commands_per_second(),
            run.server_cpu_pct(),
            run.client_cpu_pct(),
            run.rate_held,
            run.rate_idle,
            run.rate_while_held(),
            run.lost
        );
    }
}

/// (b) against tasks: one row per implementation, one column per number of tasks.
fn against_tasks(o: &mut String, config: &Config, sweep: &[(Kind, usize, f64)]) {
    let _ = writeln!(
        o,
        "\n#### (b) against tasks\n\n\
         {} cycles on fresh keys shared by 1 to {} tasks of one client, each implementation \
         in turn at each number of tasks; ops/s (one run each).\n",
        config.sweep_cycles,
        config.sweep_tasks.iter().max().unwrap_or(&0)
    );
    let header: Vec<String> = config
        .sweep_tasks
        .iter()
        .map(|&t| format!("{t} task{}", if t == 1 { "" } else { "s" }))
        .collect();
    let _ = writeln!(
        o,
        "| implementation | {} |\n|---|{}",
        header.join(" | "),
        "---:|".repeat(header.len())
    );
    for kind in Kind::ALL {
        let rates: Vec<String> = config
            .sweep_tasks
            .iter()
            .filter_map(|&tasks| {
                sweep
                    .iter()
                    .find(|(k, t, _)| *k == kind && *t == tasks)
                    .map(|(_, _, rate)| format!("{rate:.0}"))
            })
            .collect();
        if !rates.is_empty() {
            let _ = writeln!(o, "| {} | {} |", kind.label(), rates.join(" | "));
        }
    }
}
