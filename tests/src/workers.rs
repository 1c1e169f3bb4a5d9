//! `contend` workers (`src/bin/worker/`) run side by side, and what each reported.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::history::Section;
use crate::protocol::{Line, Release, parse_output};
use crate::worker::Contend;

/// What one `contend` worker reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Its critical sections, in print order.
    pub sections: Vec<Section>,
    /// Sections entered (its `DONE` line).
    pub entered: u64,
    /// Acquisitions that gave up with `Busy` and were retried.
    pub busy: u64,
    /// Acquisitions that failed with a backend error and were retried (`ride_outages`).
    pub unavailable: u64,
    /// Sections whose lease was lost, or whose release failed (`ride_outages`).
    pub lost: u64,
}

impl WorkerReport {
    /// Reads the output of a `contend` worker, tagging its sections with `owner`; its one
    /// key is key 0 of the history.
    ///
    /// # Errors
    ///
    /// When the output is not the protocol's, or holds lines a `contend` worker does not
    /// write.
    pub fn parse(owner: usize, stdout: &str) -> Result<WorkerReport, String> {
        let mut report = WorkerReport::default();
        for line in parse_output(stdout).map_err(|e| format!("worker {owner}: {e}"))? {
            match line {
                Line::Section(s) => {
                    report.lost += u64::from(s.release != Release::Ok);
                    report.sections.push(Section {
                        key: 0,
                        owner,
                        fence: s.fence,
                        start_us: s.start_us,
                        end_us: s.end_us,
                        lost_us: s.lost_us,
                    });
                }
                Line::Errors { variant, count } if variant == "Busy" => report.busy += count,
                Line::Errors { count, .. } => report.unavailable += count,
                Line::Done { sections } => report.entered = sections,
                other => return Err(format!("worker {owner}: unexpected line {other}")),
            }
        }
        Ok(report)
    }
}

/// Kills and reaps every child that is still running when dropped (also on panic).
#[derive(Debug)]
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut out = String::new();
        let _ = pipe.read_to_string(&mut out);
        out
    })
}

/// Worker processes under way.
#[derive(Debug)]
pub struct Running {
    /// The worker program (a test passes `env!("CARGO_BIN_EXE_worker")`).
    program: String,
    workers: Workers,
    outputs: Vec<(JoinHandle<String>, JoinHandle<String>)>,
    /// Sections each worker must enter.
    expected: Vec<u64>,
}

impl Running {
    /// Starts `processes` `contend` workers of `program` (the worker program), each with
    /// `args`.
    ///
    /// # Panics
    ///
    /// When a worker cannot be started.
    pub fn spawn(program: &str, processes: usize, args: &Contend) -> Self {
        let mut running = Self {
            program: program.to_owned(),
            workers: Workers(Vec::new()),
            outputs: Vec::new(),
            expected: Vec::new(),
        };
        for _ in 0..processes {
            running.add(args);
        }
        running
    }

    /// Starts one more worker, with `args`.
    ///
    /// # Panics
    ///
    /// When it cannot be started.
    pub fn add(&mut self, args: &Contend) {
        let mut child = Command::new(&self.program)
            .args(args.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a contend worker");
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            panic!("the worker started without piped output");
        };
        self.outputs.push((drain(stdout), drain(stderr)));
        self.workers.0.push(child);
        self.expected.push(args.sections());
    }

    /// Kills worker `i` at once (SIGKILL), as a crash would.
    ///
    /// # Panics
    ///
    /// When there is no such worker.
    pub fn kill(&mut self, i: usize) {
        let _ = self.workers.0[i].kill();
        let _ = self.workers.0[i].wait();
    }

    /// Sends worker `i` a signal by name (`STOP`, `CONT`), as `kill -<signal>` does.
    ///
    /// # Panics
    ///
    /// When there is no such worker.
    pub fn signal(&self, i: usize, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.workers.0[i].id().to_string())
            .status();
    }

    /// Waits for every worker to exit (killing them all after `deadline`), asserts each
    /// succeeded and entered all its sections, and returns their parsed reports.
    ///
    /// # Panics
    ///
    /// When a worker failed, fell short, or the deadline passed.
    pub fn finish(self, deadline: Duration) -> Vec<WorkerReport> {
        self.finish_except(deadline, &[])
    }

    /// Like [`finish`](Self::finish), leaving out the workers in `killed`.
    ///
    /// # Panics
    ///
    /// As [`finish`](Self::finish).
    pub fn finish_except(self, deadline: Duration, killed: &[usize]) -> Vec<WorkerReport> {
        let Self {
            mut workers,
            outputs,
            expected,
            ..
        } = self;
        let started = Instant::now();
        let mut statuses = vec![None; outputs.len()];
        while statuses.iter().any(Option::is_none) {
            for (child, status) in workers.0.iter_mut().zip(&mut statuses) {
                if status.is_none() {
                    *status = child.try_wait().expect("try_wait");
                }
            }
            if started.elapsed() > deadline {
                drop(workers);
                panic!("the contend workers did not finish within {deadline:?}; killed them");
            }
            thread::sleep(Duration::from_millis(20));
        }

        let mut reports = Vec::new();
        for (i, ((stdout, stderr), status)) in outputs.into_iter().zip(statuses).enumerate() {
            let stdout = stdout.join().unwrap_or_default();
            let stderr = stderr.join().unwrap_or_default();
            if killed.contains(&i) {
                continue;
            }
            let status = status.unwrap_or_else(|| unreachable!("every status was collected"));
            assert!(
                status.success(),
                "worker {i} failed with {status}:\n{stderr}"
            );
            let report = WorkerReport::parse(i, &stdout)
                .unwrap_or_else(|e| panic!("worker {i}: {e}\n{stdout}"));
            assert_eq!(report.entered, expected[i], "worker {i}");
            reports.push(report);
        }
        reports
    }
}

/// A `contend` worker that takes `key` once, with a lease of `ttl_ms`, waiting for it up to
/// `wait_ms` (fairly with `fair`).
pub fn one_waiting_section(url: &str, key: &str, ttl_ms: u64, wait_ms: u64, fair: bool) -> Contend {
    Contend {
        fair,
        ..Contend::new(url, key, ttl_ms, wait_ms)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn reads_a_contend_workers_output() {
        let out = "SECTION k 7 100 200 - none 0 0 ok\n\
                   SECTION k 9 300 400 350 none 0 0 lost\n\
                   ERRORS Busy 5\nERRORS Timeout 1\nDONE 2\n";
        let r = WorkerReport::parse(3, out).unwrap();
        let fences: Vec<_> = r.sections.iter().map(|s| (s.owner, s.fence)).collect();
        assert_eq!(fences, [(3, Some(7)), (3, Some(9))]);
        assert_eq!(r.sections[1].effective_end(), 350);
        assert_eq!((r.entered, r.busy, r.unavailable, r.lost), (2, 5, 1, 1));
        assert!(WorkerReport::parse(0, "SECTION k 1 2 3 - none 0 0 ok\n").is_err());
        assert!(WorkerReport::parse(0, "STARTED 1\nDONE 0\n").is_err());
    }
}
