//! Owner tokens: the value stored under a lock key that says who holds it.

use uuid::Uuid;

use crate::util::stripe::Numbers;

/// Issues tokens `<client uuid>:<n>`: unguessable (122 random bits per client) and unique per
/// acquisition attempt, so a stale release can never match a newer hold.
#[derive(Debug)]
pub(crate) struct TokenSource {
    client: Uuid,
    /// `<client uuid>:`, formatted once.
    prefix: String,
    /// Drawn per thread: every acquisition takes one.
    numbers: Numbers,
}

impl TokenSource {
    pub(crate) fn new() -> Self {
        let client = Uuid::new_v4();
        Self {
            client,
            prefix: format!("{}:", client.simple()),
            numbers: Numbers::new(),
        }
    }

    /// The client's identity, shared by all its tokens.
    pub(crate) fn client_id(&self) -> Uuid {
        self.client
    }

    pub(crate) fn next(&self) -> String {
        use std::fmt::Write as _;
        let n = self.numbers.next();
        // One allocation, sized for any counter: a token is made for every acquisition.
        let mut token = String::with_capacity(self.prefix.len() + 20);
        token.push_str(&self.prefix);
        let _ = write!(token, "{n}");
        token
    }
}

/// The acquisition number of `token` (`<client>:<n>`), if it is one of rlock's.
pub(crate) fn number_of(token: &str) -> Option<u64> {
    token.rsplit_once(':')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{TokenSource, number_of};

    #[test]
    fn tokens_are_the_client_and_a_number_never_given_before() {
        let tokens = TokenSource::new();
        let client = tokens.client_id().simple().to_string();
        let (a, b) = (tokens.next(), tokens.next());
        assert_ne!(a, b);
        for token in [a, b] {
            let (owner, n) = token.split_once(':').unwrap();
            assert_eq!(owner, client);
            assert!(n.parse::<u64>().unwrap() >= 1);
            assert_eq!(number_of(&token), n.parse().ok());
        }
        assert_eq!(number_of("not-a-token"), None);
    }
}
