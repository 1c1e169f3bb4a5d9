//! The worker program: one locking process of a test, so that the test can pause (SIGSTOP)
//! or kill it while it holds or waits. Its roles and their flags are
//! [`rlock_tests::worker`]'s, its output the lines of [`rlock_tests::protocol`].

use std::io::Write;
use std::process::ExitCode;

use rlock_tests::protocol::Line;
use rlock_tests::worker::{Cli, Role};

mod body;
mod contend;
mod hold;

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let outcome = match cli.role {
        Role::Hold(args) => current_thread().and_then(|rt| rt.block_on(hold::run(args))),
        Role::Body(args) => current_thread().and_then(|rt| rt.block_on(body::run(args))),
        Role::Contend(args) => contend::main(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::from(2)
        }
    }
}

fn current_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// Prints `line` and flushes it at once: the test reads it while the worker goes on.
fn say(line: &Line) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
