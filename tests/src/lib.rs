//! Real-Redis test harness for rlock.
//!
//! Every test that talks to Redis starts its own throw-away `redis-server` process through
//! [`RedisServer`]: a free loopback port, no persistence, a private working directory, and a
//! guaranteed kill when the value is dropped. The same handle injects faults (pause with SIGSTOP,
//! kill with SIGKILL, restart on the same port) and reads the server's own command counters, so a
//! test can prove what went over the wire instead of trusting the client.
//!
//! A missing `redis-server` binary is a loud panic that names the install command; tests are
//! never skipped silently.
//!
//! The crate also holds the pieces of the multi-process mutual-exclusion test: the
//! `lock_worker` binary (one contending process; integration tests launch it through
//! `env!("CARGO_BIN_EXE_lock_worker")`) and [`history`], which parses what the workers print
//! and checks the merged history for overlapping critical sections and out-of-order fences.
//!
//! The soak program (`soak` binary) checks its history with [`soak`], judges its waiting
//! mix with [`waits`], and counts waiters' check ins on Redis's side with [`checkins`].
//!
//! [`deploy`] starts replicated deployments: a Sentinel-managed master, and a Redis Cluster.
//!
//! [`proxy::FaultProxy`] sits between a client and a server to delay, batch, blackhole or cut
//! its TCP flows.
//!
//! The server process lives in [`server`], its command counters in `stats`, and the bare RESP
//! client the harness uses when it cannot trust the server to be healthy in `resp`. The
//! examples start their local `redis-server` with the same [`RedisServer::try_start`].
//!
//! ```no_run
//! # async fn demo() {
//! use rlock_tests::RedisServer;
//!
//! let server = RedisServer::start();
//! let mut raw = server.raw().await;
//! let _: () = redis::cmd("SET").arg("k").arg("v").query_async(&mut raw).await.unwrap();
//!
//! let ((), delta) = server
//!     .commands_during(async {
//!         let _: Option<String> = redis::cmd("GET").arg("k").query_async(&mut raw).await.unwrap();
//!     })
//!     .await;
//! assert_eq!(delta.calls("get"), 1);
//! assert_eq!(delta.total, 1);
//!
//! server.pause(); // every command now hangs until `resume()`
//! server.resume();
//! server.kill(); // connections are refused
//! server.restart(); // same port, empty data set
//! # }
//! ```

pub mod certs;
pub mod checkins;
pub mod child;
pub mod deploy;
pub mod history;
pub mod locking;
pub mod proxy;
mod resp;
pub mod server;
pub mod soak;
mod stats;
pub mod waits;
pub mod workers;

pub use server::{RedisServer, free_port};
pub use stats::Counts;
