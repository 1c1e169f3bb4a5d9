//! Per-thread stripes of the counters every lock touches.
//!
//! A counter that every acquisition bumps (a token's number, a hold's id, the client's
//! metrics, a connection's calls in flight) is a cache line that a runtime's workers take from
//! one another on every lock. Split into a few stripes, each on a line of its own, with each
//! thread counting in its own stripe (threads are given stripes in turn), they stop fighting
//! over it; whoever reads the total adds the stripes up.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter; threads beyond this many share them.
pub(crate) const STRIPES: usize = 4;

/// A value on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Padded<T>(pub(crate) T);

thread_local! {
    /// This thread's stripe, given on first use.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The next thread's stripe.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's stripe, in `0..STRIPES`.
pub(crate) fn this_thread() -> usize {
    SHARD
        .try_with(|stripe| match stripe.get() {
            Some(index) => index,
            None => {
                let index = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
                stripe.set(Some(index));
                index
            }
        })
        // A thread being torn down counts in the first stripe.
        .unwrap_or(0)
}

/// Numbers unique across stripes, each thread drawing from its own: stripe `k` gives `k + 1`,
/// `k + 1 + STRIPES`, … (so they start at 1 and never repeat, but are not in order).
#[derive(Debug, Default)]
pub(crate) struct Numbers([Padded<AtomicU64>; STRIPES]);

impl Numbers {
    pub(crate) const fn new() -> Self {
        Self([const { Padded(AtomicU64::new(0)) }; STRIPES])
    }

    /// A number never given before.
    pub(crate) fn next(&self) -> u64 {
        let stripe = this_thread();
        let drawn = self.0[stripe].0.fetch_add(1, Ordering::Relaxed);
        // Lossless: a shard index is below STRIPES.
        drawn * STRIPES as u64 + stripe as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_never_repeat_across_threads() {
        let numbers = std::sync::Arc::new(Numbers::new());
        let drawn: Vec<u64> = (0..8)
            .map(|_| {
                let numbers = numbers.clone();
                std::thread::spawn(move || (0..1000).map(|_| numbers.next()).collect::<Vec<_>>())
            })
            .flat_map(|t| t.join().unwrap_or_default())
            .collect();
        let mut unique = drawn.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 8000);
        assert!(unique[0] >= 1);
    }
}
