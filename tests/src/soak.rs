//! The history of a soak run (`soak` binary) and the checks run over it.
//!
//! Every critical section a soak worker runs becomes one [`Record`]: its key, fencing token,
//! when `acquire` returned, when the section ended, when `lost()` fired (if it did), and its
//! one write through the fenced store (a Redis hash that keeps the highest fence per key and
//! refuses lower ones). [`check`] merges the records of all workers and counts what a lock
//! must never do, and what it may do only with a signal:
//!
//! - **overlaps**: a section granted while another section on the same key had not ended.
//!   An overlap is *signalled* when the earlier holder was told, late: its `lost()` fired, or
//!   its release answered `Lost`; an overlap whose earlier holder was never told is
//!   *silent*, the one outcome rlock promises never to produce.
//! - **stale writes accepted**: a write accepted by the store after a write with a higher
//!   fence had been accepted for the same key (fencing failed to protect the resource).
//! - **fence regressions**: a section granted after another ended on the same key, with a
//!   fence that is not higher.
//!
//! A section's effective end is its end, or the moment `lost()` fired if that came first:
//! a holder stops acting on a lock it was told it lost.
//!
//! A signalled overlap is then put down to a [`Cause`] ([`classify`]): a nemesis fault nearby
//! (the orchestrator knows its faults and says so), else a **scheduling delay** when the
//! earlier holder's own process had its timers fire late by about as long as it was told
//! late (every worker measures its timer lateness and reports it, [`Lateness`]), else
//! nothing explains it. A silent overlap is never explained: it is a violation whatever
//! happened around it.
//!
//! Workers of the waiting mix also report, per key, how their waits went ([`Waits`]) and
//! each wait that gave up `Busy` ([`GaveUp`]); [`crate::waits`] judges them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::history::{self, AsSection, Section};

/// What became of a section's write to the fenced store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The store took it: its fence was the highest yet for the key.
    Accepted,
    /// The store refused it: a higher fence had written already.
    Rejected,
    /// No write: `lost()` fired first, or the store could not be reached.
    None,
}

/// What became of a section's release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Released while still held.
    Ok,
    /// The lease had been lost (`LockError::Lost`, or `lost()` had fired).
    Lost,
    /// The release failed for another reason (Redis unreachable): the lease ends by itself.
    Failed,
}

/// One critical section, as a worker recorded it. Times are wall-clock microseconds since the
/// UNIX epoch (all workers run on one machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The worker process.
    pub worker: u32,
    /// Index into [`History::keys`].
    pub key: u32,
    /// The section's fencing token.
    pub fence: u64,
    /// When `acquire` returned.
    pub grant_us: u64,
    /// When the section ended (its body done or cut short by `lost()`).
    pub end_us: u64,
    /// When `lost()` fired during the section; 0 if it did not.
    pub lost_us: u64,
    /// When the write was sent and when its answer came; 0 without a write.
    pub write_sent_us: u64,
    /// See `write_sent_us`.
    pub write_done_us: u64,
    /// The write's outcome.
    pub write: Write,
    /// The release's outcome.
    pub release: Release,
}

impl Record {
    /// The line a worker writes for this section (`key` is the key's text).
    pub fn line(&self, key: &str) -> String {
        let write = match self.write {
            Write::Accepted => 'a',
            Write::Rejected => 'r',
            Write::None => '-',
        };
        let release = match self.release {
            Release::Ok => 'o',
            Release::Lost => 'l',
            Release::Failed => 'f',
        };
        format!(
            "S {key} {} {} {} {} {} {} {write} {release}",
            self.fence,
            self.grant_us,
            self.end_us,
            self.lost_us,
            self.write_sent_us,
            self.write_done_us
        )
    }
}

impl AsSection for Record {
    fn section(&self) -> Section {
        Section {
            key: self.key,
            owner: self.worker as usize,
            fence: Some(self.fence),
            start_us: self.grant_us,
            end_us: self.end_us,
            lost_us: (self.lost_us > 0).then_some(self.lost_us),
        }
    }
}

/// How one worker's waiting-mix requests on one key went (a `Q` line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// Calls of `acquire`.
    pub requests: u64,
    /// Calls that returned a guard.
    pub grants: u64,
    /// Calls that gave up with `Busy` when their wait budget ran out.
    pub busy: u64,
    /// Calls cancelled while they waited (a timeout around `acquire` shorter than its
    /// budget, or the end of the run).
    pub cancelled: u64,
    /// Calls that failed otherwise (`Timeout`, `Unavailable`, …).
    pub errors: u64,
    /// Time spent in `acquire` by all of them, µs: the client's waiting time on the key.
    pub waited_us: u64,
}

impl Waits {
    /// The line a worker writes for its waits on `key`.
    pub fn line(&self, key: &str) -> String {
        format!(
            "Q {key} {} {} {} {} {} {}",
            self.requests, self.grants, self.busy, self.cancelled, self.errors, self.waited_us
        )
    }
}

/// A waiting-mix request that gave up `Busy` (a `B` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaveUp {
    /// The worker process.
    pub worker: u32,
    /// Index into [`History::keys`].
    pub key: u32,
    /// When `acquire` was called and when it returned `Busy` (µs since the epoch).
    pub start_us: u64,
    /// See `start_us`.
    pub end_us: u64,
}

impl GaveUp {
    /// The line a worker writes for it.
    pub fn line(&self, key: &str) -> String {
        format!("B {key} {} {}", self.start_us, self.end_us)
    }
}

/// Longest sleep of a worker's lateness probe: it sleeps 5 to 10 ms, again and again.
pub const PROBE_SLEEP_MAX_US: u64 = 10_000;
/// A worker reports the worst lateness of its probe per window of this length.
pub const LATENESS_WINDOW_US: u64 = 100_000;
/// Lateness under this is not reported (a window without a line was at most this late).
pub const LATENESS_REPORTED_US: u64 = 1_000;

/// The worst timer lateness a worker process saw in one window (a `T` line): a sleep due at
/// `woke_us - late_us` woke at `woke_us`, so the process's timers did not fire in between
/// (it was not scheduled, or was stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lateness {
    /// The worker process.
    pub worker: u32,
    /// When the late sleep woke (µs since the epoch, the history's clock).
    pub woke_us: u64,
    /// How late it woke, µs.
    pub late_us: u64,
}

impl Lateness {
    /// The line a worker writes for it.
    pub fn line(&self) -> String {
        format!("T {} {}", self.woke_us, self.late_us)
    }
}

/// The merged records, errors and summaries of every worker of a run.
#[derive(Debug, Default)]
pub struct History {
    /// Lock keys, indexed by [`Record::key`].
    pub keys: Vec<String>,
    key_index: HashMap<String, u32>,
    /// Every critical section.
    pub records: Vec<Record>,
    /// Waiting-mix requests per (worker, key).
    pub waits: BTreeMap<(u32, u32), Waits>,
    /// Waiting-mix requests that gave up `Busy`.
    pub gave_up: Vec<GaveUp>,
    /// Each worker's timer lateness, worst per window, in the order reported.
    pub lateness: Vec<Lateness>,
    /// `(worker, deployment, client id)`: the id its client on that deployment puts in its
    /// owner tokens (`C` lines), by which Redis-side counts are told apart.
    pub clients: Vec<(u32, String, String)>,
    /// Failed acquisitions and releases by `LockError` variant (`Busy`, `Unavailable`, …).
    pub errors: BTreeMap<String, u64>,
    /// Panics reported by workers (a `P` line) or seen as a worker's abnormal exit.
    pub panics: u64,
    /// Workers that wrote their `DONE` line.
    pub finished_workers: u32,
}

impl History {
    /// The text of `record`'s key.
    pub fn key(&self, record: &Record) -> &str {
        self.keys
            .get(record.key as usize)
            .map_or("", String::as_str)
    }

    /// The index of `key`, if a worker named it.
    pub fn key_id(&self, key: &str) -> Option<u32> {
        self.key_index.get(key).copied()
    }

    /// Adds what one worker wrote: `S …` lines ([`Record::line`]), `Q …` ([`Waits::line`]),
    /// `B …` ([`GaveUp::line`]), `T …` ([`Lateness::line`]), `C <deployment> <client id>`,
    /// `E <variant> <count>`, `P <message>` and a final `DONE`.
    ///
    /// # Errors
    ///
    /// On a malformed line or a missing `DONE`.
    pub fn add_worker(&mut self, worker: u32, text: &str) -> Result<(), String> {
        let mut done = false;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let bad = || format!("worker {worker}: bad line {line:?}");
            match words.next() {
                Some("S") => {
                    let key = words.next().ok_or_else(bad)?;
                    let mut num = || -> Result<u64, String> {
                        words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)
                    };
                    let numbers = [num()?, num()?, num()?, num()?, num()?, num()?];
                    let write = match words.next() {
                        Some("a") => Write::Accepted,
                        Some("r") => Write::Rejected,
                        Some("-") => Write::None,
                        _ => return Err(bad()),
                    };
                    let release = match words.next() {
                        Some("o") => Release::Ok,
                        Some("l") => Release::Lost,
                        Some("f") => Release::Failed,
                        _ => return Err(bad()),
                    };
                    let key = self.intern(key);
                    let [
                        fence,
                        grant_us,
                        end_us,
                        lost_us,
                        write_sent_us,
                        write_done_us,
                    ] = numbers;
                    self.records.push(Record {
                        worker,
                        key,
                        fence,
                        grant_us,
                        end_us,
                        lost_us,
                        write_sent_us,
                        write_done_us,
                        write,
                        release,
                    });
                }
                Some("Q") => {
                    let key = words.next().ok_or_else(bad)?;
                    let mut num = || -> Result<u64, String> {
                        words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)
                    };
                    let [requests, grants, busy, cancelled, errors, waited_us] =
                        [num()?, num()?, num()?, num()?, num()?, num()?];
                    let key = self.intern(key);
                    let waits = self.waits.entry((worker, key)).or_default();
                    waits.requests += requests;
                    waits.grants += grants;
                    waits.busy += busy;
                    waits.cancelled += cancelled;
                    waits.errors += errors;
                    waits.waited_us += waited_us;
                }
                Some("B") => {
                    let key = words.next().ok_or_else(bad)?;
                    let mut num = || -> Result<u64, String> {
                        words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)
                    };
                    let [start_us, end_us] = [num()?, num()?];
                    let key = self.intern(key);
                    self.gave_up.push(GaveUp {
                        worker,
                        key,
                        start_us,
                        end_us,
                    });
                }
                Some("T") => {
                    let mut num = || -> Result<u64, String> {
                        words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)
                    };
                    let [woke_us, late_us] = [num()?, num()?];
                    self.lateness.push(Lateness {
                        worker,
                        woke_us,
                        late_us,
                    });
                }
                Some("C") => {
                    let deployment = words.next().ok_or_else(bad)?;
                    let id = words.next().ok_or_else(bad)?;
                    self.clients
                        .push((worker, deployment.to_owned(), id.to_owned()));
                }
                Some("E") => {
                    let variant = words.next().ok_or_else(bad)?;
                    let n: u64 = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
                    *self.errors.entry(variant.to_owned()).or_default() += n;
                }
                Some("P") => self.panics += 1,
                Some("DONE") => done = true,
                Some(_) => return Err(bad()),
                None => {}
            }
        }
        if !done {
            return Err(format!("worker {worker}: no DONE line"));
        }
        self.finished_workers += 1;
        Ok(())
    }

    fn intern(&mut self, key: &str) -> u32 {
        if let Some(&i) = self.key_index.get(key) {
            return i;
        }
        let i = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
        self.keys.push(key.to_owned());
        self.key_index.insert(key.to_owned(), i);
        i
    }
}

/// An overlap of two sections ([`crate::history::sweep`]), `earlier` the holder that should
/// have stopped.
pub type Overlap = history::Overlap<Record>;

impl Overlap {
    /// When the earlier holder was told it had lost the lock: its `lost()`, else its release
    /// answering `Lost`; `None` if it never was (a silent overlap).
    pub fn told_us(&self) -> Option<u64> {
        let first = &self.earlier;
        if first.lost_us > 0 {
            Some(first.lost_us)
        } else {
            (first.release == Release::Lost).then_some(first.end_us)
        }
    }

    /// How long after the later grant the earlier holder was told, µs.
    pub fn told_late_us(&self) -> Option<u64> {
        self.told_us()
            .map(|told| told.saturating_sub(self.later.grant_us))
    }
}

/// What an overlap is put down to, in this order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// A nemesis fault that reaches the key was under way or just healed at the later grant.
    Fault,
    /// No fault, but the earlier holder's process had its timers fire late, around the moment
    /// it should have been told, by at least how late it was told (less
    /// [`SCHEDULING_SLACK_US`]): the machine did not run it, so it could not tell itself.
    SchedulingDelay,
    /// Nothing above: for a signalled overlap, a holder told late for no visible reason; a
    /// silent one is always this.
    Unexplained,
}

impl Cause {
    /// Its name in a report.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::Fault => "a nemesis fault nearby",
            Cause::SchedulingDelay => "scheduling delay (the holder's process ran late)",
            Cause::Unexplained => "unexplained",
        }
    }
}

/// How much less than the telling's lateness the process's timer lateness may be and still
/// explain it: the probe's longest sleep (a stall that begins while the probe sleeps shows
/// as lateness only from the probe's due time, up to one sleep after the stall began) and
/// 2 ms of measuring.
pub const SCHEDULING_SLACK_US: u64 = PROBE_SLEEP_MAX_US + 2_000;

/// The worst timer lateness of the earlier holder's process that can explain `overlap`: a
/// late wake-up reported between the later grant and one lateness window after the holder
/// was told (a stall that kept it from being told ends when it is told; its worst-of-window
/// line can be stamped up to a window later). `None` for a silent overlap.
pub fn holder_lateness_us(history: &History, overlap: &Overlap) -> Option<u64> {
    let told = overlap.told_us()?;
    let from = overlap.later.grant_us;
    let to = told.saturating_add(LATENESS_WINDOW_US);
    history
        .lateness
        .iter()
        .filter(|l| l.worker == overlap.earlier.worker && (from..=to).contains(&l.woke_us))
        .map(|l| l.late_us)
        .max()
}

/// Puts `overlap` down to a [`Cause`]; `fault_nearby` is the orchestrator's say on whether a
/// fault reaching the key was around the later grant. A silent overlap is `Unexplained`
/// whatever happened around it: rlock promises to tell, faults or not, so nothing excuses it.
pub fn classify(history: &History, overlap: &Overlap, fault_nearby: bool) -> Cause {
    let Some(late) = overlap.told_late_us() else {
        return Cause::Unexplained;
    };
    if fault_nearby {
        Cause::Fault
    } else if holder_lateness_us(history, overlap)
        .is_some_and(|lateness| lateness + SCHEDULING_SLACK_US >= late)
    {
        Cause::SchedulingDelay
    } else {
        Cause::Unexplained
    }
}

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Critical sections checked.
    pub sections: u64,
    /// Sections whose `lost()` fired.
    pub lost: u64,
    /// Overlaps whose earlier holder was told, after the later grant: its `lost()` fired, or
    /// its release answered `Lost` (when Redis lost the key, the holder learns it at its
    /// next renewal or at its release, whichever comes first).
    pub signalled_overlaps: Vec<Overlap>,
    /// Overlaps whose earlier holder was never told: must be empty.
    pub silent_overlaps: Vec<Overlap>,
    /// For signalled overlaps: how long after the later grant the earlier holder was told,
    /// in µs (the window in which two holders believed they held the lock).
    pub lost_windows_us: Vec<u64>,
    /// Writes accepted after a higher fence's write was accepted: must be empty.
    pub stale_writes: Vec<(Record, Record)>,
    /// Writes the store refused (a stale holder stopped by fencing).
    pub rejected_writes: u64,
    /// Later sections (granted after an earlier one ended) whose fence is not higher: must be
    /// empty.
    pub fence_regressions: Vec<(Record, Record)>,
}

impl Verdict {
    /// The violations, one line each (empty when the run is correct).
    pub fn violations(&self, history: &History) -> Vec<String> {
        let key = |r: &Record| history.key(r);
        let mut out = Vec::new();
        for o in &self.silent_overlaps {
            out.push(format!(
                "silent overlap on {}: {:?} still held when {:?} was granted, and its lost() never fired",
                key(&o.earlier),
                o.earlier,
                o.later
            ));
        }
        for (higher, stale) in &self.stale_writes {
            out.push(format!(
                "stale write accepted on {}: fence {} after fence {}",
                key(stale),
                stale.fence,
                higher.fence
            ));
        }
        for (before, after) in &self.fence_regressions {
            out.push(format!(
                "fence went backwards on {}: {} then {}",
                key(after),
                before.fence,
                after.fence
            ));
        }
        out
    }
}

/// Checks the merged history of a run (see the module docs).
pub fn check(history: &History) -> Verdict {
    let mut verdict = Verdict {
        sections: history.records.len() as u64,
        ..Verdict::default()
    };
    for r in &history.records {
        verdict.lost += u64::from(r.lost_us > 0);
        verdict.rejected_writes += u64::from(r.write == Write::Rejected);
    }
    // Overlaps and fence order: the one check every history goes through.
    let found = crate::history::sweep(&history.records);
    verdict.fence_regressions = found.fence_regressions;
    for overlap in found.overlaps {
        // Told late: by `lost()`, or by its release answering `Lost`.
        if let Some(told_us) = overlap.told_us() {
            verdict.signalled_overlaps.push(overlap);
            verdict
                .lost_windows_us
                .push(told_us.saturating_sub(overlap.since_us));
        } else {
            verdict.silent_overlaps.push(overlap);
        }
    }
    let mut by_key: HashMap<u32, Vec<Record>> = HashMap::new();
    for r in &history.records {
        by_key.entry(r.key).or_default().push(*r);
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|r| (r.grant_us, r.end_us));
        stale_writes(sections, &mut verdict);
    }
    verdict
}

/// Stale writes: accepted writes in the order the store must have taken them (one sent after
/// the other's answer came), with a fence below one accepted before.
fn stale_writes(sections: &[Record], verdict: &mut Verdict) {
    let mut accepted: Vec<Record> = sections
        .iter()
        .filter(|r| r.write == Write::Accepted)
        .copied()
        .collect();
    accepted.sort_by_key(|r| r.write_done_us);
    let mut highest: Option<Record> = None;
    for w in accepted {
        if let Some(h) = highest
            && w.fence < h.fence
            && w.write_sent_us > h.write_done_us
        {
            verdict.stale_writes.push((h, w));
        }
        if highest.is_none_or(|h| w.fence > h.fence) {
            highest = Some(w);
        }
    }
}

/// `p50/p99/max` of `values` in milliseconds, or `-` when empty.
pub fn percentiles_ms(values: &[u64]) -> String {
    if values.is_empty() {
        return "-".to_owned();
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| {
        let i = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
    };
    format!("{:.1} / {:.1} / {:.1}", at(0.5), at(0.99), at(1.0))
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} sections, {} lost; overlaps: {} signalled, {} silent; writes rejected by \
             fencing: {}, stale accepted: {}; fence regressions: {}; told after the next grant \
             (p50/p99/max ms): {}",
            self.sections,
            self.lost,
            self.signalled_overlaps.len(),
            self.silent_overlaps.len(),
            self.rejected_writes,
            self.stale_writes.len(),
            self.fence_regressions.len(),
            percentiles_ms(&self.lost_windows_us)
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rec(fence: u64, grant: u64, end: u64, lost: u64, write: (u64, u64, Write)) -> Record {
        Record {
            worker: 0,
            key: 0,
            fence,
            grant_us: grant,
            end_us: end,
            lost_us: lost,
            write_sent_us: write.0,
            write_done_us: write.1,
            write: write.2,
            release: Release::Ok,
        }
    }

    fn history(records: &[Record]) -> History {
        let mut text: String = records.iter().map(|r| r.line("k") + "\n").collect();
        text.push_str("E Busy 3\nDONE\n");
        let mut h = History::default();
        h.add_worker(0, &text).unwrap();
        h
    }

    #[test]
    fn lines_round_trip() {
        let r = rec(7, 10, 20, 15, (12, 13, Write::Rejected));
        let h = history(&[r]);
        assert_eq!(h.records, [r]);
        assert_eq!(h.errors["Busy"], 3);
        assert!(History::default().add_worker(1, "S k 1 2\nDONE\n").is_err());
        assert!(History::default().add_worker(1, "").is_err());
    }

    #[test]
    fn a_serial_history_passes() {
        let h = history(&[
            rec(1, 0, 10, 0, (5, 6, Write::Accepted)),
            rec(2, 10, 20, 0, (15, 16, Write::Accepted)),
        ]);
        let v = check(&h);
        assert!(v.violations(&h).is_empty(), "{v}");
        assert!(v.signalled_overlaps.is_empty());
    }

    #[test]
    fn an_overlap_is_signalled_only_when_lost_fired() {
        // The first holder is told 4 µs after the second was granted.
        let signalled = history(&[
            rec(1, 0, 30, 14, (5, 6, Write::Accepted)),
            rec(2, 10, 20, 0, (15, 16, Write::Accepted)),
        ]);
        let v = check(&signalled);
        assert!(v.violations(&signalled).is_empty(), "{v}");
        assert_eq!(v.signalled_overlaps.len(), 1);
        assert_eq!(v.lost_windows_us, [4]);

        let silent = history(&[
            rec(1, 0, 30, 0, (5, 6, Write::Accepted)),
            rec(2, 10, 20, 0, (15, 16, Write::Accepted)),
        ]);
        let v = check(&silent);
        assert_eq!(v.silent_overlaps.len(), 1);
        assert!(v.violations(&silent)[0].contains("silent overlap"));

        // Told by its release instead: signalled too.
        let mut released_lost = rec(1, 0, 30, 0, (5, 6, Write::Accepted));
        released_lost.release = Release::Lost;
        let by_release = history(&[released_lost, rec(2, 10, 20, 0, (15, 16, Write::Accepted))]);
        let v = check(&by_release);
        assert_eq!(
            (v.signalled_overlaps.len(), v.lost_windows_us.clone()),
            (1, vec![20])
        );

        // lost() before the next grant: no overlap at all.
        let told = history(&[
            rec(1, 0, 30, 8, (5, 6, Write::Accepted)),
            rec(2, 10, 20, 0, (15, 16, Write::Accepted)),
        ]);
        assert!(check(&told).signalled_overlaps.is_empty());
    }

    /// Across a failover the later-seen grant can carry the lower fence: a master granted it
    /// first and lost it. That holder must be told; the other one holds the lock rightly.
    #[test]
    fn a_late_reply_of_a_lost_grant_is_the_one_to_be_told() {
        let mut stale = rec(1, 12, 30, 0, (14, 15, Write::Rejected));
        stale.release = Release::Lost;
        let rightful = rec(2, 10, 20, 0, (13, 14, Write::Accepted));
        let h = history(&[rightful, stale]);
        let v = check(&h);
        assert!(v.silent_overlaps.is_empty(), "{v}");
        assert_eq!(v.signalled_overlaps.len(), 1, "{v}");
        assert_eq!(v.signalled_overlaps[0].earlier.fence, 1);
        assert_eq!(
            v.fence_regressions.len(),
            1,
            "counted, for the one server to fail on"
        );
        stale.release = Release::Ok;
        let v = check(&history(&[rightful, stale]));
        assert_eq!(v.silent_overlaps.len(), 1, "never told: {v}");
    }

    #[test]
    fn stale_writes_and_fence_regressions_are_found() {
        let stale = history(&[
            rec(2, 0, 10, 0, (5, 6, Write::Accepted)),
            rec(1, 10, 20, 0, (15, 16, Write::Accepted)),
        ]);
        let v = check(&stale);
        assert_eq!(v.stale_writes.len(), 1, "{v}");
        assert_eq!(v.fence_regressions.len(), 1, "{v}");
        // Concurrent writes (neither sent after the other's answer) are not ordered.
        let concurrent = history(&[
            rec(2, 0, 10, 9, (5, 8, Write::Accepted)),
            rec(3, 4, 20, 0, (6, 7, Write::Accepted)),
        ]);
        assert!(check(&concurrent).stale_writes.is_empty());
    }

    /// A holder told 50 ms after the next grant, with no fault nearby, is put down to a
    /// scheduling delay only if its own process ran that late around then.
    #[test]
    fn a_late_telling_is_a_scheduling_delay_only_when_the_holders_process_ran_late() {
        let mut earlier = rec(1, 0, 200_000, 150_000, (5, 6, Write::Accepted));
        earlier.worker = 1;
        let later = rec(2, 100_000, 120_000, 0, (110_000, 111_000, Write::Accepted));
        let overlap_in = |lateness: &[(u32, u64, u64)]| {
            let mut h = History::default();
            let mut text = format!("{}\n", earlier.line("k"));
            for &(worker, woke_us, late_us) in lateness.iter().filter(|l| l.0 == 1) {
                let l = Lateness {
                    worker,
                    woke_us,
                    late_us,
                };
                text.push_str(&(l.line() + "\n"));
            }
            h.add_worker(1, &(text + "DONE\n")).unwrap();
            let mut text = format!("{}\n", later.line("k"));
            for &(worker, woke_us, late_us) in lateness.iter().filter(|l| l.0 == 0) {
                let l = Lateness {
                    worker,
                    woke_us,
                    late_us,
                };
                text.push_str(&(l.line() + "\n"));
            }
            h.add_worker(0, &(text + "DONE\n")).unwrap();
            let v = check(&h);
            assert_eq!(v.signalled_overlaps.len(), 1, "{v}");
            let o = v.signalled_overlaps[0];
            assert_eq!(o.told_late_us(), Some(50_000));
            (classify(&h, &o, false), classify(&h, &o, true))
        };
        // Nothing reported: unexplained, unless a fault was nearby.
        assert_eq!(overlap_in(&[]), (Cause::Unexplained, Cause::Fault));
        // Its process woke 45 ms late as it was told (within the slack of 50 ms): explained.
        assert_eq!(
            overlap_in(&[(1, 151_000, 45_000)]).0,
            Cause::SchedulingDelay
        );
        // Up to a window after it was told, still explained.
        assert_eq!(
            overlap_in(&[(1, 240_000, 60_000)]).0,
            Cause::SchedulingDelay
        );
        // Too little lateness, at the wrong time, or in another process: unexplained.
        for lateness in [
            (1, 151_000, 30_000),
            (1, 99_000, 200_000),
            (1, 260_000, 200_000),
            (0, 151_000, 200_000),
        ] {
            assert_eq!(
                overlap_in(&[lateness]).0,
                Cause::Unexplained,
                "{lateness:?}"
            );
        }
        // A fault nearby takes precedence.
        assert_eq!(overlap_in(&[(1, 151_000, 45_000)]).1, Cause::Fault);
    }

    /// A silent overlap stays a violation, whatever lateness or fault was around it.
    #[test]
    fn a_silent_overlap_is_never_explained() {
        let mut h = history(&[
            rec(1, 0, 30, 0, (5, 6, Write::Accepted)),
            rec(2, 10, 20, 0, (15, 16, Write::Accepted)),
        ]);
        h.lateness.push(Lateness {
            worker: 0,
            woke_us: 15,
            late_us: 1_000_000,
        });
        let v = check(&h);
        let o = v.silent_overlaps[0];
        assert_eq!(o.told_us(), None);
        assert_eq!(holder_lateness_us(&h, &o), None);
        assert_eq!(classify(&h, &o, true), Cause::Unexplained);
        assert_eq!(classify(&h, &o, false), Cause::Unexplained);
        assert_eq!(v.violations(&h).len(), 1);
    }

    #[test]
    fn percentiles() {
        assert_eq!(percentiles_ms(&[]), "-");
        assert_eq!(percentiles_ms(&[1000, 2000, 3000]), "2.0 / 3.0 / 3.0");
    }
}
