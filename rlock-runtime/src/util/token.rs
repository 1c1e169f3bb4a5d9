//! Owner tokens: the value stored under a lock key that says who holds it, `<client>:<n>`.
//! [`TokenSource`] makes them and [`Token`] names their parts; the scripts read a token's
//! client in one place of their own (`hand_off` in `queue.lua`, for the release channel).

use std::fmt;

use uuid::Uuid;

use crate::util::stripe::Numbers;

/// Issues tokens ([`Token`]s, written out): unguessable (122 random bits per client) and unique per
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

/// An owner token's parts. Written out it is `<client>:<number>`, the value a lease's key
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    /// The client's id (its uuid, simple form): its release channel and its holder card are
    /// named by it.
    pub(crate) client: &'a str,
    /// The acquisition's number, never given twice by one client.
    pub(crate) number: u64,
}

impl<'a> Token<'a> {
    /// The parts of `text`, when it is one of rlock's tokens.
    pub(crate) fn parse(text: &'a str) -> Option<Self> {
        let (client, number) = text.split_once(':')?;
        Some(Self {
            client,
            number: number.parse().ok()?,
        })
    }
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.client, self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::{Token, TokenSource};

    #[test]
    fn tokens_are_the_client_and_a_number_never_given_before() {
        let tokens = TokenSource::new();
        let client = tokens.client_id().simple().to_string();
        let (a, b) = (tokens.next(), tokens.next());
        assert_ne!(a, b);
        for text in [a, b] {
            let token = Token::parse(&text).unwrap();
            assert_eq!(token.client, client);
            assert!(token.number >= 1);
            assert_eq!(
                token.to_string(),
                text,
                "parsing and writing out are one format"
            );
        }
        for foreign in ["not-a-token", "a:b", "a:", ":"] {
            assert_eq!(Token::parse(foreign), None, "{foreign}");
        }
    }
}
