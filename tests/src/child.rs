//! One child process that a test drives line by line over stdin and stdout, and pauses or
//! kills: a worker (`src/bin/worker/`, a `hold` or a `body` worker) speaking the line protocol,
//! or any other program read as text (the examples' `fenced-writer`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::protocol::{self, Line};
use crate::worker::{Body, Hold, HoldKind};

/// A child process read line by line: [`line`](Self::line) and [`ask`](Self::ask) for a
/// worker speaking the line protocol of [`crate::protocol`], [`text`](Self::text) and
/// [`ask_text`](Self::ask_text) for any program. Killed and reaped on drop.
#[derive(Debug)]
pub struct LineChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl LineChild {
    /// Starts `program` (the worker program: `env!("CARGO_BIN_EXE_worker")`, or another) with
    /// `args`, its stdin and stdout piped to the test.
    ///
    /// # Panics
    ///
    /// When the program cannot be started.
    pub fn start(program: &str, args: &[String]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("{program} started without piped stdin/stdout");
        };
        Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        }
    }

    /// The next line the program prints, trimmed; `None` once it has exited.
    pub fn text(&mut self) -> Option<String> {
        let mut text = String::new();
        // A read error means the program is gone: report it as end of output.
        match self.stdout.read_line(&mut text) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(text.trim().to_owned()),
        }
    }

    /// Sends one line and returns the program's one-line answer (`None` if it has exited).
    pub fn ask_text(&mut self, line: &str) -> Option<String> {
        // A closed pipe shows up as no answer.
        let _ = writeln!(self.stdin, "{line}");
        let _ = self.stdin.flush();
        self.text()
    }

    /// The next line the worker prints; `None` once it has exited.
    ///
    /// # Panics
    ///
    /// When the line is not one of the protocol's.
    pub fn line(&mut self) -> Option<Line> {
        self.text().map(protocol_line)
    }

    /// Every line up to and including the first for which `last` holds (or end of output).
    pub fn lines_until(&mut self, last: impl Fn(&Line) -> bool) -> Vec<Line> {
        let mut lines = Vec::new();
        while let Some(line) = self.line() {
            let done = last(&line);
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    }

    /// Sends `command` and returns the worker's one-line answer (`None` if it has exited).
    ///
    /// # Panics
    ///
    /// When the answer is not one of the protocol's lines.
    pub fn ask(&mut self, command: protocol::Command) -> Option<Line> {
        self.ask_text(&command.to_string()).map(protocol_line)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`-STOP`, `-CONT`, `-KILL`) with the `kill` command.
    ///
    /// # Panics
    ///
    /// When `kill` fails.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill {signal} failed");
    }
}

fn protocol_line(text: String) -> Line {
    text.parse()
        .unwrap_or_else(|e| panic!("the worker wrote {text:?}: {e}"))
}

/// Starts a `hold` worker of `program` (pass `env!("CARGO_BIN_EXE_worker")`) on `key` with
/// renewal off, and returns it once it holds the lock, with its owner token.
///
/// # Panics
///
/// When the worker does not report the acquisition.
pub fn start_holder(program: &str, url: &str, key: &str, ttl_ms: u64) -> (LineChild, String) {
    let hold = Hold {
        redis: url.to_owned(),
        key: key.to_owned(),
        ttl_ms,
        renew: false,
        kind: HoldKind::Lock,
        permits: 1,
        take_over: None,
    };
    let mut holder = LineChild::start(program, &hold.args());
    match holder.line() {
        Some(Line::Acquired { token, .. }) => (holder, token),
        other => panic!("the holder did not acquire: {other:?}"),
    }
}

/// Starts a `body` worker of `program` (pass `env!("CARGO_BIN_EXE_worker")`) and returns it
/// once its body has started.
///
/// # Panics
///
/// When the worker does not report the start.
pub fn start_body(program: &str, body: &Body) -> LineChild {
    let mut child = LineChild::start(program, &body.args());
    match child.line() {
        Some(Line::Started(_)) => child,
        other => panic!("the body did not start: {other:?}"),
    }
}

impl Drop for LineChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
