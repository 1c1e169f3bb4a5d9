//! Waiting for a busy lock, and the lease engine around it, against real `redis-server`
//! processes, one module per topic:
//!
//! - [`protocol`]: the waiting protocol's invariants (WAITING.md), each shown by the fault
//!   that broke it;
//! - [`queue`]: the lock's queue in Redis, fair and unfair;
//! - [`lease`]: the watchdog, a lost lease, announcements rather than polling;
//! - [`mutual_exclusion`]: several worker processes contending, checked from their history.

mod lease;
mod mutual_exclusion;
mod protocol;
mod queue;
