//! Helper processes that tests drive line by line over stdin/stdout, and pause or kill.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A child process speaking one line per message. Killed and reaped on drop.
#[derive(Debug)]
pub struct LineChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl LineChild {
    /// Starts `program` with `args`, its stdin and stdout piped to the test.
    ///
    /// # Panics
    ///
    /// When the program cannot be started.
    pub fn start(program: &str, args: &[&str]) -> Self {
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

    /// The next line the child prints, trimmed; empty once it has exited.
    pub fn line(&mut self) -> String {
        let mut line = String::new();
        // A read error means the child is gone: report it as end of output.
        let _ = self.stdout.read_line(&mut line);
        line.trim().to_owned()
    }

    /// Every line up to and including the first that starts with `last` (or end of output).
    pub fn lines_until(&mut self, last: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let line = self.line();
            let done = line.is_empty() || line.starts_with(last);
            lines.push(line);
            if done {
                return lines;
            }
        }
    }

    /// Sends `command` as one line and returns the child's one-line answer.
    pub fn ask(&mut self, command: &str) -> String {
        // A closed pipe shows up as an empty answer.
        let _ = writeln!(self.stdin, "{command}");
        let _ = self.stdin.flush();
        self.line()
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

/// Starts the manual-API holder (`src/bin/holder.rs`, pass `env!("CARGO_BIN_EXE_holder")`)
/// on `key` with renewal off, and returns it once it holds the lock, with its owner token.
///
/// # Panics
///
/// When the holder does not report the acquisition.
pub fn start_holder(program: &str, url: &str, key: &str, ttl_ms: u64) -> (LineChild, String) {
    let ttl = ttl_ms.to_string();
    let mut holder = LineChild::start(program, &[url, key, &ttl, "0"]);
    let line = holder.line();
    let token = line
        .strip_prefix("ACQUIRED ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("holder did not acquire: {line:?}"))
        .to_owned();
    (holder, token)
}

impl Drop for LineChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
