//! The limits of a lock, defined once for both crates: the attribute checks them at compile
//! time, and `rlock-runtime` defines its public constants (`MAX_TTL`, `MAX_HOLD`,
//! `key::MAX_KEY_LEN`) from them through the hidden `__limit!` macro, so the two cannot
//! disagree.

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use crate::duration::Millis;

/// The most replicas a grant may wait for: more than a master ever has is a typo.
pub(crate) const MAX_REPLICAS: u32 = 64;

/// The shortest lease the attribute accepts: renewal runs every ttl/3, and below this a
/// network round trip or a scheduler hiccup would regularly outlast the lease. (The runtime
/// accepts 1 ms, for tests that want a lease to end.)
pub(crate) const MIN_TTL: Millis = Millis(10);
/// The longest lease accepted. A lock held for a day without renewal is a leak, not a lease.
pub(crate) const MAX_TTL: Millis = Millis::DAY;
/// The longest wait accepted.
pub(crate) const MAX_WAIT: Millis = Millis::DAY;
/// The longest `max_hold` accepted.
pub(crate) const MAX_HOLD: Millis = Millis(7 * Millis::DAY.0);
/// The most permits a semaphore may have: more is a typo, or a job for a counter.
pub(crate) const MAX_PERMITS: u32 = 1_000_000;
/// The most permits one call takes at once (`take`): each is a member of the semaphore's
/// set in Redis, all written in one command.
pub(crate) const MAX_TAKE: u32 = 1_000;
/// The longest key accepted, in bytes. Redis allows far more, but a key this long is a
/// template bug, and every byte travels with every command.
pub(crate) const MAX_KEY_LEN: usize = 4096;

/// `__limit!(MAX_TTL_MS)` → `86400000u64`: a limit as a literal for the runtime's constants.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let name = input.to_string();
    let literal = match name.as_str() {
        "MAX_TTL_MS" => Literal::u64_suffixed(MAX_TTL.0),
        "MAX_HOLD_MS" => Literal::u64_suffixed(MAX_HOLD.0),
        "MAX_KEY_LEN" => Literal::usize_suffixed(MAX_KEY_LEN),
        "MAX_TAKE" => Literal::u32_suffixed(MAX_TAKE),
        _ => {
            let message = format!(
                "unknown limit `{name}`; expected MAX_TTL_MS, MAX_HOLD_MS, MAX_KEY_LEN or MAX_TAKE"
            );
            return quote!(::core::compile_error!(#message));
        }
    };
    quote!(#literal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_takes_its_limits_from_here() {
        use std::time::Duration;
        assert_eq!(rlock_runtime::MAX_TTL, Duration::from_millis(MAX_TTL.0));
        assert_eq!(rlock_runtime::MAX_HOLD, Duration::from_millis(MAX_HOLD.0));
        assert_eq!(rlock_runtime::key::MAX_KEY_LEN, MAX_KEY_LEN);
    }

    #[test]
    fn limits_expand_to_literals_and_unknown_names_to_an_error() {
        assert_eq!(expand(quote!(MAX_TTL_MS)).to_string(), "86400000u64");
        assert_eq!(expand(quote!(MAX_KEY_LEN)).to_string(), "4096usize");
        assert!(
            expand(quote!(MAX_NONSENSE))
                .to_string()
                .contains("compile_error")
        );
    }
}
