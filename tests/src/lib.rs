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
//! Tests that need a lock holder in another OS process (to pause or kill it) start the
//! `worker` program (`env!("CARGO_BIN_EXE_worker")`): its roles and flags are [`worker`]'s,
//! and every line it writes or reads is one of [`protocol`]. [`child`] drives one worker line
//! by line; [`workers`] runs contending workers side by side and collects their sections.
//! [`history`] holds the one check of a recorded history (no two sections of a key at once,
//! fences in order) that these tests, the fault tests and the soak run.
//!
//! The soak program (`soak` binary) lives in [`soak`]: its nemesis, its workers, the checks
//! of its history and its report; it counts waiters' check ins on Redis's side with
//! [`checkins`].
//!
//! [`deploy`] starts replicated deployments: a Sentinel-managed master, and a Redis Cluster.
//!
//! [`http::exchange`] sends one hand-written HTTP/1.1 request to a service under test.
//!
//! [`stall::StallWatch`] tells whether a server stalled while a test ran (a script that
//! cannot finish stops the whole server).
//!
//! [`proxy::FaultProxy`] sits between a client and a server to delay, batch, blackhole or cut
//! its TCP flows.
//!
//! The server process lives in [`server`], its command counters in `stats`, and the bare RESP
//! client the harness uses when it cannot trust the server to be healthy in `resp`. The
//! examples start their local `redis-server` with the same [`RedisServer::try_start`].
//! [`postgres::PostgresServer`] starts a throw-away PostgreSQL the same way, for the shop's
//! tests on a real database.
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

pub mod binaries;
pub mod certs;
pub mod checkins;
pub mod child;
pub mod deploy;
pub mod history;
pub mod holding;
pub mod http;
pub mod locking;
pub mod monitor;
pub mod postgres;
pub mod protocol;
pub mod proxy;
mod resp;
pub mod server;
pub mod soak;
pub mod stall;
mod stats;
pub mod worker;
pub mod workers;

pub use server::{RedisServer, free_port};
pub use stats::Counts;
