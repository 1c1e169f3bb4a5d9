//! Models of rlock's waiting, checked with [stateright] over every interleaving of their
//! steps up to their bounds:
//!
//! - [`waiting`]: how waiters wait for one busy lock (membership, hand-off, check-in rate,
//!   safety, no orphan), under the faults a waiter meets: stalls, deaths, a lapsed queue, a
//!   cancelled or cut call;
//! - [`kinds`]: one name used as several kinds of lease (a lock, a semaphore's permits, a
//!   read-write lock's readers and writer), whose scripts must keep each kind to itself and
//!   end every call. Its steps are the scripts' own calls, and `tests/conformance.rs` replays
//!   its paths through the real scripts on a real server, so the two cannot drift.
//!
//! `cargo test -p rlock-model` checks both ([`check`] runs the checker as the tests do;
//! WAITING.md, "What the model covers").

pub mod check;
pub mod kinds;
pub mod waiting;
