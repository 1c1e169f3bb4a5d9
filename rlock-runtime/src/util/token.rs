//! Owner tokens: the value stored under a lock key that says who holds it, `<client>:<n>`,
//! `<client>:<n>*<take>` for a semaphore's hold of several permits at once, and
//! `<client>:<n>^<m>` for the upgrade of the client's upgradeable read `<client>:<m>`.
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
        self.next_taking(1)
    }

    /// A token for the upgrade of this client's upgradeable read numbered `of`: `^<of>`
    /// follows the number, which the scripts read (`upgrade_of` in `rw/common.lua`).
    pub(crate) fn next_upgrading(&self, of: u64) -> String {
        let mut token = self.next();
        token.push('^');
        token.push_str(&of.to_string());
        token
    }

    /// A token for a hold of `take` permits: `*<take>` follows the number when more than
    /// one, which the scripts read (`weight_of` in `state.lua`).
    pub(crate) fn next_taking(&self, take: u32) -> String {
        use std::fmt::Write as _;
        let n = self.numbers.next();
        // One allocation, sized for any counter: a token is made for every acquisition.
        let mut token = String::with_capacity(self.prefix.len() + 32);
        token.push_str(&self.prefix);
        let _ = write!(token, "{n}");
        if take > 1 {
            let _ = write!(token, "*{take}");
        }
        token
    }
}

/// An owner token's parts. Written out it is `<client>:<number>`, the value a lease's key
/// holds, and `<client>:<number>*<take>` for a hold of several permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    /// The client's id (its uuid, simple form): its release channel and its holder card are
    /// named by it.
    pub(crate) client: &'a str,
    /// The acquisition's number, never given twice by one client.
    pub(crate) number: u64,
    /// The permits it holds: 1 but for a semaphore's hold of several.
    pub(crate) take: u32,
    /// An upgrade's: the number of the client's upgradeable read it upgrades.
    pub(crate) upgrading: Option<u64>,
}

impl<'a> Token<'a> {
    /// A plain token: one permit, no upgrade.
    pub(crate) fn plain(client: &'a str, number: u64) -> Self {
        Self {
            client,
            number,
            take: 1,
            upgrading: None,
        }
    }

    /// The parts of `text`, when it is one of rlock's tokens.
    pub(crate) fn parse(text: &'a str) -> Option<Self> {
        let (client, rest) = text.split_once(':')?;
        let (rest, upgrading) = match rest.split_once('^') {
            Some((rest, of)) => (rest, Some(of.parse().ok()?)),
            None => (rest, None),
        };
        let (number, take) = match rest.split_once('*') {
            Some((number, take)) if upgrading.is_none() => {
                (number, take.parse().ok().filter(|&t| t > 1)?)
            }
            Some(_) => return None,
            None => (rest, 1),
        };
        Some(Self {
            client,
            number: number.parse().ok()?,
            take,
            upgrading,
        })
    }
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.client, self.number)?;
        if self.take > 1 {
            write!(f, "*{}", self.take)?;
        }
        if let Some(of) = self.upgrading {
            write!(f, "^{of}")?;
        }
        Ok(())
    }
}

/// How many permits the hold of `token` takes, as the scripts read it (`weight_of` in
/// `state.lua`): 1 unless its token says more.
pub(crate) fn permits_taken(token: &str) -> u32 {
    Token::parse(token).map_or(1, |t| t.take)
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
        let weighted = tokens.next_taking(3);
        let token = Token::parse(&weighted).unwrap();
        assert_eq!((token.client, token.take), (client.as_str(), 3));
        assert_eq!(token.to_string(), weighted);
        assert_eq!(Token::parse(&tokens.next_taking(1)).unwrap().take, 1);
        let upgrade = tokens.next_upgrading(7);
        let token = Token::parse(&upgrade).unwrap();
        assert_eq!((token.client, token.upgrading), (client.as_str(), Some(7)));
        assert_eq!(token.to_string(), upgrade);
        for foreign in [
            "not-a-token",
            "a:b",
            "a:",
            ":",
            "a:1*",
            "a:1*1",
            "a:1*x",
            "a:1^",
            "a:1^x",
            "a:1*2^3",
        ] {
            assert_eq!(Token::parse(foreign), None, "{foreign}");
        }
    }
}
