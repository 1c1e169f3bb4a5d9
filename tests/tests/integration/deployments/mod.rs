//! rlock on each deployment a user runs, against real local ones, one module per topic:
//!
//! - [`cluster`], [`sentinel`], [`redlock`]: the topologies, with their failovers;
//! - [`replicas`]: a grant confirmed by `WAIT`;
//! - [`tls`]: a `rediss://` URL;
//! - [`acl`]: the least-privilege user of the README;
//! - [`config`]: a client configured from the environment.

mod acl;
mod cluster;
mod config;
mod redlock;
mod replicas;
mod sentinel;
mod tls;
