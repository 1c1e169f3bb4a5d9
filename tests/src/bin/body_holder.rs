//! A `#[distributed_lock]` body in its own OS process, for tests that pause or starve it.
//!
//! Usage: `body_holder REDIS_URL ID BODY_MS RENEW(0|1) ON_LOST(abort|continue)`.
//! Runs `job:<ID>` with a 1 s lease and a body of BODY_MS. Prints `STARTED <fence>` when the
//! body starts, `FINISHED` if it runs to its end, and last `RESULT ok`, `RESULT lost` or
//! `RESULT error <message>`.

use std::io::Write;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, id, body_ms, renew, on_lost] = args.as_slice() else {
        eprintln!("usage: body_holder REDIS_URL ID BODY_MS RENEW(0|1) ON_LOST(abort|continue)");
        std::process::exit(2);
    };
    let (Ok(id), Ok(body_ms)) = (id.parse::<u64>(), body_ms.parse::<u64>()) else {
        eprintln!("body_holder: ID and BODY_MS must be numbers");
        std::process::exit(2);
    };
    let client = match LockClient::builder()
        .url(url.as_str())
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("body_holder: {e}");
            std::process::exit(2);
        }
    };
    let body = Duration::from_millis(body_ms);
    let result = match (renew.as_str(), on_lost.as_str()) {
        ("1", "abort") => renewed_abort(&client, id, body).await,
        ("0", "abort") => unrenewed_abort(&client, id, body).await,
        ("1", "continue") => renewed_continue(&client, id, body).await,
        _ => unrenewed_continue(&client, id, body).await,
    };
    match result {
        Ok(()) => say("RESULT ok"),
        Err(LockError::Lost { .. }) => say("RESULT lost"),
        Err(e) => say(&format!("RESULT error {e}")),
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn work(fence: u64, body: Duration) {
    say(&format!("STARTED {fence}"));
    tokio::time::sleep(body).await;
    say("FINISHED");
}

#[distributed_lock(key = "job:<id>", ttl = "1s", client = client, fence = fence)]
async fn renewed_abort(client: &LockClient, id: u64, body: Duration) -> Result<(), LockError> {
    work(fence, body).await;
    Ok(())
}

#[distributed_lock(key = "job:<id>", ttl = "1s", renew = false, client = client, fence = fence)]
async fn unrenewed_abort(client: &LockClient, id: u64, body: Duration) -> Result<(), LockError> {
    work(fence, body).await;
    Ok(())
}

#[distributed_lock(key = "job:<id>", ttl = "1s", on_lost = "continue", client = client, fence = fence)]
async fn renewed_continue(client: &LockClient, id: u64, body: Duration) -> Result<(), LockError> {
    work(fence, body).await;
    Ok(())
}

#[distributed_lock(
    key = "job:<id>",
    ttl = "1s",
    renew = false,
    on_lost = "continue",
    client = client,
    fence = fence
)]
async fn unrenewed_continue(client: &LockClient, id: u64, body: Duration) -> Result<(), LockError> {
    work(fence, body).await;
    Ok(())
}
