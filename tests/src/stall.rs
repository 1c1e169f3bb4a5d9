//! Whether a Redis server stalled while a test ran: a script that cannot finish stops the
//! whole server (every client is answered `BUSY`, and one that has written cannot even be
//! killed), so the tests that mix kinds of lease on one name watch for it.
//!
//! Two views, both of the server itself rather than of the test's clock: Redis's own latency
//! monitor, which records every command (a script call is one) that ran longer than
//! [`STALL`] by Redis's clock, and a `PING` every few milliseconds on a connection of its
//! own, which must be answered `PONG` every time (never `BUSY`, never silence past a generous
//! bound). A loaded machine slows the pings, not the latency monitor's verdict.
//!
//! ```no_run
//! # async fn demo() {
//! use rlock_tests::RedisServer;
//! use rlock_tests::stall::StallWatch;
//!
//! let server = RedisServer::start();
//! let watch = StallWatch::start(&server).await;
//! // ... lock, wait and release on the server ...
//! watch.finish().await.assert_no_stall();
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::RedisServer;

/// The longest a command may run by Redis's clock: 100 ms.
pub const STALL: Duration = Duration::from_millis(100);

/// How long one `PING` may go unanswered before the watch counts it: far past any scheduling
/// delay of a loaded machine, well inside Redis's own `BUSY` threshold of 5 s.
const PING_PATIENCE: Duration = Duration::from_secs(4);

/// A running watch of one server.
#[derive(Debug)]
pub struct StallWatch {
    server: redis::Client,
    stop: Arc<AtomicBool>,
    /// Ends with how many `PING`s it sent and the answers that were not `PONG`.
    pinger: tokio::task::JoinHandle<(u64, Vec<String>)>,
}

/// What a watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalls {
    /// `PING`s sent.
    pub pings: u64,
    /// Every `PING` not answered `PONG` within 4 s, with what came instead.
    pub unanswered: Vec<String>,
    /// Redis's latency events of commands slower than [`STALL`]: (event, worst ms).
    pub slow_commands: Vec<(String, u64)>,
}

impl Stalls {
    /// Fails the test with what was seen when anything stalled.
    ///
    /// # Panics
    ///
    /// When a `PING` went unanswered or a command ran longer than [`STALL`].
    pub fn assert_no_stall(&self) {
        assert!(
            self.unanswered.is_empty() && self.slow_commands.is_empty(),
            "Redis stalled: {self:?}"
        );
        assert!(self.pings > 0, "the watch sent no PING");
    }
}

impl StallWatch {
    /// Starts watching `server`: its latency monitor from now (threshold [`STALL`]), and a
    /// `PING` every 5 ms.
    ///
    /// # Panics
    ///
    /// When the server does not answer.
    pub async fn start(server: &RedisServer) -> StallWatch {
        let mut admin = server.raw().await;
        let threshold = STALL.as_millis().to_string();
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "latency-monitor-threshold", &threshold][..])
            .query_async(&mut admin)
            .await
            .expect("CONFIG SET latency-monitor-threshold");
        let _: i64 = redis::cmd("LATENCY")
            .arg("RESET")
            .query_async(&mut admin)
            .await
            .expect("LATENCY RESET");
        let stop = Arc::new(AtomicBool::new(false));
        let mut conn = server.raw_with_timeout(PING_PATIENCE).await;
        let pinger = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut unanswered = Vec::new();
                let mut sent = 0u64;
                // Bounded: a test runs for minutes at most (5 ms apart, an hour's worth).
                while !stop.load(Ordering::Relaxed) && sent < 720_000 {
                    sent += 1;
                    let reply: redis::RedisResult<String> =
                        redis::cmd("PING").query_async(&mut conn).await;
                    match reply {
                        Ok(pong) if pong == "PONG" => {}
                        Ok(other) => unanswered.push(other),
                        Err(e) => unanswered.push(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (sent, unanswered)
            }
        });
        StallWatch {
            server: server.redis_client(),
            stop,
            pinger,
        }
    }

    /// Stops the watch and tells what it saw.
    ///
    /// # Panics
    ///
    /// When the server does not answer the latency query.
    pub async fn finish(self) -> Stalls {
        self.stop.store(true, Ordering::Relaxed);
        let (sent, unanswered) = self.pinger.await.expect("the pinger panicked");
        let mut admin = self
            .server
            .get_multiplexed_async_connection()
            .await
            .expect("a connection for LATENCY LATEST");
        // Each event: [name, last time, last ms, worst ms, …] (Valkey adds more fields).
        let latest: Vec<Vec<redis::Value>> = redis::cmd("LATENCY")
            .arg("LATEST")
            .query_async(&mut admin)
            .await
            .expect("LATENCY LATEST");
        let slow_commands = latest
            .iter()
            .filter_map(|fields| {
                let event: String = redis::from_redis_value_ref(fields.first()?).ok()?;
                let worst: u64 = redis::from_redis_value_ref(fields.get(3)?).ok()?;
                event.contains("command").then_some((event, worst))
            })
            .collect();
        Stalls {
            pings: sent,
            unanswered,
            slow_commands,
        }
    }
}

/// How long a command may run before Redis answers other clients `BUSY`, on the servers a
/// [`BusyWatch`] watches (`lua-time-limit`, 5 s by default): a script that runs longer is a
/// stall of the whole server.
pub const BUSY_AFTER: Duration = Duration::from_millis(100);

/// A `PING` every few milliseconds to each of several servers, from threads of its own (for
/// a harness without a runtime, such as the soak's), recording every `BUSY` answer: a script
/// that ran longer than [`BUSY_AFTER`]. Servers that go away (killed, restarted, failed
/// over) are reached again; their silence is a fault's, not a stall.
#[derive(Debug)]
pub struct BusyWatch {
    stop: Arc<AtomicBool>,
    watchers: Vec<std::thread::JoinHandle<Vec<Busy>>>,
}

/// A `BUSY` answer: the server's port, and when it came (µs since the UNIX epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// The server's loopback port.
    pub port: u16,
    /// When the answer came.
    pub at_us: u64,
}

impl BusyWatch {
    /// Watches the servers on these loopback ports, lowering each one's `lua-time-limit` to
    /// [`BUSY_AFTER`] whenever it (re)connects.
    pub fn start(ports: &[u16]) -> BusyWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let watchers = ports
            .iter()
            .map(|&port| {
                let stop = stop.clone();
                std::thread::spawn(move || ping(port, &stop))
            })
            .collect();
        BusyWatch { stop, watchers }
    }

    /// Stops watching: every `BUSY` answer, in no particular order.
    pub fn finish(self) -> Vec<Busy> {
        self.stop.store(true, Ordering::Relaxed);
        self.watchers
            .into_iter()
            // A watcher only reads and records; one that panicked saw nothing to report.
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn ping(port: u16, stop: &AtomicBool) -> Vec<Busy> {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{SocketAddr, TcpStream};

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let limit = format!(
        "*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$14\r\nlua-time-limit\r\n${}\r\n{}\r\n",
        BUSY_AFTER.as_millis().to_string().len(),
        BUSY_AFTER.as_millis()
    );
    let mut busy = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let ready = stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .is_ok()
            && (&stream).write_all(limit.as_bytes()).is_ok();
        if !ready {
            continue;
        }
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        // The answer to CONFIG SET (an error on a server that refuses it changes nothing).
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        while !stop.load(Ordering::Relaxed) {
            line.clear();
            if reader.get_ref().write_all(b"PING\r\n").is_err()
                || reader.read_line(&mut line).is_err()
                || line.is_empty()
            {
                break;
            }
            if line.starts_with("-BUSY") {
                busy.push(Busy {
                    port,
                    at_us: now_us(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    busy
}
