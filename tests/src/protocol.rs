//! The worker program's line protocol: every line a worker writes ([`Line`]) and every
//! command the harness sends a `hold` worker ([`Command`]), one per line, written down once.
//! The worker prints with `Display`, the harness parses with `FromStr`.
//!
//! ```text
//! ACQUIRED <token> <fence>              hold: the lock is held
//! RELEASED ok|lost                      hold: the answer to `release`
//! LOST yes|no                           hold: the answer to `lost?` and `wait-lost`
//! HANDED <hold token>                   hold: the answer to `hand-over`, the token as
//!                                       `HoldToken`'s text
//! STARTED <fence>                       body: the locked body began
//! FINISHED                              body: the body ran to its end
//! RESULT ok|lost|error <message>        body: what the locked call returned
//! SECTION <key> <fence> <start_us> <end_us> <lost_us> <write> <sent_us> <done_us> <release>
//!         [permits=<n> [take=<k>]|rw=read|rw=write|rw=upgradeable|rw=upgrade]
//!                                       contend, soak: one critical section; `permits=<n>`
//!                                       when it held a permit of a semaphore of n permits
//!                                       (`take=<k>`: k of them at once),
//!                                       `rw=…` a read-write lock's read or write lock
//! WAITS <key> <requests> <grants> <busy> <cancelled> <errors> <waited_us>
//!                                       soak: how a worker's waiting-mix requests on a key went
//! GAVE-UP <key> <start_us> <end_us>     soak: a waiting-mix request that gave up `Busy`
//! ELECTED <key> <term> <at_us>          soak: a candidate leads `key` from `at_us` (its
//!                                       term's SECTION follows once the term ends)
//! LATE <woke_us> <late_us>              soak: the worst timer lateness of a window
//! CLIENT <deployment> <client id>       soak: the id in a client's owner tokens
//! ERRORS <variant> <count>              contend, soak: failed calls by `LockError` variant
//! PANIC <message>                       soak: a task panicked
//! DONE <sections>                       contend, soak: the last line, and how many SECTIONs
//! ```
//!
//! A fence or a moment that is absent is written `-`. Times are wall-clock microseconds since
//! the UNIX epoch, so that the histories of several processes on one machine merge. `<write>`
//! is `accepted`, `rejected` or `none` (the soak's write through its fenced store; `<sent_us>`
//! and `<done_us>` are 0 without one), `<release>` is `ok`, `lost` or `failed`.
//!
//! The commands a `hold` worker reads: `release`, `lost?`, `wait-lost` and `hand-over`.

use std::fmt;
use std::str::FromStr;

use rlock_runtime::LockError;

/// How a release, or a locked call, ended (`RELEASED`, `RESULT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Ok,
    /// The lease had been lost (`LockError::Lost`).
    Lost,
    /// Another error, as its message.
    Error(String),
}

/// What became of a section's write to the soak's fenced store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The store took it: its fence was the highest yet for the key.
    Accepted,
    /// The store refused it: a higher fence had written already.
    Rejected,
    /// No write: none was made, `lost()` fired first, or the store could not be reached.
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

/// What a section held: a lock, one permit of a semaphore, or a read-write lock's read or
/// write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    /// The lock of its key (a `SECTION` line without `permits=`, as every line was before
    /// semaphores).
    Lock,
    /// `take` permits of its key's semaphore, of this many (`permits=<n>`, then `take=<k>`
    /// when more than one).
    Semaphore {
        /// The semaphore's permit count.
        permits: u32,
        /// The permits the section held at once.
        take: u32,
    },
    /// The read lock of its key's read-write lock (`rw=read`).
    Read,
    /// The write lock of its key's read-write lock (`rw=write`).
    Write,
    /// The upgradeable read lock of its key's read-write lock (`rw=upgradeable`): one piece
    /// of its hold, before or after its upgrade (so that no section of it spans its own
    /// upgrade).
    UpgradeableRead,
    /// The upgrade of an upgradeable read lock: the write lock beside it (`rw=upgrade`).
    Upgrade,
}

/// One critical section as a worker recorded it (a `SECTION` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionLine {
    /// The lock's key.
    pub key: String,
    /// Its fencing token, if the lock was fenced.
    pub fence: Option<u64>,
    /// Right after `acquire` returned.
    pub start_us: u64,
    /// When the section ended: its work done, or cut short by `lost()`.
    pub end_us: u64,
    /// When `lost()` fired during the section, if it did.
    pub lost_us: Option<u64>,
    /// Its write's outcome.
    pub write: Write,
    /// When the write was sent and when its answer came (0 without a write).
    pub write_sent_us: u64,
    /// See `write_sent_us`.
    pub write_done_us: u64,
    /// Its release's outcome.
    pub release: Release,
    /// A lock's section or a semaphore's.
    pub kind: SectionKind,
}

/// How one worker's waiting-mix requests on one key went (a `WAITS` line).
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

/// One line a worker writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// `hold`: the lock is held, with this owner token and fence.
    Acquired {
        /// The guard's owner token.
        token: String,
        /// Its fence, if fenced.
        fence: Option<u64>,
    },
    /// `hold`: how `release` ended (never `Error`: the worker exits on other errors).
    Released(Outcome),
    /// `hold`: whether the lease is known lost.
    Lost(bool),
    /// `hold`: the hold was handed over (`hand-over`): the token another process takes it
    /// over with, as `HoldToken`'s text.
    Handed(String),
    /// `body`: the locked body began, with this fence.
    Started(Option<u64>),
    /// `body`: the body ran to its end.
    Finished,
    /// `body`: what the locked call returned.
    Result(Outcome),
    /// A critical section.
    Section(SectionLine),
    /// How the waiting-mix requests on `key` went.
    Waits {
        /// The key waited for.
        key: String,
        /// The counts.
        waits: Waits,
    },
    /// A waiting-mix request that gave up `Busy`: when it was called and when it returned.
    GaveUp {
        /// The key waited for.
        key: String,
        /// When `acquire` was called.
        start_us: u64,
        /// When it returned `Busy`.
        end_us: u64,
    },
    /// A soak candidate was elected leader of `key` (written at once: a killed leader's
    /// term has no `SECTION`).
    Elected {
        /// The leader's seat.
        key: String,
        /// Its term.
        term: u64,
        /// When `campaign` returned.
        at_us: u64,
    },
    /// The worst timer lateness of a window: a sleep due at `woke_us - late_us` woke at
    /// `woke_us` (the process was not scheduled, or was stopped).
    Late {
        /// When the late sleep woke.
        woke_us: u64,
        /// How late, µs.
        late_us: u64,
    },
    /// The id a worker's client on `deployment` puts in its owner tokens.
    Client {
        /// The deployment's name.
        deployment: String,
        /// The client id.
        id: String,
    },
    /// Failed calls of one `LockError` variant ([`variant_name`]).
    Errors {
        /// The variant's name.
        variant: String,
        /// How many.
        count: u64,
    },
    /// A task panicked.
    Panic(String),
    /// The last line: the worker wrote this many `SECTION` lines.
    Done {
        /// `SECTION` lines written.
        sections: u64,
    },
}

impl Line {
    /// Whether this is a `RESULT` line (the last a `body` worker writes).
    pub fn is_result(&self) -> bool {
        matches!(self, Line::Result(_))
    }
}

/// A command the harness sends a `hold` worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Release the lock (answered `RELEASED`), then exit.
    Release,
    /// Ask whether the lease is known lost (answered `LOST yes|no`).
    IsLost,
    /// Wait until the lease is known lost (answered `LOST yes`).
    WaitLost,
    /// Hand the hold over, unreleased (answered `HANDED <token>`), and hold nothing from
    /// then on: the worker lives on until killed or told `release` (answered `RELEASED
    /// lost`); any other command then is an error (exit status 2), never a silence the
    /// harness would wait on.
    HandOver,
}

/// The name of `e`'s `LockError` variant, as `ERRORS` lines carry it.
pub fn variant_name(e: &LockError) -> &'static str {
    match e {
        LockError::Busy { .. } => "Busy",
        LockError::Lost { .. } => "Lost",
        LockError::Timeout { .. } => "Timeout",
        LockError::Unavailable { .. } => "Unavailable",
        LockError::NotReplicated { .. } => "NotReplicated",
        LockError::QuorumNotReached { .. } => "QuorumNotReached",
        LockError::InvalidKey { .. } => "InvalidKey",
        LockError::InvalidConfig(_) => "InvalidConfig",
        LockError::NotConfigured => "NotConfigured",
        LockError::WrongKind { .. } => "WrongKind",
        LockError::WouldDeadlock { .. } => "WouldDeadlock",
        _ => "Other",
    }
}

/// An optional number, `-` when absent.
struct Maybe(Option<u64>);

impl fmt::Display for Maybe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("-"),
        }
    }
}

/// A message on one line: a panic's or an error's may span several.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Lost => f.write_str("lost"),
            Outcome::Error(message) => write!(f, "error {}", one_line(message)),
        }
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Line::Acquired { token, fence } => write!(f, "ACQUIRED {token} {}", Maybe(*fence)),
            Line::Released(outcome) => write!(f, "RELEASED {outcome}"),
            Line::Lost(lost) => write!(f, "LOST {}", if *lost { "yes" } else { "no" }),
            Line::Handed(token) => write!(f, "HANDED {token}"),
            Line::Started(fence) => write!(f, "STARTED {}", Maybe(*fence)),
            Line::Finished => f.write_str("FINISHED"),
            Line::Result(outcome) => write!(f, "RESULT {outcome}"),
            Line::Section(s) => {
                let write = match s.write {
                    Write::Accepted => "accepted",
                    Write::Rejected => "rejected",
                    Write::None => "none",
                };
                let release = match s.release {
                    Release::Ok => "ok",
                    Release::Lost => "lost",
                    Release::Failed => "failed",
                };
                write!(
                    f,
                    "SECTION {} {} {} {} {} {write} {} {} {release}",
                    s.key,
                    Maybe(s.fence),
                    s.start_us,
                    s.end_us,
                    Maybe(s.lost_us),
                    s.write_sent_us,
                    s.write_done_us
                )?;
                match s.kind {
                    SectionKind::Lock => Ok(()),
                    SectionKind::Semaphore { permits, take: 1 } => write!(f, " permits={permits}"),
                    SectionKind::Semaphore { permits, take } => {
                        write!(f, " permits={permits} take={take}")
                    }
                    SectionKind::Read => write!(f, " rw=read"),
                    SectionKind::Write => write!(f, " rw=write"),
                    SectionKind::UpgradeableRead => write!(f, " rw=upgradeable"),
                    SectionKind::Upgrade => write!(f, " rw=upgrade"),
                }
            }
            Line::Waits { key, waits: w } => write!(
                f,
                "WAITS {key} {} {} {} {} {} {}",
                w.requests, w.grants, w.busy, w.cancelled, w.errors, w.waited_us
            ),
            Line::GaveUp {
                key,
                start_us,
                end_us,
            } => write!(f, "GAVE-UP {key} {start_us} {end_us}"),
            Line::Elected { key, term, at_us } => write!(f, "ELECTED {key} {term} {at_us}"),
            Line::Late { woke_us, late_us } => write!(f, "LATE {woke_us} {late_us}"),
            Line::Client { deployment, id } => write!(f, "CLIENT {deployment} {id}"),
            Line::Errors { variant, count } => write!(f, "ERRORS {variant} {count}"),
            Line::Panic(message) => write!(f, "PANIC {}", one_line(message)),
            Line::Done { sections } => write!(f, "DONE {sections}"),
        }
    }
}

/// The words of one line, read one at a time.
struct Words<'a> {
    line: &'a str,
    words: std::str::SplitWhitespace<'a>,
}

impl<'a> Words<'a> {
    fn bad(&self) -> String {
        format!("bad line {:?}", self.line)
    }

    fn word(&mut self) -> Result<&'a str, String> {
        self.words.next().ok_or_else(|| self.bad())
    }

    fn number(&mut self) -> Result<u64, String> {
        let word = self.word()?;
        word.parse().map_err(|_| self.bad())
    }

    fn maybe(&mut self) -> Result<Option<u64>, String> {
        match self.word()? {
            "-" => Ok(None),
            word => word.parse().map(Some).map_err(|_| self.bad()),
        }
    }

    /// What is left of the line after the words read, trimmed.
    fn rest(&mut self) -> String {
        let rest: Vec<&str> = self.words.by_ref().collect();
        rest.join(" ")
    }

    fn end(&mut self) -> Result<(), String> {
        match self.words.next() {
            None => Ok(()),
            Some(_) => Err(self.bad()),
        }
    }
}

impl FromStr for Outcome {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once(' ') {
            None if text == "ok" => Ok(Outcome::Ok),
            None if text == "lost" => Ok(Outcome::Lost),
            Some(("error", message)) => Ok(Outcome::Error(message.to_owned())),
            _ => Err(format!("bad outcome {text:?}")),
        }
    }
}

impl FromStr for Line {
    type Err = String;

    fn from_str(line: &str) -> Result<Self, String> {
        let mut w = Words {
            line,
            words: line.split_whitespace(),
        };
        let parsed = match w.word()? {
            "ACQUIRED" => Line::Acquired {
                token: w.word()?.to_owned(),
                fence: w.maybe()?,
            },
            "RELEASED" => Line::Released(w.rest().parse()?),
            "LOST" => match w.word()? {
                "yes" => Line::Lost(true),
                "no" => Line::Lost(false),
                _ => return Err(w.bad()),
            },
            "HANDED" => Line::Handed(w.rest()),
            "STARTED" => Line::Started(w.maybe()?),
            "FINISHED" => Line::Finished,
            "RESULT" => Line::Result(w.rest().parse()?),
            "SECTION" => {
                let key = w.word()?.to_owned();
                let (fence, start_us, end_us, lost_us) =
                    (w.maybe()?, w.number()?, w.number()?, w.maybe()?);
                let write = match w.word()? {
                    "accepted" => Write::Accepted,
                    "rejected" => Write::Rejected,
                    "none" => Write::None,
                    _ => return Err(w.bad()),
                };
                let (write_sent_us, write_done_us) = (w.number()?, w.number()?);
                let release = match w.word()? {
                    "ok" => Release::Ok,
                    "lost" => Release::Lost,
                    "failed" => Release::Failed,
                    _ => return Err(w.bad()),
                };
                // Absent on a lock's section (and on every line older than semaphores).
                let kind = match w.words.next() {
                    None => SectionKind::Lock,
                    Some("rw=read") => SectionKind::Read,
                    Some("rw=write") => SectionKind::Write,
                    Some("rw=upgradeable") => SectionKind::UpgradeableRead,
                    Some("rw=upgrade") => SectionKind::Upgrade,
                    Some(word) => {
                        let permits = word.strip_prefix("permits=").and_then(|n| n.parse().ok());
                        let take = match w.words.next() {
                            None => Some(1),
                            Some(word) => word.strip_prefix("take=").and_then(|n| n.parse().ok()),
                        };
                        match (permits, take) {
                            (Some(permits), Some(take)) => SectionKind::Semaphore { permits, take },
                            _ => return Err(w.bad()),
                        }
                    }
                };
                Line::Section(SectionLine {
                    key,
                    fence,
                    start_us,
                    end_us,
                    lost_us,
                    write,
                    write_sent_us,
                    write_done_us,
                    release,
                    kind,
                })
            }
            "WAITS" => Line::Waits {
                key: w.word()?.to_owned(),
                waits: Waits {
                    requests: w.number()?,
                    grants: w.number()?,
                    busy: w.number()?,
                    cancelled: w.number()?,
                    errors: w.number()?,
                    waited_us: w.number()?,
                },
            },
            "GAVE-UP" => Line::GaveUp {
                key: w.word()?.to_owned(),
                start_us: w.number()?,
                end_us: w.number()?,
            },
            "ELECTED" => Line::Elected {
                key: w.word()?.to_owned(),
                term: w.number()?,
                at_us: w.number()?,
            },
            "LATE" => Line::Late {
                woke_us: w.number()?,
                late_us: w.number()?,
            },
            "CLIENT" => Line::Client {
                deployment: w.word()?.to_owned(),
                id: w.word()?.to_owned(),
            },
            "ERRORS" => Line::Errors {
                variant: w.word()?.to_owned(),
                count: w.number()?,
            },
            "PANIC" => Line::Panic(w.rest()),
            "DONE" => Line::Done {
                sections: w.number()?,
            },
            _ => return Err(w.bad()),
        };
        w.end()?;
        Ok(parsed)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Command::Release => "release",
            Command::IsLost => "lost?",
            Command::WaitLost => "wait-lost",
            Command::HandOver => "hand-over",
        })
    }
}

impl FromStr for Command {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "release" => Ok(Command::Release),
            "lost?" => Ok(Command::IsLost),
            "wait-lost" => Ok(Command::WaitLost),
            "hand-over" => Ok(Command::HandOver),
            other => Err(format!("unknown command {other:?}")),
        }
    }
}

/// Parses what a killed worker wrote: its whole lines (the last one may have been cut by its
/// death, and is left out), without the `DONE` it never wrote.
///
/// # Errors
///
/// On a malformed line.
pub fn parse_cut_output(text: &str) -> Result<Vec<Line>, String> {
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::parse)
        .collect()
}

/// Parses a worker's whole output, one [`Line`] per non-empty line, and checks that it ends
/// with `DONE` and that `DONE` counts the `SECTION` lines written.
///
/// # Errors
///
/// On a malformed line, a line after `DONE`, a missing `DONE`, or a count that disagrees.
pub fn parse_output(text: &str) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    let mut sections = 0;
    let mut done = false;
    for text in text.lines().filter(|l| !l.trim().is_empty()) {
        if done {
            return Err(format!("line after DONE: {text:?}"));
        }
        let line: Line = text.parse()?;
        match &line {
            Line::Section(_) => sections += 1,
            Line::Done { sections: said } if *said != sections => {
                return Err(format!(
                    "DONE says {said} sections but {sections} were written"
                ));
            }
            Line::Done { .. } => done = true,
            _ => {}
        }
        lines.push(line);
    }
    if !done {
        return Err("no DONE line".into());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_line_reads_back_as_written() {
        let section = SectionLine {
            key: "soak:single:hot:1".into(),
            fence: Some(7),
            start_us: 10,
            end_us: 20,
            lost_us: None,
            write: Write::Rejected,
            write_sent_us: 12,
            write_done_us: 13,
            release: Release::Lost,
            kind: SectionKind::Lock,
        };
        let lines = [
            Line::Acquired {
                token: "c1:4".into(),
                fence: None,
            },
            Line::Released(Outcome::Lost),
            Line::Lost(true),
            Line::Handed("rlock-hold/1 lock 500 7 c1:4 order:42".into()),
            Line::Started(Some(3)),
            Line::Finished,
            Line::Result(Outcome::Error("Redis is unreachable: refused".into())),
            Line::Section(section.clone()),
            Line::Section(SectionLine {
                fence: None,
                lost_us: Some(15),
                write: Write::None,
                ..section.clone()
            }),
            Line::Section(SectionLine {
                key: "soak:single:sem:0".into(),
                fence: None,
                write: Write::None,
                kind: SectionKind::Semaphore {
                    permits: 3,
                    take: 1,
                },
                ..section.clone()
            }),
            Line::Section(SectionLine {
                fence: None,
                write: Write::None,
                kind: SectionKind::Semaphore {
                    permits: 3,
                    take: 2,
                },
                ..section.clone()
            }),
            Line::Section(SectionLine {
                fence: None,
                write: Write::None,
                kind: SectionKind::Read,
                ..section.clone()
            }),
            Line::Section(SectionLine {
                fence: None,
                write: Write::None,
                kind: SectionKind::Write,
                ..section
            }),
            Line::Waits {
                key: "k".into(),
                waits: Waits {
                    requests: 1,
                    grants: 2,
                    busy: 3,
                    cancelled: 4,
                    errors: 5,
                    waited_us: 6,
                },
            },
            Line::GaveUp {
                key: "k".into(),
                start_us: 1,
                end_us: 2,
            },
            Line::Elected {
                key: "soak:single:leader".into(),
                term: 7,
                at_us: 8,
            },
            Line::Late {
                woke_us: 5,
                late_us: 6,
            },
            Line::Client {
                deployment: "single".into(),
                id: "c1".into(),
            },
            Line::Errors {
                variant: "Busy".into(),
                count: 3,
            },
            Line::Panic("task 3 panicked".into()),
            Line::Done { sections: 6 },
        ];
        for line in &lines {
            assert_eq!(line.to_string().parse::<Line>().unwrap(), *line, "{line}");
        }
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        assert_eq!(parse_output(&text).unwrap(), lines);
        assert!(lines[9].to_string().ends_with(" permits=3"), "{}", lines[9]);
        assert!(
            lines[10].to_string().ends_with(" permits=3 take=2"),
            "{}",
            lines[10]
        );
        for command in [
            Command::Release,
            Command::IsLost,
            Command::WaitLost,
            Command::HandOver,
        ] {
            assert_eq!(command.to_string().parse::<Command>().unwrap(), command);
        }
    }

    #[test]
    fn malformed_output_is_refused() {
        for bad in [
            "SECTION k 1 2\n",
            "SECTION k x 2 3 - none 0 0 ok\nDONE 1\n",
            "SECTION k - 2 3 - none 0 0 ok permits=x\n",
            "SECTION k - 2 3 - none 0 0 ok 3\n",
            "LOST maybe\n",
            "FINISHED now\n",
            "H 1 2 3\n",
        ] {
            assert!(
                bad.lines().next().unwrap().parse::<Line>().is_err(),
                "{bad}"
            );
        }
        let one = "SECTION k 1 2 3 - none 0 0 ok\n";
        assert!(parse_output(one).is_err(), "no DONE");
        assert!(
            parse_output(&format!("{one}DONE 2\n")).is_err(),
            "miscounted"
        );
        assert!(
            parse_output(&format!("DONE 0\n{one}")).is_err(),
            "after DONE"
        );
        assert_eq!(parse_output(&format!("{one}DONE 1\n")).unwrap().len(), 2);
        // A line without `permits=`, as written before semaphores, is a lock's section.
        assert!(matches!(
            one.trim().parse::<Line>().unwrap(),
            Line::Section(SectionLine {
                kind: SectionKind::Lock,
                ..
            })
        ));
    }
}
