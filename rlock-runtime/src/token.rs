//! Owner tokens: the value stored under a lock key that says who holds it.

use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

/// Issues tokens `<client uuid>:<n>`: unguessable (122 random bits per client) and unique per
/// acquisition attempt, so a stale release can never match a newer hold.
#[derive(Debug)]
pub(crate) struct TokenSource {
    client: Uuid,
    next: AtomicU64,
}

impl TokenSource {
    pub(crate) fn new() -> Self {
        Self {
            client: Uuid::new_v4(),
            next: AtomicU64::new(1),
        }
    }

    /// The client's identity, shared by all its tokens.
    pub(crate) fn client_id(&self) -> Uuid {
        self.client
    }

    pub(crate) fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.client.simple())
    }
}
