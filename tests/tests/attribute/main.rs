//! `#[distributed_lock]` as a service uses it, one module per topic:
//!
//! - [`macro_expand`]: annotated functions' behaviour, on the in-memory backend (this binary
//!   installs a default client there; `macro_not_configured` runs without one);
//! - [`macro_redis`]: the same against a real `redis-server`;
//! - [`frameworks`]: a lock error answered by actix-web and tonic over real connections.

mod frameworks;
mod macro_expand;
mod macro_redis;
