//! Recorded lock histories and the one check run over them.
//!
//! Whoever records a history (the `worker contend` processes, the soak's workers, a test's own
//! tasks) reduces each critical section to a [`Section`]: its key, its fencing token when the
//! lock was fenced, the interval during which its holder believed it held the lock, and when
//! `lost()` told the holder otherwise, if it did. [`sweep`] goes through each key's sections
//! in the order they began and finds what a lock must not produce:
//!
//! - an **overlap**: a section that began before an earlier one of the same key had ended. An
//!   earlier holder told it lost the lease (`lost()` fired) at or before the later section
//!   began is no overlap: a holder stops acting on a lock it was told it lost, so its section
//!   ends there ([`Section::effective_end`]).
//! - a **fence regression**: where both carry a fence, a later section whose fence is not
//!   higher.
//!
//! A semaphore's sections may overlap, up to its permit count: [`count_sweep`] goes through
//! each key's sections the same way and finds every **excess**, a section that began while
//! `permits` others of its key were held, with the same rule for lost leases (a holder told
//! at or before the next section began no longer counts).
//!
//! A read-write lock's sections may overlap while they all read, and a key used as several
//! kinds (a name is one kind at a time, but users name two things alike) must not hold two
//! of them at once: [`kinds_sweep`] finds every overlap of two sections that cannot share
//! the key (a writer's with anyone's, two upgradeable readers', a lock's with a permit's),
//! by the same rules.
//!
//! What a run makes of them is built on top: [`check_mutual_exclusion`] refuses any of them
//! (the strict check of the multi-process tests), [`check_permit_count`] refuses any excess,
//! the fault tests refuse overlaps, and the
//! soak tells signalled overlaps from silent ones and puts them down to causes
//! ([`crate::soak`]).

use std::collections::BTreeMap;
use std::fmt;

/// One critical section as its holder recorded it. Times are microseconds on a clock every
/// recorder of the history shares (wall-clock time since the UNIX epoch across processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Which lock: sections of different keys never conflict.
    pub key: u32,
    /// Which recorder (process or task) produced it; only used in messages and statistics.
    pub owner: usize,
    /// The fencing token of the hold, if it was fenced.
    pub fence: Option<u64>,
    /// Taken right after `acquire` returned.
    pub start_us: u64,
    /// Taken right before `release` was called (or the guard dropped).
    pub end_us: u64,
    /// When `lost()` fired during the section, if it did.
    pub lost_us: Option<u64>,
}

impl Section {
    /// The end of the section as far as acting on the lock goes: its end, or the moment
    /// `lost()` fired if that came first.
    pub fn effective_end(&self) -> u64 {
        self.lost_us
            .map_or(self.end_us, |lost| lost.min(self.end_us))
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "owner {} fence ", self.owner)?;
        match self.fence {
            Some(fence) => write!(f, "{fence}")?,
            None => f.write_str("-")?,
        }
        write!(f, " [{} .. {}]", self.start_us, self.end_us)?;
        if let Some(lost) = self.lost_us {
            write!(f, " lost at {lost}")?;
        }
        Ok(())
    }
}

/// A recorded item the check can read as a [`Section`]: recorders keep what else they know
/// (a write's outcome, a release's) beside it.
pub trait AsSection: Copy {
    /// Its critical section.
    fn section(&self) -> Section;
}

impl AsSection for Section {
    fn section(&self) -> Section {
        *self
    }
}

/// Two sections of one key held at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap<T> {
    /// The holder that should have stopped: the section that began first, unless the other
    /// carries the lower fence. Then Redis granted that one first (a master that lost it
    /// since, in a failover or a restart) and its reply was simply the slower to arrive.
    pub earlier: T,
    /// The other section.
    pub later: T,
    /// When the second of the two began: from then on two holders believed they held the
    /// lock.
    pub since_us: u64,
}

/// What [`sweep`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep<T> {
    /// Every section that began while an earlier one of its key was held (each against the
    /// earlier one that ends last).
    pub overlaps: Vec<Overlap<T>>,
    /// `(before, after)`: pairs in the order they began whose fences do not increase.
    pub fence_regressions: Vec<(T, T)>,
}

impl<T> Default for Sweep<T> {
    fn default() -> Self {
        Sweep {
            overlaps: Vec::new(),
            fence_regressions: Vec::new(),
        }
    }
}

/// Checks `items` per key, each key's sections in the order they began (then ended), against
/// the earlier section that ends last (see the module docs).
pub fn sweep<T: AsSection>(items: &[T]) -> Sweep<T> {
    let mut found = Sweep::default();
    for sections in per_key(items).values() {
        sweep_key(sections, &mut found);
    }
    found
}

/// `items`' sections grouped by key, each key's in the order they began (then ended): the
/// order both sweeps walk them in.
fn per_key<T: AsSection>(items: &[T]) -> BTreeMap<u32, Vec<(Section, T)>> {
    let mut by_key: BTreeMap<u32, Vec<(Section, T)>> = BTreeMap::new();
    for item in items {
        let section = item.section();
        by_key
            .entry(section.key)
            .or_default()
            .push((section, *item));
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|(s, _)| (s.start_us, s.end_us));
    }
    by_key
}

fn sweep_key<T: Copy>(sections: &[(Section, T)], found: &mut Sweep<T>) {
    let mut holder: Option<(Section, T)> = None;
    for &(next, next_item) in sections {
        if let Some((held, held_item)) = holder {
            let fences = next.fence.zip(held.fence);
            if next.start_us < held.effective_end() {
                let overlap = if fences.is_some_and(|(next, held)| next < held) {
                    found.fence_regressions.push((held_item, next_item));
                    Overlap {
                        earlier: next_item,
                        later: held_item,
                        since_us: next.start_us,
                    }
                } else {
                    Overlap {
                        earlier: held_item,
                        later: next_item,
                        since_us: next.start_us,
                    }
                };
                found.overlaps.push(overlap);
            } else if fences.is_some_and(|(next, held)| next <= held) {
                found.fence_regressions.push((held_item, next_item));
            }
        }
        if holder.is_none_or(|(h, _)| next.effective_end() > h.effective_end()) {
            holder = Some((next, next_item));
        }
    }
}

/// More sections of one semaphore key held at once than it has permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excess<T> {
    /// The sections of the key held when `later` began (at least `permits` of them), in the
    /// order they began.
    pub held: Vec<T>,
    /// The section whose grant made one too many.
    pub later: T,
    /// When `later` began: from then on more holders than permits believed they held one.
    pub since_us: u64,
}

/// Checks `items` per key, each key's sections in the order they began (then ended), against
/// the permit count `permits` gives for a section, each section holding as many permits as
/// `take` gives: every section that began while too many permits of its key were held for
/// its own is an [`Excess`] (see the module docs). Sections that touch
/// (`start == earlier end`) are not held at once, as in [`sweep`].
pub fn count_sweep<T: AsSection>(
    items: &[T],
    permits: impl Fn(&T) -> u32,
    take: impl Fn(&T) -> u32,
) -> Vec<Excess<T>> {
    let mut found = Vec::new();
    for sections in per_key(items).values() {
        // The sections still held as the next one begins.
        let mut held: Vec<(Section, T)> = Vec::new();
        for &(next, next_item) in sections.iter() {
            held.retain(|(s, _)| s.effective_end() > next.start_us);
            let in_use: u64 = held.iter().map(|(_, item)| u64::from(take(item))).sum();
            if in_use + u64::from(take(&next_item)) > u64::from(permits(&next_item)) {
                found.push(Excess {
                    held: held.iter().map(|&(_, item)| item).collect(),
                    later: next_item,
                    since_us: next.start_us,
                });
            }
            held.push((next, next_item));
        }
    }
    found
}

/// What a section held of its key, for a history whose keys each may be used as several
/// kinds of lease ([`kinds_sweep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A lock: alone.
    Lock,
    /// A read-write lock's reader: beside other readers only.
    Read,
    /// A read-write lock's upgradeable reader: beside plain readers only (its upgrade is a
    /// writer; a section of it ends where its upgrade begins).
    Upgradeable,
    /// A read-write lock's writer: alone.
    Write,
    /// A permit of a semaphore of `permits`: beside at most `permits - 1` other permits only.
    Permit {
        /// The semaphore's count.
        permits: u32,
    },
}

impl Held {
    /// Whether a section holding `self` may be held at once with one holding `other` (a
    /// permit's count aside).
    fn shares_with(self, other: Held) -> bool {
        matches!(
            (self, other),
            (Held::Read, Held::Read | Held::Upgradeable)
                | (Held::Upgradeable, Held::Read)
                | (Held::Permit { .. }, Held::Permit { .. })
        )
    }
}

/// Checks `items` per key, each key's sections in the order they began (then ended), whatever
/// kind each held (`held` tells): a section that began while one it cannot share the key with
/// was held (a lock or a writer beside anyone, a reader beside a permit), or while its
/// semaphore's count of permits was held, is an overlap, against the conflicting section that
/// ends last. A name is one kind of thing at a time, so sections of two kinds never overlap.
/// (Lost leases and sections that touch count as in [`sweep`].)
pub fn kinds_sweep<T: AsSection>(items: &[T], held: impl Fn(&T) -> Held) -> Vec<Overlap<T>> {
    let mut found = Vec::new();
    for sections in per_key(items).values() {
        // The sections still held as the next one begins.
        let mut holding: Vec<(Section, T)> = Vec::new();
        for &(next, next_item) in sections {
            holding.retain(|(s, _)| s.effective_end() > next.start_us);
            let kind = held(&next_item);
            let excess = match kind {
                Held::Permit { permits } => {
                    let permits_held = holding
                        .iter()
                        .filter(|(_, item)| matches!(held(item), Held::Permit { .. }))
                        .count();
                    permits_held >= permits as usize
                }
                _ => false,
            };
            let conflict = holding
                .iter()
                .filter(|(_, item)| excess || !kind.shares_with(held(item)))
                .max_by_key(|(s, _)| s.effective_end());
            if let Some(&(_, earlier)) = conflict {
                found.push(Overlap {
                    earlier,
                    later: next_item,
                    since_us: next.start_us,
                });
            }
            holding.push((next, next_item));
        }
    }
    found
}

/// The strict check of a semaphore's history: no more than `permits` sections of one key
/// held at once (a holder told it lost its lease stops counting there).
///
/// # Errors
///
/// Describes the first excess with the offending sections.
pub fn check_permit_count(sections: &[Section], permits: u32) -> Result<(), String> {
    match count_sweep(sections, |_| permits, |_| 1).first() {
        None => Ok(()),
        Some(excess) => {
            let held: Vec<String> = excess.held.iter().map(Section::to_string).collect();
            Err(format!(
                "more than {permits} sections held at {}: {} began while {} were held",
                excess.since_us,
                excess.later,
                held.join(", ")
            ))
        }
    }
}

/// The strict check of a fenced lock's history: every section carries a fence, no fence is
/// issued twice, no two sections overlap and fences increase in the order the sections
/// began. Touching intervals (`start == previous end`) are accepted because the clock has
/// microsecond resolution.
///
/// # Errors
///
/// Describes the first violation with the offending sections.
pub fn check_mutual_exclusion(sections: &[Section]) -> Result<(), String> {
    for s in sections {
        if s.start_us > s.end_us {
            return Err(format!("section ends before it starts: {s}"));
        }
        if s.fence.is_none() {
            return Err(format!("section without a fence: {s}"));
        }
    }
    let mut by_fence: Vec<Section> = sections.to_vec();
    by_fence.sort_by_key(|s| (s.key, s.fence, s.start_us));
    for pair in by_fence.windows(2) {
        if pair[0].key == pair[1].key && pair[0].fence == pair[1].fence {
            return Err(format!("fence issued twice: {} and {}", pair[0], pair[1]));
        }
    }
    let found = sweep(sections);
    if let Some(o) = found.overlaps.iter().min_by_key(|o| o.since_us) {
        let (first, second) = if o.earlier.start_us <= o.later.start_us {
            (o.earlier, o.later)
        } else {
            (o.later, o.earlier)
        };
        return Err(format!(
            "overlapping critical sections ({} µs): {first} and {second}",
            first
                .effective_end()
                .min(second.effective_end())
                .saturating_sub(o.since_us)
        ));
    }
    if let Some((before, after)) = found.fence_regressions.first() {
        return Err(format!(
            "fence order differs from time order: {before} then {after}"
        ));
    }
    Ok(())
}

/// How often consecutive sections (in time order) come from different owners: a check that a
/// run really interleaved its holders instead of running them one after another.
pub fn owner_switches(sections: &[Section]) -> usize {
    let mut by_start: Vec<Section> = sections.to_vec();
    by_start.sort_by_key(|s| (s.start_us, s.end_us));
    by_start
        .windows(2)
        .filter(|pair| pair[0].owner != pair[1].owner)
        .count()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn s(owner: usize, fence: u64, start_us: u64, end_us: u64) -> Section {
        Section {
            key: 0,
            owner,
            fence: Some(fence),
            start_us,
            end_us,
            lost_us: None,
        }
    }

    /// Readers share, permits share up to their count, nothing else shares, whatever the
    /// kinds on one key; a holder told it lost stops counting.
    #[test]
    fn kinds_that_cannot_share_a_key_are_overlaps() {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        struct Item(Section, Held);
        impl AsSection for Item {
            fn section(&self) -> Section {
                self.0
            }
        }
        let two = Held::Permit { permits: 2 };
        let sweep = |items: &[Item]| kinds_sweep(items, |item| item.1).len();
        let at = |start, end| s(0, 0, start, end);
        assert_eq!(
            sweep(&[Item(at(0, 10), Held::Read), Item(at(5, 15), Held::Read)]),
            0
        );
        assert_eq!(
            sweep(&[
                Item(at(0, 10), Held::Upgradeable),
                Item(at(5, 15), Held::Read)
            ]),
            0
        );
        assert_eq!(sweep(&[Item(at(0, 10), two), Item(at(5, 15), two)]), 0);
        assert_eq!(
            sweep(&[
                Item(at(0, 10), two),
                Item(at(1, 15), two),
                Item(at(2, 15), two)
            ]),
            1
        );
        for (a, b) in [
            (Held::Lock, two),
            (two, Held::Read),
            (Held::Read, Held::Write),
            (Held::Upgradeable, Held::Upgradeable),
            (Held::Upgradeable, Held::Write),
            (Held::Write, Held::Lock),
            (Held::Lock, Held::Lock),
        ] {
            assert_eq!(
                sweep(&[Item(at(0, 10), a), Item(at(5, 15), b)]),
                1,
                "{a:?} {b:?}"
            );
            assert_eq!(
                sweep(&[Item(at(0, 10), a), Item(at(10, 15), b)]),
                0,
                "{a:?} {b:?}"
            );
            let mut lost = at(0, 10);
            lost.lost_us = Some(4);
            assert_eq!(
                sweep(&[Item(lost, a), Item(at(5, 15), b)]),
                0,
                "{a:?} {b:?}"
            );
        }
    }

    #[test]
    fn accepts_a_serial_history() {
        let h = [s(0, 1, 0, 10), s(1, 2, 10, 20), s(0, 5, 25, 30)];
        check_mutual_exclusion(&h).unwrap();
        assert_eq!(owner_switches(&h), 2);
    }

    #[test]
    fn rejects_overlap_duplicate_fences_and_reordered_fences() {
        let overlap = [s(0, 1, 0, 10), s(1, 2, 9, 20)];
        assert!(
            check_mutual_exclusion(&overlap)
                .unwrap_err()
                .contains("overlapping")
        );
        let twice = [s(0, 1, 0, 10), s(1, 1, 11, 20)];
        assert!(
            check_mutual_exclusion(&twice)
                .unwrap_err()
                .contains("twice")
        );
        let reordered = [s(0, 3, 0, 10), s(1, 2, 11, 20)];
        assert!(
            check_mutual_exclusion(&reordered)
                .unwrap_err()
                .contains("order")
        );
        let backwards = [s(0, 3, 10, 0)];
        assert!(check_mutual_exclusion(&backwards).is_err());
        let unfenced = [Section {
            fence: None,
            ..s(0, 1, 0, 10)
        }];
        assert!(
            check_mutual_exclusion(&unfenced)
                .unwrap_err()
                .contains("without a fence")
        );
    }

    /// An earlier holder told it lost the lease at or before the next one began held no
    /// longer: no overlap. Told later, or never, it overlaps; one overlap per later section,
    /// against the earlier one that ends last.
    #[test]
    fn a_section_ends_where_its_holder_was_told_it_lost_the_lease() {
        let lost = |lost_us| Section {
            lost_us: Some(lost_us),
            ..s(0, 1, 0, 30)
        };
        assert!(sweep(&[lost(10), s(1, 2, 10, 20)]).overlaps.is_empty());
        let late = sweep(&[lost(11), s(1, 2, 10, 20)]);
        assert_eq!(late.overlaps.len(), 1);
        assert_eq!(late.overlaps[0].earlier.fence, Some(1));
        assert_eq!(late.overlaps[0].since_us, 10);
        let never = sweep(&[s(0, 1, 0, 30), s(1, 2, 5, 20), s(2, 3, 25, 40)]);
        assert_eq!(never.overlaps.len(), 2);
        // Other keys never conflict.
        let other = Section {
            key: 1,
            ..s(1, 1, 5, 20)
        };
        assert!(sweep(&[s(0, 1, 0, 30), other]).overlaps.is_empty());
    }

    fn permit(owner: usize, start_us: u64, end_us: u64) -> Section {
        Section {
            fence: None,
            ..s(owner, 0, start_us, end_us)
        }
    }

    /// Three permits: three sections held at once pass, a fourth begun while they are held
    /// is one too many; one that begins as another ends (touching) is not.
    #[test]
    fn a_semaphore_holds_no_more_sections_than_permits() {
        let three = [permit(0, 0, 30), permit(1, 5, 30), permit(2, 10, 30)];
        check_permit_count(&three, 3).unwrap();
        let mut four = three.to_vec();
        four.push(permit(3, 20, 40));
        let err = check_permit_count(&four, 3).unwrap_err();
        assert!(err.contains("more than 3"), "{err}");
        let found = count_sweep(&four, |_| 3, |_| 1);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].later.owner, 3);
        assert_eq!(found[0].held.len(), 3);
        assert_eq!(found[0].since_us, 20);
        four[3].start_us = 30;
        check_permit_count(&four, 3).unwrap();
        // Other keys never count.
        four[3] = Section {
            key: 1,
            ..permit(3, 20, 40)
        };
        check_permit_count(&four, 3).unwrap();
        // One permit is a lock's mutual exclusion.
        assert_eq!(
            count_sweep(&[permit(0, 0, 10), permit(1, 9, 20)], |_| 1, |_| 1).len(),
            1
        );
    }

    /// Readers beside readers pass; a writer begun while anyone holds, or a reader begun
    /// while a writer holds, overlaps the conflicting section that ends last; touching is
    /// not holding, and a writer told it lost the lease holds no longer.
    #[test]
    fn a_writer_is_never_beside_anyone() {
        // Owners 0-1 read, 2 writes (the owner tells the role here).
        let role = |s: &Section| {
            if s.owner >= 2 {
                Held::Write
            } else {
                Held::Read
            }
        };
        let readers = [permit(0, 0, 30), permit(1, 5, 40)];
        assert!(kinds_sweep(&readers, role).is_empty());
        let mut with_writer = readers.to_vec();
        with_writer.push(permit(2, 20, 50));
        let found = kinds_sweep(&with_writer, role);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].earlier.owner, found[0].later.owner), (1, 2));
        // A writer after the readers, touching the last: none.
        with_writer[2].start_us = 40;
        assert!(kinds_sweep(&with_writer, role).is_empty());
        // A reader begun while the writer holds, then one after it was told it lost.
        let mut writer = permit(2, 0, 100);
        writer.lost_us = Some(50);
        let found = kinds_sweep(&[writer, permit(0, 10, 20), permit(1, 60, 70)], role);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].earlier.owner, found[0].later.owner), (2, 0));
    }

    /// A holder told it lost its permit at or before the next section began holds it no
    /// longer; told later, it still counts.
    #[test]
    fn a_permit_ends_where_its_holder_was_told_it_lost_the_lease() {
        let lost = |lost_us| Section {
            lost_us: Some(lost_us),
            ..permit(0, 0, 30)
        };
        let others = [permit(1, 5, 30), permit(2, 10, 30), permit(3, 20, 40)];
        let told = [&[lost(20)][..], &others].concat();
        check_permit_count(&told, 3).unwrap();
        let late = [&[lost(21)][..], &others].concat();
        assert_eq!(count_sweep(&late, |_| 3, |_| 1).len(), 1);
    }

    /// The later-seen grant with the lower fence was Redis's first: it is the holder that
    /// should have stopped, and the pair counts as a fence regression too.
    #[test]
    fn the_lower_fence_of_an_overlap_is_the_earlier_holder() {
        let found = sweep(&[s(0, 2, 10, 20), s(1, 1, 12, 30)]);
        assert_eq!(found.overlaps[0].earlier.fence, Some(1));
        assert_eq!(found.overlaps[0].since_us, 12);
        assert_eq!(found.fence_regressions.len(), 1);
    }
}
