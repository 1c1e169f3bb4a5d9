//! `lock_worker` processes (`src/bin/lock_worker.rs`) run side by side, and their reports.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::history::{WorkerReport, parse_worker_output};

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
    /// The `lock_worker` binary (a test passes `env!("CARGO_BIN_EXE_lock_worker")`).
    program: String,
    workers: Workers,
    outputs: Vec<(JoinHandle<String>, JoinHandle<String>)>,
    /// Sections each worker must enter (`--tasks` × `--iterations`).
    each: u64,
}

impl Running {
    /// Starts `processes` workers of `program` (the `lock_worker` binary) on the Redis at
    /// `url`, each with `args` (everything but `--redis`).
    ///
    /// # Panics
    ///
    /// When a worker cannot be started.
    pub fn spawn(program: &str, url: &str, processes: usize, args: &[&str]) -> Self {
        let mut running = Self {
            program: program.to_owned(),
            workers: Workers(Vec::new()),
            outputs: Vec::new(),
            each: number_after(args, "--tasks") * number_after(args, "--iterations"),
        };
        for _ in 0..processes {
            running.add(url, args);
        }
        running
    }

    /// Starts one more worker, with `args`.
    ///
    /// # Panics
    ///
    /// When it cannot be started.
    pub fn add(&mut self, url: &str, args: &[&str]) {
        let mut child = Command::new(&self.program)
            .args(["--redis", url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lock_worker");
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            panic!("lock_worker started without piped output");
        };
        self.outputs.push((drain(stdout), drain(stderr)));
        self.workers.0.push(child);
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
            each,
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
                panic!("lock_worker processes did not finish within {deadline:?}; killed them");
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
            let report = parse_worker_output(i, &stdout)
                .unwrap_or_else(|e| panic!("worker {i}: {e}\n{stdout}"));
            assert_eq!(report.entered, each, "worker {i}");
            reports.push(report);
        }
        reports
    }
}

/// The number after `flag` in `args` (1 when absent or not a number).
fn number_after(args: &[&str], flag: &str) -> u64 {
    args.iter()
        .position(|a| *a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Arguments of a `lock_worker` that takes `key` once, with a lease of `ttl_ms`, waiting for
/// it up to `wait_ms` (fairly with `fair`).
pub fn one_waiting_section<'a>(
    key: &'a str,
    ttl_ms: &'a str,
    wait_ms: &'a str,
    fair: bool,
) -> Vec<&'a str> {
    let mut args = vec![
        "--key",
        key,
        "--tasks",
        "1",
        "--iterations",
        "1",
        "--ttl-ms",
        ttl_ms,
        "--wait-ms",
        wait_ms,
    ];
    if fair {
        args.push("--fair");
    }
    args
}
