//! What the workers of a soak run recorded, merged: each writes its lines
//! ([`crate::protocol`]) to a file, and the run reads them all into one [`History`].

use std::collections::{BTreeMap, HashMap};

use crate::history::{AsSection, Section};
use crate::protocol::{self, Line, SectionLine};
pub use crate::protocol::{Release, SectionKind, Waits, Write};

/// One critical section, as a worker recorded it. Times are wall-clock microseconds since the
/// UNIX epoch (all workers run on one machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The worker process.
    pub worker: u32,
    /// Index into [`History::keys`].
    pub key: u32,
    /// The section's fencing token (0 for a semaphore's: permits carry none).
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
    /// A lock's section, or a semaphore's with its permit count.
    pub kind: SectionKind,
}

impl Record {
    /// Its fence, if its section was a lock's.
    fn fence(&self) -> Option<u64> {
        (self.kind == SectionKind::Lock).then_some(self.fence)
    }

    /// The permits it held at once: 1 but for a semaphore's hold of several.
    pub fn take(&self) -> u32 {
        match self.kind {
            SectionKind::Semaphore { take, .. } => take,
            SectionKind::Lock
            | SectionKind::Read
            | SectionKind::Write
            | SectionKind::UpgradeableRead
            | SectionKind::Upgrade => 1,
        }
    }

    /// The permit count of its semaphore; `None` for a lock's or a read-write lock's section.
    pub fn permits(&self) -> Option<u32> {
        match self.kind {
            SectionKind::Lock
            | SectionKind::Read
            | SectionKind::Write
            | SectionKind::UpgradeableRead
            | SectionKind::Upgrade => None,
            SectionKind::Semaphore { permits, .. } => Some(permits),
        }
    }

    /// The line a worker writes for this section (`key` is the key's text).
    pub fn line(&self, key: &str) -> Line {
        Line::Section(SectionLine {
            key: key.to_owned(),
            fence: self.fence(),
            start_us: self.grant_us,
            end_us: self.end_us,
            lost_us: (self.lost_us > 0).then_some(self.lost_us),
            write: self.write,
            write_sent_us: self.write_sent_us,
            write_done_us: self.write_done_us,
            release: self.release,
            kind: self.kind,
        })
    }
}

impl AsSection for Record {
    fn section(&self) -> Section {
        Section {
            key: self.key,
            owner: self.worker as usize,
            fence: self.fence(),
            start_us: self.grant_us,
            end_us: self.end_us,
            lost_us: (self.lost_us > 0).then_some(self.lost_us),
        }
    }
}

/// A waiting-mix request that gave up `Busy` (a `GAVE-UP` line).
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
    pub fn line(&self, key: &str) -> Line {
        Line::GaveUp {
            key: key.to_owned(),
            start_us: self.start_us,
            end_us: self.end_us,
        }
    }
}

/// Longest sleep of a worker's lateness probe: it sleeps 5 to 10 ms, again and again.
pub const PROBE_SLEEP_MAX_US: u64 = 10_000;
/// A worker reports the worst lateness of its probe per window of this length.
pub const LATENESS_WINDOW_US: u64 = 100_000;
/// Lateness under this is not reported (a window without a line was at most this late).
pub const LATENESS_REPORTED_US: u64 = 1_000;

/// The worst timer lateness a worker process saw in one window (a `LATE` line): a sleep due
/// at `woke_us - late_us` woke at `woke_us`, so the process's timers did not fire in between
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
    pub fn line(&self) -> Line {
        Line::Late {
            woke_us: self.woke_us,
            late_us: self.late_us,
        }
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
    /// owner tokens (`CLIENT` lines), by which Redis-side counts are told apart.
    pub clients: Vec<(u32, String, String)>,
    /// Failed acquisitions and releases by `LockError` variant (`Busy`, `Unavailable`, …).
    pub errors: BTreeMap<String, u64>,
    /// Panics reported by workers (a `PANIC` line) or seen as a worker's abnormal exit.
    pub panics: u64,
    /// Workers that wrote their `DONE` line.
    pub finished_workers: u32,
    /// Terms begun (`ELECTED`) whose `SECTION` has not been read yet: `(worker, key, term,
    /// elected_us)`.
    open_terms: Vec<(u32, u32, u64, u64)>,
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

    /// Adds what one worker wrote: `SECTION`, `ELECTED`, `WAITS`, `GAVE-UP`, `LATE`,
    /// `CLIENT`, `ERRORS` and `PANIC` lines, and a final `DONE`.
    ///
    /// # Errors
    ///
    /// On a malformed output ([`protocol::parse_output`]), or a line a soak worker does not
    /// write.
    pub fn add_worker(&mut self, worker: u32, text: &str) -> Result<(), String> {
        let lines = protocol::parse_output(text).map_err(|e| format!("worker {worker}: {e}"))?;
        self.add_lines(worker, lines)
    }

    fn add_lines(&mut self, worker: u32, lines: Vec<Line>) -> Result<(), String> {
        for line in lines {
            match line {
                Line::Section(s) => {
                    let key = self.intern(&s.key);
                    self.open_terms
                        .retain(|&(w, k, term, _)| (w, k, Some(term)) != (worker, key, s.fence));
                    self.records.push(Record {
                        worker,
                        key,
                        fence: s.fence.unwrap_or(0),
                        grant_us: s.start_us,
                        end_us: s.end_us,
                        lost_us: s.lost_us.unwrap_or(0),
                        write_sent_us: s.write_sent_us,
                        write_done_us: s.write_done_us,
                        write: s.write,
                        release: s.release,
                        kind: s.kind,
                    });
                }
                Line::Waits { key, waits: w } => {
                    let key = self.intern(&key);
                    let waits = self.waits.entry((worker, key)).or_default();
                    waits.requests += w.requests;
                    waits.grants += w.grants;
                    waits.busy += w.busy;
                    waits.cancelled += w.cancelled;
                    waits.errors += w.errors;
                    waits.waited_us += w.waited_us;
                }
                Line::GaveUp {
                    key,
                    start_us,
                    end_us,
                } => {
                    let key = self.intern(&key);
                    self.gave_up.push(GaveUp {
                        worker,
                        key,
                        start_us,
                        end_us,
                    });
                }
                Line::Elected { key, term, at_us } => {
                    let key = self.intern(&key);
                    self.open_terms.push((worker, key, term, at_us));
                }
                Line::Late { woke_us, late_us } => self.lateness.push(Lateness {
                    worker,
                    woke_us,
                    late_us,
                }),
                Line::Client { deployment, id } => self.clients.push((worker, deployment, id)),
                Line::Errors { variant, count } => {
                    *self.errors.entry(variant).or_default() += count
                }
                Line::Panic(_) => self.panics += 1,
                Line::Done { .. } => self.finished_workers += 1,
                other => return Err(format!("worker {worker}: unexpected line {other}")),
            }
        }
        Ok(())
    }

    /// Adds what a leader candidate wrote, as [`add_worker`](Self::add_worker) does. A
    /// candidate the nemesis killed (at `killed_us`) wrote no `DONE`, and no `SECTION` for
    /// the term it led then: that term is a section that ended at its death, its release
    /// `failed`.
    ///
    /// # Errors
    ///
    /// As [`add_worker`](Self::add_worker); and a term without its `SECTION` from a candidate
    /// that was not killed.
    pub fn add_candidate(
        &mut self,
        worker: u32,
        text: &str,
        killed_us: Option<u64>,
    ) -> Result<(), String> {
        if killed_us.is_some() {
            let lines =
                protocol::parse_cut_output(text).map_err(|e| format!("candidate {worker}: {e}"))?;
            self.add_lines(worker, lines)?;
        } else {
            self.add_worker(worker, text)?;
        }
        let (open, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.open_terms)
            .into_iter()
            .partition(|&(w, ..)| w == worker);
        self.open_terms = others;
        for (_, key, term, elected_us) in open {
            let Some(killed_us) = killed_us else {
                return Err(format!(
                    "candidate {worker}: term {term} of {} has no SECTION",
                    self.keys[key as usize]
                ));
            };
            self.records.push(Record {
                worker,
                key,
                fence: term,
                grant_us: elected_us,
                end_us: killed_us.max(elected_us),
                lost_us: 0,
                write_sent_us: 0,
                write_done_us: 0,
                write: Write::None,
                release: Release::Failed,
                kind: SectionKind::Lock,
            });
        }
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

/// A worker's output of `lines`, with its `DONE` line: what tests feed [`History::add_worker`].
#[cfg(test)]
pub(crate) fn output(lines: &[Line]) -> String {
    let sections = lines
        .iter()
        .filter(|l| matches!(l, Line::Section(_)))
        .count() as u64;
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str(&format!("{}\n", Line::Done { sections }));
    text
}
