//! Leaves used by every layer, importing none of them: the background runtime, fences, tokens,
//! the client's timer lateness, per-thread counter stripes, cluster hash slots, tracing events and
//! tuning constants.

pub(crate) mod background;
pub(crate) mod fence;
pub(crate) mod lateness;
pub(crate) mod slot;
pub(crate) mod stripe;
pub(crate) mod token;
pub(crate) mod trace;
pub(crate) mod tuning;
