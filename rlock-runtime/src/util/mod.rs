//! Leaves used by every layer, importing none of them: the driver runtime, fences, tokens,
//! the client's timer lateness, per-thread counters, cluster hash slots, tracing events and
//! tuning constants.

pub(crate) mod driver;
pub(crate) mod fence;
pub(crate) mod lateness;
pub(crate) mod shard;
pub(crate) mod slot;
pub(crate) mod token;
pub(crate) mod trace;
pub(crate) mod tuning;
