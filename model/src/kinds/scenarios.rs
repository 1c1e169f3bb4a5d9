//! Configurations the tests both check and replay: each shows one thing the scripts do where
//! kinds or counts meet.

use super::{Client, Config, Scripts};

/// Two locks and three permits of one name: a lock waiter's entry stays queued when the lock
/// it waits for ends unreleased and a semaphore takes the name. (`lock` is the waiter.)
pub fn locks_and_permits(scripts: Scripts, lock: Client, permit: Client) -> Config {
    Config::new(scripts, &[Client::lock(), lock, permit, permit, permit]).faults(1, 0, 0)
}

/// Semaphores of one name in turn, of count 1 (two clients) and of count 2.
pub fn two_counts(scripts: Scripts) -> Config {
    Config::new(
        scripts,
        &[Client::permit(1), Client::permit(1), Client::permit(2)],
    )
    .faults(1, 0, 0)
}

/// A lock client that joins the queue plainly, beside a semaphore's two clients.
pub fn a_plain_join() -> Config {
    Config::new(
        Scripts::Now,
        &[
            Client::permit(1),
            Client::permit(1),
            Client::lock().appends(),
        ],
    )
}

/// Two clients of one kind, one of whose leases may end unreleased.
pub fn late_release(scripts: Scripts, client: Client) -> Config {
    Config::new(scripts, &[client, client]).faults(1, 0, 0)
}
