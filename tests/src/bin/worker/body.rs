//! `body`: a `#[distributed_lock]` body, for tests that pause or starve it.

use std::time::Duration;

use rlock_runtime::{LockClient, LockError, distributed_lock};
use rlock_tests::protocol::{Line, Outcome};
use rlock_tests::worker::{Body, OnLost};

use crate::say;

pub(crate) async fn run(args: Body) -> Result<(), String> {
    let client = LockClient::builder()
        .url(args.redis.as_str())
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let (id, body) = (args.id, Duration::from_millis(args.body_ms));
    // The macro's options are fixed at compile time: one function per combination.
    let result = match (args.renew, args.on_lost) {
        (true, OnLost::Abort) => renewed_abort(&client, id, body).await,
        (false, OnLost::Abort) => unrenewed_abort(&client, id, body).await,
        (true, OnLost::Continue) => renewed_continue(&client, id, body).await,
        (false, OnLost::Continue) => unrenewed_continue(&client, id, body).await,
    };
    say(&Line::Result(match result {
        Ok(()) => Outcome::Ok,
        Err(LockError::Lost { .. }) => Outcome::Lost,
        Err(e) => Outcome::Error(e.to_string()),
    }));
    Ok(())
}

async fn work(fence: u64, body: Duration) {
    say(&Line::Started(Some(fence)));
    tokio::time::sleep(body).await;
    say(&Line::Finished);
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
