//! A lock holder in its own OS process, driven over stdin/stdout by tests that pause it
//! (SIGSTOP) or kill it while it holds a lock.
//!
//! Usage: `holder REDIS_URL KEY TTL_MS RENEW(0|1)`. Prints `ACQUIRED <token> <fence>`, then
//! reads commands, one per line: `release` prints `RELEASED ok` or `RELEASED lost`;
//! `lost?` prints `LOST yes` or `LOST no`; `wait-lost` prints `LOST yes` once the lease is
//! known lost. Exits after `release`, or with status 2 on any unexpected error.

use std::io::BufRead;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("holder: {e}");
        std::process::exit(2);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, key, ttl_ms, renew] = args.as_slice() else {
        return Err("usage: holder REDIS_URL KEY TTL_MS RENEW(0|1)".into());
    };
    let client = LockClient::builder()
        .url(url.as_str())
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await?;
    let guard = client
        .lock(key.as_str())
        .ttl(Duration::from_millis(ttl_ms.parse()?))
        .renew(renew == "1")
        .fenced()
        .acquire()
        .await?;
    println!(
        "ACQUIRED {} {}",
        guard.token(),
        guard.fence().map_or(0, |f| f.get())
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(command) = rx.recv().await {
        match command.trim() {
            "lost?" => println!("LOST {}", if guard.is_lost() { "yes" } else { "no" }),
            "wait-lost" => {
                guard.lost().await;
                println!("LOST yes");
            }
            "release" => {
                match guard.release().await {
                    Ok(()) => println!("RELEASED ok"),
                    Err(LockError::Lost { .. }) => println!("RELEASED lost"),
                    Err(e) => return Err(e.into()),
                }
                return Ok(());
            }
            other => return Err(format!("unknown command {other:?}").into()),
        }
    }
    Err("stdin closed before `release`".into())
}
