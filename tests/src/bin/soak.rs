//! The soak run (see [`rlock_tests::soak`] for what it does and how it is checked).
//!
//! ```text
//! cargo run -p rlock-tests --bin soak -- --quick                 # ≈ 1 minute, every fault
//! cargo run --release -p rlock-tests --bin soak -- --help
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = <rlock_tests::soak::Cli as clap::Parser>::parse();
    match rlock_tests::soak::main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}
