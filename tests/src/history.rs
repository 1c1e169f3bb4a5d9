//! Recorded lock histories and the mutual-exclusion check run over them.
//!
//! A history is a list of critical sections, each with its fencing token and the wall-clock
//! interval during which the holder believed it held the lock. A correct lock yields sections
//! that never overlap in time and whose fences increase in the order the sections happened.

use std::fmt;

/// One critical section as recorded by a holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Which recorder (process or task) produced it; only used in messages.
    pub owner: usize,
    /// The fencing token of the hold.
    pub fence: u64,
    /// Microseconds since the UNIX epoch, taken right after `acquire` returned.
    pub start_us: u64,
    /// Microseconds since the UNIX epoch, taken right before `release` was called.
    pub end_us: u64,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "owner {} fence {} [{} .. {}]",
            self.owner, self.fence, self.start_us, self.end_us
        )
    }
}

/// What one `lock_worker` process printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Its critical sections, in print order.
    pub sections: Vec<Section>,
    /// `entered=` of the `DONE` line.
    pub entered: u64,
    /// `busy=` of the `DONE` line: acquisitions that gave up with `Busy` and were retried.
    pub busy: u64,
    /// `unavailable=`: acquisitions that failed with a backend error and were retried
    /// (`--ride-outages`).
    pub unavailable: u64,
    /// `lost=`: sections whose lease was lost, or whose release failed (`--ride-outages`).
    pub lost: u64,
}

/// Parses the stdout of a `lock_worker` process (`H <fence> <start_us> <end_us>` lines and a
/// final `DONE entered=<n> busy=<n> unavailable=<n> lost=<n>`), tagging its sections with
/// `owner`.
///
/// # Errors
///
/// On a malformed line, a missing `DONE` line, or a `DONE` count that disagrees with the
/// number of `H` lines.
pub fn parse_worker_output(owner: usize, stdout: &str) -> Result<WorkerReport, String> {
    let mut report = WorkerReport::default();
    let mut done = false;
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("H") => {
                let mut num = || -> Result<u64, String> {
                    words
                        .next()
                        .and_then(|w| w.parse().ok())
                        .ok_or_else(|| format!("worker {owner}: bad history line {line:?}"))
                };
                let (fence, start_us, end_us) = (num()?, num()?, num()?);
                report.sections.push(Section {
                    owner,
                    fence,
                    start_us,
                    end_us,
                });
            }
            Some("DONE") => {
                for word in words {
                    let value =
                        |prefix: &str| word.strip_prefix(prefix).and_then(|v| v.parse().ok());
                    if let Some(n) = value("entered=") {
                        report.entered = n;
                    } else if let Some(n) = value("busy=") {
                        report.busy = n;
                    } else if let Some(n) = value("unavailable=") {
                        report.unavailable = n;
                    } else if let Some(n) = value("lost=") {
                        report.lost = n;
                    } else {
                        return Err(format!("worker {owner}: bad summary line {line:?}"));
                    }
                }
                done = true;
            }
            Some(_) => return Err(format!("worker {owner}: unexpected line {line:?}")),
            None => {}
        }
    }
    if !done {
        return Err(format!("worker {owner}: no DONE line"));
    }
    if report.entered != report.sections.len() as u64 {
        return Err(format!(
            "worker {owner}: DONE says entered={} but printed {} sections",
            report.entered,
            report.sections.len()
        ));
    }
    Ok(report)
}

/// Checks that no two sections overlap in time and that fences increase strictly in the order
/// the sections happened.
///
/// Sections are sorted by start; each must start no earlier than the previous one ended, and
/// carry a greater fence. Touching intervals (`start == previous end`) are accepted because the
/// clock has microsecond resolution.
///
/// # Errors
///
/// Describes the first violation with both offending sections.
pub fn check_mutual_exclusion(sections: &[Section]) -> Result<(), String> {
    for s in sections {
        if s.start_us > s.end_us {
            return Err(format!("section ends before it starts: {s}"));
        }
    }
    let mut by_fence: Vec<Section> = sections.to_vec();
    by_fence.sort_by_key(|s| (s.fence, s.start_us));
    for pair in by_fence.windows(2) {
        if pair[0].fence == pair[1].fence {
            return Err(format!("fence issued twice: {} and {}", pair[0], pair[1]));
        }
    }
    let mut by_start: Vec<Section> = sections.to_vec();
    by_start.sort_by_key(|s| (s.start_us, s.end_us));
    for pair in by_start.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if next.start_us < prev.end_us {
            return Err(format!(
                "overlapping critical sections ({} µs): {prev} and {next}",
                prev.end_us - next.start_us
            ));
        }
        if next.fence <= prev.fence {
            return Err(format!(
                "fence order differs from time order: {prev} then {next}"
            ));
        }
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
            owner,
            fence,
            start_us,
            end_us,
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
    }

    #[test]
    fn parses_worker_output() {
        let out = "H 7 100 200\nH 9 300 400\nDONE entered=2 busy=5 unavailable=1 lost=0\n";
        let r = parse_worker_output(3, out).unwrap();
        assert_eq!(r.sections, [s(3, 7, 100, 200), s(3, 9, 300, 400)]);
        assert_eq!((r.entered, r.busy, r.unavailable, r.lost), (2, 5, 1, 0));
        assert!(parse_worker_output(0, "H 1 2 3\n").is_err());
        assert!(parse_worker_output(0, "H 1 2 3\nDONE entered=2 busy=0\n").is_err());
        assert!(parse_worker_output(0, "H 1 x 3\nDONE entered=1 busy=0\n").is_err());
    }
}
