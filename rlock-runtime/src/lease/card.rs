//! The holder card: a hash in Redis that names this client (service, host, pid) and lists
//! the holds it has kept for a while, each with when it was granted and its fencing token if
//! it has one, so that `inspect` from any process (an operator's `rlock inspect`, a follower
//! observing its leader) can say who holds a lock, since when and under which token.
//! No lock script reads or writes it; the lock key keeps its plain token.
//!
//! What the keeper keeps true:
//! - **Off the locks' path.** A grant only checks a flag ([`Card::wake`]); the keeper is a
//!   task on the background runtime that looks at the watchdog's holds once per
//!   [`CARD_PASS`].
//! - **Listed.** A hold that has lasted a pass and is still held is on the card after the
//!   keeper's next pass that Redis answers (at most [`CARD_MAX_HOLDS`], longest-held first;
//!   [`CARD_BATCH`] added per pass). A hold that ended leaves it at the next answered pass.
//!   A card that expired meanwhile (Redis answered that it was gone) is posted whole again.
//! - **Bounded in time.** Every pass with something listed posts the card with a lease of
//!   [`CARD_LEASE`]: it outlives a client that died by at most that. A client dropped
//!   deletes it at the keeper's next pass.
//! - **Only while held.** With nothing listed and nothing posted the keeper stops; the next
//!   hold starts it again. Stopping re-checks for holds after clearing the flag, so a grant
//!   racing the stop cannot go unlisted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use super::Engine;
use crate::backend::{Backend, CardPost, LeaseStore};
use crate::key::own_key;
use crate::util::token::Token;
use crate::util::tuning::{CARD_BATCH, CARD_LEASE, CARD_MAX_HOLDS, CARD_PASS};

/// The card's fields that name the client; every other field is a hold's.
pub(crate) const NAME_FIELDS: [&str; 3] = ["@service", "@host", "@pid"];

/// One client's card: where it lives, what it says of the client, and whether its keeper
/// runs.
#[derive(Debug)]
pub(crate) struct Card {
    key: String,
    name: Vec<(String, String)>,
    running: AtomicBool,
}

impl Card {
    /// The card of client `client`, in `namespace`, naming it `service` on `host` as `pid`.
    pub(crate) fn new(namespace: Option<&str>, client: Uuid, name: [String; 3]) -> Self {
        Self {
            key: key(namespace, &client.simple().to_string()),
            name: NAME_FIELDS
                .iter()
                .map(|f| (*f).to_owned())
                .zip(name)
                .collect(),
            running: AtomicBool::new(false),
        }
    }

    /// A hold was granted: starts the keeper unless it runs.
    pub(crate) fn wake(&self, engine: &Arc<Engine>) {
        if !self.running.load(Ordering::Relaxed) && !self.running.swap(true, Ordering::AcqRel) {
            let keeper = keep(
                Arc::downgrade(engine),
                engine.backend.clone(),
                self.key.clone(),
            );
            if !crate::util::background::spawn(keeper) {
                self.running.store(false, Ordering::Release);
            }
        }
    }
}

/// The key of the card of the client whose id (the part of its owner tokens before the
/// `:`) is `client`.
pub(crate) fn key(namespace: Option<&str>, client: &str) -> String {
    own_key(namespace, &format!("holder:{client}"))
}

/// Whether `key` (without a namespace) is a holder card's.
pub(crate) fn is_card(key: &str) -> bool {
    key.strip_prefix("rlock:holder:")
        .is_some_and(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The field that lists a hold on its client's card: its token's number.
pub(crate) fn hold_field(token: Token<'_>) -> String {
    token.number.to_string()
}

/// A hold's value on the card: when it was granted (unix ms), then its fencing token if it
/// has one, after a space.
pub(crate) fn hold_value(granted_ms: u64, fence: Option<u64>) -> String {
    match fence {
        Some(fence) => format!("{granted_ms} {fence}"),
        None => granted_ms.to_string(),
    }
}

/// A hold's grant time (unix ms) and fencing token, as [`hold_value`] wrote them; `None` for
/// a value that is not one.
pub(crate) fn parse_hold_value(value: &str) -> Option<(u64, Option<u64>)> {
    let mut parts = value.split(' ');
    let granted_ms = parts.next()?.parse().ok()?;
    let fence = match parts.next() {
        Some(fence) => Some(fence.parse().ok()?),
        None => None,
    };
    parts.next().is_none().then_some((granted_ms, fence))
}

/// The keeper: one pass per [`CARD_PASS`] while the client lives and something is listed or
/// posted.
async fn keep(engine: Weak<Engine>, backend: Backend, key: String) {
    // The hold fields the card has, as far as the last answered post said.
    let mut posted = BTreeSet::<String>::new();
    loop {
        tokio::time::sleep(CARD_PASS).await;
        let Some(engine) = engine.upgrade() else {
            if !posted.is_empty() {
                let gone: Vec<String> = posted.into_iter().collect();
                let _ = backend
                    .post_card(CardPost {
                        key: &key,
                        lease: CARD_LEASE,
                        set: &[],
                        delete: &gone,
                    })
                    .await;
            }
            return;
        };
        let listed = listed(&engine);
        if listed.is_empty() && posted.is_empty() {
            let card = &engine.card;
            card.running.store(false, Ordering::Release);
            // A hold granted after the look above saw the flag still up and did not start
            // a keeper: this one goes on for it.
            if engine.watchdog.holds().is_empty() || card.running.swap(true, Ordering::AcqRel) {
                return;
            }
            continue;
        }
        let mut set = engine.card.name.clone();
        set.extend(
            listed
                .iter()
                .filter(|(field, _)| !posted.contains(*field))
                .take(CARD_BATCH)
                .map(|(field, value)| (field.clone(), value.clone())),
        );
        let delete: Vec<String> = posted
            .iter()
            .filter(|field| !listed.contains_key(*field))
            .cloned()
            .collect();
        let post = CardPost {
            key: &key,
            lease: CARD_LEASE,
            set: &set,
            delete: &delete,
        };
        // A post Redis did not answer changes nothing here: the next pass sends it again.
        if let Ok(existed) = engine.backend.post_card(post).await {
            if !existed {
                // Expired before this post: it holds only what this post set.
                posted.clear();
            }
            for field in &delete {
                posted.remove(field);
            }
            posted.extend(set.into_iter().skip(NAME_FIELDS.len()).map(|(f, _)| f));
            if listed.is_empty() {
                // The script deleted a card that names no hold.
                posted.clear();
            }
        }
    }
}

/// The holds to list, by field: those that have lasted a pass and are not lost, the
/// longest-held first, each with its value ([`hold_value`]).
fn listed(engine: &Engine) -> BTreeMap<String, String> {
    let now = SystemTime::now();
    let lasted_from = tokio::time::Instant::now().checked_sub(CARD_PASS);
    let mut holds: Vec<_> = engine
        .watchdog
        .holds()
        .into_iter()
        .filter(|hold| lasted_from.is_some_and(|from| hold.granted_at() <= from))
        .collect();
    // The longest-held CARD_MAX_HOLDS, chosen in linear time, and only they are asked
    // whether they are lost: a client may keep a million holds, and this runs every pass.
    if holds.len() > CARD_MAX_HOLDS {
        holds.select_nth_unstable_by_key(CARD_MAX_HOLDS, |hold| hold.granted_at());
        holds.truncate(CARD_MAX_HOLDS);
    }
    holds
        .iter()
        .filter(|hold| !hold.is_lost())
        .filter_map(|hold| {
            let granted = now - hold.granted_at().elapsed();
            let ms = granted
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let fence = hold.fence().map(u64::from);
            Some((
                hold_field(Token::parse(hold.token())?),
                hold_value(ms, fence),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_listed_by_its_tokens_number_under_its_clients_key() {
        let token = Token::parse("0af3:17").unwrap();
        assert_eq!(hold_field(token), "17");
        assert_eq!(key(None, "0af3"), "rlock:holder:0af3");
        assert_eq!(key(Some("shop"), "0af3"), "shop:rlock:holder:0af3");
    }

    #[test]
    fn a_holds_value_is_its_grant_time_and_its_fence_if_any() {
        assert_eq!(hold_value(1_700, None), "1700");
        assert_eq!(hold_value(1_700, Some(42)), "1700 42");
        assert_eq!(parse_hold_value("1700"), Some((1_700, None)));
        assert_eq!(parse_hold_value("1700 42"), Some((1_700, Some(42))));
        for bad in ["", "x", "1700 ", "1700 x", "1700 42 7", " 1700"] {
            assert_eq!(parse_hold_value(bad), None, "{bad:?}");
        }
    }
}
