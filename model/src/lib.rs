//! Models of rlock's waiting, checked with [stateright] over every interleaving of their
//! steps up to their bounds:
//!
//! - [`waiting`]: how waiters wait for one busy lock (membership, hand-off, check-in rate,
//!   safety, no orphan), under the faults a waiter meets: stalls, deaths, a lapsed queue, a
//!   cancelled or cut call.
//!
//! `cargo test -p rlock-model` checks it ([`check`] runs the checker as the tests do;
//! WAITING.md, "What the model covers").

pub mod check;
pub mod waiting;
