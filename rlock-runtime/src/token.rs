//! Owner tokens: the value stored under a lock key that says who holds it.

use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

/// Issues tokens `<client uuid>:<n>`: unguessable (122 random bits per client) and unique per
/// acquisition attempt, so a stale release can never match a newer hold.
#[derive(Debug)]
pub(crate) struct TokenSource {
    client: Uuid,
    /// `<client uuid>:`, formatted once.
    prefix: String,
    next: AtomicU64,
}

impl TokenSource {
    pub(crate) fn new() -> Self {
        let client = Uuid::new_v4();
        Self {
            client,
            prefix: format!("{}:", client.simple()),
            next: AtomicU64::new(1),
        }
    }

    /// The client's identity, shared by all its tokens.
    pub(crate) fn client_id(&self) -> Uuid {
        self.client
    }

    pub(crate) fn next(&self) -> String {
        use std::fmt::Write as _;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // One allocation, sized for any counter: a token is made for every acquisition.
        let mut token = String::with_capacity(self.prefix.len() + 20);
        token.push_str(&self.prefix);
        let _ = write!(token, "{n}");
        token
    }
}

#[cfg(test)]
mod tests {
    use super::TokenSource;

    #[test]
    fn tokens_are_the_client_and_a_counter() {
        let tokens = TokenSource::new();
        let client = tokens.client_id().simple().to_string();
        assert_eq!(tokens.next(), format!("{client}:1"));
        assert_eq!(tokens.next(), format!("{client}:2"));
    }
}
