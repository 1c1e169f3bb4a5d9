//! rlock against real `redis-server` processes, one module per topic, in one test program so
//! that the topics' tests share one pool of test threads (most of them wait on a server: a
//! lease running out, a process stopped, a network held back) and the runtime and the harness
//! are linked once:
//!
//! - [`family`]: each kind of lease keeps its contract, and kinds meeting on one name;
//! - [`waiting`]: waiting for a busy lease, and the lease engine around it;
//! - [`deployments`]: Cluster, Sentinel, Redlock, replicas, TLS, ACLs, configuration;
//! - [`faults`]: the lease engine under faults, each with the bound it keeps there;
//! - [`leader`]: leader election on the lock, its terms and its failovers;
//! - [`once`]: once-only work across instances, its result shared.
//!
//! One topic alone: `cargo test -p rlock-tests --test integration faults::`.

mod deployments;
mod family;
mod faults;
mod leader;
mod once;
mod waiting;
