//! The checks of a soak run's merged history, and what they found.
//!
//! [`check`] runs the one overlap check of every history ([`crate::history::sweep`]) and
//! counts what a lock must never do, and what it may do only with a signal:
//!
//! - **overlaps**: a section granted while another section on the same key had not ended
//!   (on a read-write lock's keys, one of the two a writer's, or both upgradeable readers':
//!   [`crate::history::kinds_sweep`])
//!   (a section ends where its holder was told, by `lost()`, that it lost the lease). An
//!   overlap is *signalled* when the earlier holder was told, late: its `lost()` fired, or
//!   its release answered `Lost`; an overlap whose earlier holder was never told is
//!   *silent*, the one outcome rlock promises never to produce.
//! - **stale writes accepted**: a write accepted by the store after a write with a higher
//!   fence had been accepted for the same key (fencing failed to protect the resource).
//! - **fence regressions**: a section granted after another on the same key, with a fence
//!   that is not higher.
//! - **repeated fences**: two sections of one key granted the same fence, wherever they lie
//!   (on a leader's seat: two leaders of one term).
//! - **permit excesses**, on a semaphore's keys instead of overlaps: a section granted while
//!   as many sections of the key as it has permits were held ([`crate::history::count_sweep`],
//!   a section again ending where its holder was told it lost the lease). Each is read as an
//!   [`Overlap`] whose `earlier` is the holder that should have stopped: the first of those
//!   sections (the new one included) told, late, that it lost its permit. It is signalled
//!   when enough of them were told to bring the count back to the permits, *silent*
//!   otherwise, and signalled ones are put down to a [`Cause`] like overlaps.
//!
//! - **overlaps of two kinds** on a name every kind asks for (a lock's section beside a
//!   permit's, a reader's beside a permit's: [`crate::history::kinds_sweep`]): a name is one
//!   kind of thing at a time, so each is an incompatible grant, counted with the overlaps
//!   (signalled or silent) and apart.
//!
//! A signalled overlap is then put down to a [`Cause`] ([`classify`]): a nemesis fault nearby
//! (the orchestrator knows its faults and says so), else a **scheduling delay** when the
//! earlier holder's own process had its timers fire late by about as long as it was told
//! late (every worker measures its timer lateness and reports it, [`Lateness`]), else
//! nothing explains it. A silent overlap is never explained: it is a violation whatever
//! happened around it.

use std::collections::HashMap;
use std::fmt;

#[cfg(doc)]
use super::history::Lateness;
use super::history::{
    History, LATENESS_WINDOW_US, PROBE_SLEEP_MAX_US, Record, Release, SectionKind, Write,
};
use crate::history;

/// An overlap of two sections ([`crate::history::sweep`]), `earlier` the holder that should
/// have stopped.
pub type Overlap = history::Overlap<Record>;

/// When `section`'s holder was told it had lost its lease: its `lost()`, else its release
/// answering `Lost`; `None` if it never was.
fn told_us(section: &Record) -> Option<u64> {
    if section.lost_us > 0 {
        Some(section.lost_us)
    } else {
        (section.release == Release::Lost).then_some(section.end_us)
    }
}

impl Overlap {
    /// When the earlier holder was told it had lost the lock: its `lost()`, else its release
    /// answering `Lost`; `None` if it never was (a silent overlap).
    pub fn told_us(&self) -> Option<u64> {
        told_us(&self.earlier)
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
    /// Pairs of sections of one key granted the same fence (two leaders of one term), the
    /// later granted second: must be empty.
    pub repeated_fences: Vec<(Record, Record)>,
    /// Of `sections`, those that held a semaphore's permit.
    pub semaphore_sections: u64,
    /// Of `sections`, those that held a read-write lock's read or write lock (their
    /// overlaps with a writer are counted with the locks').
    pub read_write_sections: u64,
    /// Of those, the upgrades of an upgradeable read (a write beside it): each between two
    /// sections of its upgradeable read, which an overlap of two upgradeable readers or of a
    /// writer with one is counted with the locks'.
    pub upgrade_sections: u64,
    /// Of the overlaps (signalled or silent), those of two kinds on one name (a lock and a
    /// permit, a reader and a permit, ...): a name is one kind at a time, so each is an
    /// incompatible grant.
    pub kind_overlaps: u64,
    /// Semaphore keys held by more sections than permits, enough of whose holders were told,
    /// late, to bring the count back: `earlier` the first told.
    pub signalled_excesses: Vec<Overlap>,
    /// Semaphore keys held by more sections than permits with too few holders ever told
    /// (`earlier` one never told): must be empty.
    pub silent_excesses: Vec<Overlap>,
    /// Silent overlaps and permit excesses granted across a failover on a replicated
    /// deployment whose grants wait for no replica (`min_replicas` 0): Redis's asynchronous
    /// replication can lose a grant, or let two masters take writes for a moment, and then
    /// both holders may finish without being told. Counted and shown, not violations (the run
    /// moves them here from `silent_overlaps` and `silent_excesses`).
    pub across_failovers: Vec<Overlap>,
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
        for e in &self.silent_excesses {
            out.push(format!(
                "silent permit excess on {} ({} permits): {:?} granted while {:?} and others \
                 held every permit, and too few of them were ever told they lost theirs",
                key(&e.later),
                e.later.permits().unwrap_or(0),
                e.later,
                e.earlier
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
        for (first, second) in &self.repeated_fences {
            out.push(format!(
                "fence {} granted twice on {}: {first:?} and {second:?}",
                second.fence,
                key(second)
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
    let (mut locks, mut permits, mut read_write) = (Vec::new(), Vec::new(), Vec::new());
    for r in &history.records {
        match r.kind {
            SectionKind::Lock => locks.push(*r),
            SectionKind::Semaphore { .. } => permits.push(*r),
            SectionKind::Read
            | SectionKind::Write
            | SectionKind::UpgradeableRead
            | SectionKind::Upgrade => read_write.push(*r),
        }
    }
    verdict.semaphore_sections = permits.len() as u64;
    verdict.read_write_sections = read_write.len() as u64;
    verdict.upgrade_sections = (read_write.iter())
        .filter(|r| r.kind == SectionKind::Upgrade)
        .count() as u64;
    for excess in crate::history::count_sweep(&permits, |r| r.permits().unwrap_or(1), Record::take)
    {
        match read_excess(&excess) {
            ExcessRead::Signalled(overlap) => verdict.signalled_excesses.push(overlap),
            ExcessRead::Silent(overlap) => verdict.silent_excesses.push(overlap),
        }
    }
    // Overlaps and fence order: the one check every lock's history goes through; a
    // read-write lock's overlaps are those with a writer.
    let found = crate::history::sweep(&locks);
    verdict.fence_regressions = found.fence_regressions;
    // A writer beside anyone, or two upgradeable readers at once. (An upgrade is a writer;
    // its upgradeable read's sections stop where it begins and start again where it ends,
    // so the two never overlap.)
    let with_writers = crate::history::kinds_sweep(&read_write, held);
    // A name used as several kinds: two kinds' sections of one key held at once.
    let across_kinds: Vec<Overlap> = crate::history::kinds_sweep(&history.records, held)
        .into_iter()
        .filter(|o| kind_of(&o.earlier) != kind_of(&o.later))
        .collect();
    verdict.kind_overlaps = across_kinds.len() as u64;
    for overlap in found
        .overlaps
        .into_iter()
        .chain(with_writers)
        .chain(across_kinds)
    {
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
    for r in &locks {
        by_key.entry(r.key).or_default().push(*r);
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|r| (r.grant_us, r.end_us));
        stale_writes(sections, &mut verdict);
    }
    verdict.repeated_fences = repeated_fences(&by_key);
    verdict
}

/// Sections of one key (`by_key`'s, each key's in grant order) granted a fence an earlier
/// one of the key was granted, each with the first one granted it.
fn repeated_fences(by_key: &HashMap<u32, Vec<Record>>) -> Vec<(Record, Record)> {
    let mut repeated = Vec::new();
    for sections in by_key.values() {
        let mut first: HashMap<u64, Record> = HashMap::new();
        for &r in sections.iter().filter(|r| r.fence > 0) {
            match first.get(&r.fence) {
                Some(earlier) => repeated.push((*earlier, r)),
                None => {
                    first.insert(r.fence, r);
                }
            }
        }
    }
    repeated
}

/// What a section held, for the check of names used as several kinds.
fn held(r: &Record) -> history::Held {
    match r.kind {
        SectionKind::Lock => history::Held::Lock,
        SectionKind::Semaphore { permits, .. } => history::Held::Permit { permits },
        SectionKind::Read => history::Held::Read,
        SectionKind::UpgradeableRead => history::Held::Upgradeable,
        SectionKind::Write | SectionKind::Upgrade => history::Held::Write,
    }
}

/// The kind of thing a section held: a lock, a semaphore or a read-write lock.
fn kind_of(r: &Record) -> u8 {
    match r.kind {
        SectionKind::Lock => 0,
        SectionKind::Semaphore { .. } => 1,
        SectionKind::Read
        | SectionKind::Write
        | SectionKind::UpgradeableRead
        | SectionKind::Upgrade => 2,
    }
}

/// A permit excess read as an overlap with the holder that should have stopped.
enum ExcessRead {
    /// At least as many holders were told (late) as there were sections over the permits:
    /// `earlier` the first of them told.
    Signalled(Overlap),
    /// Too few were: `earlier` one never told.
    Silent(Overlap),
}

fn read_excess(excess: &history::Excess<Record>) -> ExcessRead {
    let permits = u64::from(excess.later.permits().unwrap_or(1));
    let holders = || excess.held.iter().chain([&excess.later]);
    // The permits held beyond the count, and those of the holders told they lost theirs.
    let in_use: u64 = holders().map(|r| u64::from(r.take())).sum();
    let over = in_use.saturating_sub(permits);
    let mut told: Vec<&Record> = holders().filter(|r| told_us(r).is_some()).collect();
    told.sort_by_key(|r| told_us(r));
    let told_permits: u64 = told.iter().map(|r| u64::from(r.take())).sum();
    let overlap = |earlier: &Record| Overlap {
        earlier: *earlier,
        later: excess.later,
        since_us: excess.since_us,
    };
    match (told.first(), holders().find(|r| told_us(r).is_none())) {
        (Some(first), _) if told_permits >= over => ExcessRead::Signalled(overlap(first)),
        (_, Some(never_told)) => ExcessRead::Silent(overlap(never_told)),
        // Unreachable: fewer told than over the permits leaves one never told.
        (_, None) => ExcessRead::Silent(overlap(&excess.later)),
    }
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
             fencing: {}, stale accepted: {}; fence regressions: {}, repeated: {}; told after the next grant \
             (p50/p99/max ms): {}; semaphore sections: {}, permit excesses: {} signalled, {} \
             silent",
            self.sections,
            self.lost,
            self.signalled_overlaps.len(),
            self.silent_overlaps.len(),
            self.rejected_writes,
            self.stale_writes.len(),
            self.fence_regressions.len(),
            self.repeated_fences.len(),
            percentiles_ms(&self.lost_windows_us),
            self.semaphore_sections,
            self.signalled_excesses.len(),
            self.silent_excesses.len()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::protocol::Line;
    use crate::soak::history::{Lateness, output};

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
            kind: SectionKind::Lock,
        }
    }

    /// A section holding one permit of 2: no fence, no write.
    fn permit(grant: u64, end: u64, lost: u64) -> Record {
        Record {
            fence: 0,
            kind: SectionKind::Semaphore {
                permits: 2,
                take: 1,
            },
            ..rec(0, grant, end, lost, (0, 0, Write::None))
        }
    }

    fn history(records: &[Record]) -> History {
        let mut lines: Vec<Line> = records.iter().map(|r| r.line("k")).collect();
        lines.push(Line::Errors {
            variant: "Busy".into(),
            count: 3,
        });
        let mut h = History::default();
        h.add_worker(0, &output(&lines)).unwrap();
        h
    }

    #[test]
    fn lines_round_trip() {
        let r = rec(7, 10, 20, 15, (12, 13, Write::Rejected));
        let h = history(&[r]);
        assert_eq!(h.records, [r]);
        assert_eq!(h.errors["Busy"], 3);
        assert!(
            History::default()
                .add_worker(1, "SECTION k 1 2\nDONE 1\n")
                .is_err()
        );
        assert!(History::default().add_worker(1, "").is_err());
        assert!(
            History::default()
                .add_worker(1, "FINISHED\nDONE 0\n")
                .is_err()
        );
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

    /// A hold of several permits counts each: two holds of 2 of 3 permits at once are an
    /// excess, signalled once the holder of one of them is told (which frees enough), silent
    /// otherwise; a hold of 2 beside one of 1 is none.
    #[test]
    fn holds_of_several_permits_count_each() {
        let hold = |take: u32, grant: u64, end: u64, lost: u64| Record {
            kind: SectionKind::Semaphore { permits: 3, take },
            ..permit(grant, end, lost)
        };
        let fits = history(&[hold(2, 0, 10, 0), hold(1, 5, 15, 0)]);
        let v = check(&fits);
        assert!(
            v.silent_excesses.is_empty() && v.signalled_excesses.is_empty(),
            "{v}"
        );
        let silent = history(&[hold(2, 0, 10, 0), hold(2, 5, 15, 0)]);
        assert_eq!(check(&silent).silent_excesses.len(), 1);
        let told = history(&[hold(2, 0, 10, 7), hold(2, 5, 15, 0)]);
        let v = check(&told);
        assert_eq!(
            (v.signalled_excesses.len(), v.silent_excesses.len()),
            (1, 0),
            "{v}"
        );
    }

    /// Two leaders of one term are found wherever their terms lie, even with a higher one
    /// between them (which the sweep of neighbours would take for a plain regression).
    #[test]
    fn a_fence_granted_twice_is_found_apart_from_the_order() {
        let twice = history(&[
            rec(4, 0, 10, 0, (0, 0, Write::None)),
            rec(5, 10, 20, 0, (0, 0, Write::None)),
            rec(4, 20, 30, 0, (0, 0, Write::None)),
        ]);
        let v = check(&twice);
        assert_eq!(v.repeated_fences.len(), 1, "{v}");
        assert_eq!(v.repeated_fences[0].0.grant_us, 0);
        assert_eq!(v.repeated_fences[0].1.grant_us, 20);
        let distinct = history(&[
            rec(4, 0, 10, 0, (0, 0, Write::None)),
            rec(5, 10, 20, 0, (0, 0, Write::None)),
        ]);
        assert!(check(&distinct).repeated_fences.is_empty());
        // Permits carry no fence: never a repeat.
        assert!(
            check(&history(&[permit(0, 10, 0), permit(5, 15, 0)]))
                .repeated_fences
                .is_empty()
        );
    }

    /// A candidate killed while it led wrote `ELECTED` and no `SECTION`: its term is a section
    /// that ends at its death, and the next leader's grant after it is no overlap. A candidate
    /// that was not killed must have written its term's `SECTION`.
    #[test]
    fn a_killed_leaders_term_ends_at_its_death() {
        let elected = Line::Elected {
            key: "soak:single:leader".into(),
            term: 3,
            at_us: 100,
        };
        // Killed as it wrote its next line, cut short.
        let text: String = format!("{elected}\nSECTI");
        let mut h = History::default();
        h.add_candidate(7, &text, Some(400)).unwrap();
        let next = rec(4, 900, 1_000, 0, (0, 0, Write::None));
        h.add_worker(8, &output(&[next.line("soak:single:leader")]))
            .unwrap();
        assert_eq!(h.records.len(), 2);
        let killed = h.records[0];
        assert_eq!(
            (killed.fence, killed.grant_us, killed.end_us),
            (3, 100, 400)
        );
        assert_eq!(killed.release, Release::Failed);
        let v = check(&h);
        assert!(
            v.silent_overlaps.is_empty() && v.signalled_overlaps.is_empty(),
            "{v}"
        );
        assert!(History::default().add_candidate(7, &text, None).is_err());
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
            for (worker, record) in [(1, earlier), (0, later)] {
                let mut lines = vec![record.line("k")];
                for &(of, woke_us, late_us) in lateness.iter().filter(|l| l.0 == worker) {
                    let l = Lateness {
                        worker: of,
                        woke_us,
                        late_us,
                    };
                    lines.push(l.line());
                }
                h.add_worker(worker, &output(&lines)).unwrap();
            }
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

    /// Two permits: a third section held at once is an excess, silent unless one of the three
    /// holders was told (late) it lost its permit; a holder told before the third began no
    /// longer counts. Lock sections on other keys are not counted against permits.
    #[test]
    fn a_permit_excess_is_signalled_only_when_a_holder_was_told() {
        let both = [permit(0, 30, 0), permit(5, 30, 0)];
        let h = history(&[both[0], both[1], permit(30, 40, 0)]);
        let v = check(&h);
        assert!(v.violations(&h).is_empty(), "{v}");
        assert_eq!(v.semaphore_sections, 3);
        assert_eq!(v.sections, 3);

        let silent = history(&[both[0], both[1], permit(10, 20, 0)]);
        let v = check(&silent);
        assert_eq!(v.silent_excesses.len(), 1, "{v}");
        assert!(v.violations(&silent)[0].contains("permit excess"));
        assert!(v.signalled_overlaps.is_empty() && v.silent_overlaps.is_empty());

        // The first holder told 4 µs after the third grant: signalled, it should have stopped.
        let told = history(&[permit(0, 30, 14), both[1], permit(10, 20, 0)]);
        let v = check(&told);
        assert!(v.violations(&told).is_empty(), "{v}");
        assert_eq!(v.signalled_excesses.len(), 1);
        assert_eq!(v.signalled_excesses[0].earlier.grant_us, 0);
        assert_eq!(v.signalled_excesses[0].told_late_us(), Some(4));

        // Told before the third grant: no excess at all.
        let before = history(&[permit(0, 30, 8), both[1], permit(10, 20, 0)]);
        let v = check(&before);
        assert!(v.signalled_excesses.is_empty() && v.silent_excesses.is_empty());
    }

    /// On a name every kind asks for, a lock's section beside a permit's is an overlap of
    /// two kinds, silent unless one was told; two permits of a count of 2 are not.
    #[test]
    fn two_kinds_on_one_name_are_an_overlap() {
        let lock = rec(0, 10, 30, 0, (0, 0, Write::None));
        let h = history(&[permit(0, 20, 0), permit(5, 25, 0), lock]);
        let v = check(&h);
        assert_eq!(v.kind_overlaps, 1, "{v:?}");
        assert_eq!(v.silent_overlaps.len(), 1, "{v:?}");
        let told = history(&[permit(0, 20, 8), lock]);
        let v = check(&told);
        assert_eq!((v.kind_overlaps, v.silent_overlaps.len()), (0, 0), "{v:?}");
        let after = history(&[permit(0, 10, 0), rec(0, 10, 30, 0, (0, 0, Write::None))]);
        assert_eq!(check(&after).kind_overlaps, 0);
    }

    /// A section of `kind` of a read-write lock, with no fence and no write.
    fn rw(kind: SectionKind, grant: u64, end: u64) -> Record {
        Record {
            kind,
            ..rec(0, grant, end, 0, (0, 0, Write::None))
        }
    }

    /// An upgradeable read's pieces around its upgrade pass beside readers; an upgrade
    /// beside another's read, a writer beside an upgradeable read, and two upgradeable reads
    /// at once are silent overlaps.
    #[test]
    fn upgrades_and_upgradeable_reads_are_checked() {
        use SectionKind::{Read, Upgrade, UpgradeableRead, Write as Writer};
        let upgraded = [
            rw(UpgradeableRead, 0, 10),
            rw(Upgrade, 10, 20),
            rw(UpgradeableRead, 20, 30),
            rw(Read, 2, 8),
            rw(Read, 25, 40),
            rw(UpgradeableRead, 30, 50),
        ];
        let v = check(&history(&upgraded));
        assert_eq!(v.upgrade_sections, 1);
        assert!(v.silent_overlaps.is_empty(), "{v:?}");
        for wrong in [
            [
                rw(UpgradeableRead, 0, 10),
                rw(Upgrade, 10, 20),
                rw(Read, 5, 15),
            ],
            [
                rw(UpgradeableRead, 0, 10),
                rw(Writer, 5, 15),
                rw(Read, 20, 30),
            ],
            [
                rw(UpgradeableRead, 0, 10),
                rw(UpgradeableRead, 5, 15),
                rw(Read, 0, 30),
            ],
        ] {
            let v = check(&history(&wrong));
            assert_eq!(v.silent_overlaps.len(), 1, "{wrong:?}: {v:?}");
        }
    }

    #[test]
    fn percentiles() {
        assert_eq!(percentiles_ms(&[]), "-");
        assert_eq!(percentiles_ms(&[1000, 2000, 3000]), "2.0 / 3.0 / 3.0");
    }
}
