//! Fencing: even a correct lock can be lost, when its holder pauses (GC, a stalled VM, a
//! swapped-out process) for longer than its lease. The fencing token makes the store itself
//! reject the paused holder's late write.
//!
//! `cargo run -p rlock-examples --example fencing`
//!
//! Timeline: A takes the lock (token n) and stalls for 600 ms, past its 200 ms lease. B
//! takes the lock (token n+1) and writes. A wakes up and writes too: the store has seen
//! n+1, so it rejects n. Without the token, A would overwrite B's newer data.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use rlock_runtime::{LockClient, LockError, distributed_lock};

/// A storage service that remembers the highest fencing token it accepted and refuses
/// writes carrying a lower one (in SQL: `UPDATE … SET body = $1, fence = $2 WHERE id = $3
/// AND fence < $2`).
#[derive(Debug, Default)]
struct FencedStore {
    state: Mutex<(u64, String)>,
}

impl FencedStore {
    /// Writes `body` if `fence` is newer than every token seen so far.
    fn write(&self, fence: u64, body: &str) -> Result<(), String> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if fence <= state.0 {
            return Err(format!("token {fence} is stale (newest seen: {})", state.0));
        }
        *state = (fence, body.to_owned());
        Ok(())
    }

    fn read(&self) -> (u64, String) {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Saves the report under `report:<id>`. Renewal is off so that the stall below outlives the
/// lease, as it would if the whole process (watchdog included) were frozen; `on_lost =
/// "continue"` lets the stale write reach the store, to show the store refusing it.
#[distributed_lock(
    key = "report:<id>",
    client = client,
    ttl = "200ms",
    renew = false,
    wait = "2s",
    on_lost = "continue",
    fence = token
)]
async fn save_report(
    client: &LockClient,
    store: &FencedStore,
    id: u64,
    who: &str,
    stall: Duration,
) -> Result<(), LockError> {
    println!("  {who}: holds `report:{id}` with fencing token {token}");
    if !stall.is_zero() {
        println!("  {who}: stalls for {stall:?} (lease is 200ms)");
        tokio::time::sleep(stall).await;
    }
    match store.write(token, &format!("written by {who}")) {
        Ok(()) => println!("  {who}: write with token {token} accepted"),
        Err(why) => println!("  {who}: write REJECTED by the store: {why}"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    rlock_examples::run_example(
        "fencing",
        "Fencing tokens: a store that refuses writes from a holder whose lease ended.",
        run,
    )
    .await
}

async fn run(client: LockClient) -> Result<(), LockError> {
    // Two instances of the service.
    let (a, b) = (client.clone(), client.sibling());
    let store = FencedStore::default();

    let slow = save_report(&a, &store, 7, "A", Duration::from_millis(600));
    let fast = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!("  B: asks for the lock (waits up to 2s)");
        save_report(&b, &store, 7, "B", Duration::ZERO).await
    };
    let (ra, rb) = tokio::join!(slow, fast);
    ra?;
    rb?;

    let (fence, body) = store.read();
    println!("store holds {body:?} (token {fence}): the late write did not clobber it");
    println!("lost leases seen by A's instance: {}", a.metrics().lost);
    Ok(())
}
