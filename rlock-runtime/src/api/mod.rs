//! The façade: what a user calls. The client and its builder, requests (`request`, taken by
//! `acquire` for one key and `multi` for several) and guards, options, the attribute's runtime
//! side (`run`), administration, the environment, and the answers a service gives its own
//! clients (HTTP, gRPC). It builds on the lease engine and calls nothing below it: it names
//! the backend's types (a kind, a lease) but connects, inspects and force-unlocks through
//! the engine.

pub(crate) mod acquire;
pub(crate) mod admin;
pub(crate) mod answer;
pub(crate) mod client;
pub(crate) mod diagnose;
pub(crate) mod duration;
pub(crate) mod env;
pub(crate) mod guard;
pub(crate) mod hand_over;
#[cfg(feature = "idempotency")]
pub(crate) mod idempotency;
pub(crate) mod identity;
pub(crate) mod leader;
pub(crate) mod multi;
#[cfg(feature = "once")]
pub(crate) mod once;
pub(crate) mod options;
pub(crate) mod request;
pub(crate) mod run;
