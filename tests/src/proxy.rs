//! A TCP fault proxy between a client under test and a `redis-server`.
//!
//! [`FaultProxy::start`] listens on a free loopback port and forwards every connection it
//! accepts to `127.0.0.1:<upstream port>`. While the flows run, a test can make the network
//! misbehave:
//!
//! - [`blackhole_existing`](FaultProxy::blackhole_existing): every flow open *now* goes silent
//!   in both directions. Bytes are read and discarded, nothing is forwarded, and neither socket
//!   is closed (no FIN, no RST), as when a NAT or firewall forgets a flow. Connections made
//!   afterwards work normally.
//! - [`set_delay`](FaultProxy::set_delay): every chunk is forwarded that long after it was read,
//!   in order per direction (a slow network).
//! - [`set_batching`](FaultProxy::set_batching): chunks are held and flushed together on a
//!   fixed tick (packets arriving in bursts); combines with the delay.
//! - [`reset_all`](FaultProxy::reset_all): every current flow is closed abruptly, with an RST
//!   on both sides.
//! - [`partition`](FaultProxy::partition): a full partition until
//!   [`heal`](FaultProxy::heal): every flow open now goes silent, and so does every connection
//!   accepted meanwhile (the client sees its connect succeed, then nothing).
//!
//! The proxy runs on its own Tokio runtime (one worker thread), so it works from synchronous
//! tests and from tests on any runtime, and keeps forwarding whatever the test's runtime does.
//! All controls take `&self` and are plain atomic or mutex updates, callable from sync or async
//! code. Dropping the proxy stops it and closes everything.
//!
//! Everything is bounded: at most [`MAX_FLOWS`] flows at once (later ones are closed at once),
//! at most [`QUEUE_CHUNKS`] chunks of at most [`CHUNK`] bytes queued per direction (a full
//! queue stops reading, so TCP flow control pushes back on the sender), and a
//! [`CONNECT_TIMEOUT`] on reaching the upstream. Nothing in the forwarding tasks can panic.
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use rlock_tests::RedisServer;
//! use rlock_tests::proxy::FaultProxy;
//!
//! let server = RedisServer::start();
//! let proxy = FaultProxy::start(server.port());
//! let client = redis::Client::open(proxy.url()).unwrap();
//! // ... connect through the proxy, then:
//! proxy.set_delay(Duration::from_millis(3));
//! proxy.set_batching(Some(Duration::from_millis(2)));
//! proxy.blackhole_existing(); // open flows die silently; new ones work
//! proxy.reset_all(); // open flows are cut with an RST
//! # drop(client);
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Most flows forwarded at once; connections beyond it are closed as soon as accepted.
pub const MAX_FLOWS: usize = 1024;
/// Most chunks queued per direction of a flow.
pub const QUEUE_CHUNKS: usize = 256;
/// Largest chunk read at once, in bytes.
pub const CHUNK: usize = 16 * 1024;
/// Largest write after coalescing due chunks, in bytes.
const MAX_WRITE: usize = 256 * 1024;
/// How long the proxy tries to reach the upstream for one accepted connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A TCP proxy on a free loopback port that can delay, batch, blackhole and cut its flows.
/// See the [module documentation](self).
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("port", &self.port)
            .field("upstream", &self.shared.upstream)
            .field("delay", &self.shared.delay())
            .field("batching", &self.shared.batching())
            .field("connections", &self.connections())
            .field("open_flows", &self.shared.flows().len())
            .finish()
    }
}

/// What the controls and every flow share.
struct Shared {
    upstream: u16,
    /// Forwarding delay in microseconds.
    delay_us: AtomicU64,
    /// Batching interval in microseconds; 0 when off.
    batch_us: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// A full partition: connections accepted now are silent from the start.
    partitioned: AtomicBool,
    next_id: AtomicU64,
    /// Open flows, by id.
    flows: Mutex<HashMap<u64, Arc<FlowCtl>>>,
    /// Origin of the batching ticks.
    epoch: Instant,
}

/// The controls of one flow.
struct FlowCtl {
    /// Silent in both directions: read and discard, forward nothing, close nothing.
    blackholed: AtomicBool,
    /// Set once to cut the flow with an RST.
    reset: watch::Sender<bool>,
}

/// One unit forwarded in one direction.
enum Chunk {
    /// Bytes and when they were read.
    Data(Vec<u8>, Instant),
    /// The source closed its side (FIN): shut down the destination's write side.
    Eof,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Shared {
    fn flows(&self) -> MutexGuard<'_, HashMap<u64, Arc<FlowCtl>>> {
        // Inserts and removals only: a poisoned map is intact.
        self.flows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }

    fn batching(&self) -> Option<Duration> {
        match self.batch_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// When a chunk read at `read_at` may be written: after the delay, and with batching on,
    /// at the next tick after that.
    fn due(&self, read_at: Instant) -> Instant {
        let due = read_at + self.delay();
        let Some(interval) = self.batching() else {
            return due;
        };
        let since = micros(due.saturating_duration_since(self.epoch));
        let step = micros(interval).max(1);
        let ticks = since.div_ceil(step);
        self.epoch + Duration::from_micros(ticks.saturating_mul(step))
    }
}

impl FaultProxy {
    /// Starts a proxy on a free `127.0.0.1` port that forwards to `127.0.0.1:upstream_port`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the proxy's runtime cannot start.
    pub fn start(upstream_port: u16) -> FaultProxy {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("fault proxy: bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("fault proxy: local_addr")
            .port();
        listener
            .set_nonblocking(true)
            .expect("fault proxy: set_nonblocking");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .expect("fault proxy: build its runtime");
        let shared = Arc::new(Shared {
            upstream: upstream_port,
            delay_us: AtomicU64::new(0),
            batch_us: AtomicU64::new(0),
            accepted: AtomicUsize::new(0),
            partitioned: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            flows: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        });
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener).expect("fault proxy: register the listener")
        };
        runtime.spawn(accept_loop(listener, shared.clone()));
        FaultProxy {
            port,
            shared,
            runtime: Some(runtime),
        }
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Connections accepted so far (including ones closed again).
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Flows open now (accepted, not yet finished or cut).
    pub fn open_flows(&self) -> usize {
        self.shared.flows().len()
    }

    /// Every flow open now goes silent in both directions, without closing either socket.
    /// Connections accepted later are forwarded normally.
    pub fn blackhole_existing(&self) {
        for flow in self.shared.flows().values() {
            flow.blackholed.store(true, Ordering::Relaxed);
        }
    }

    /// A full partition: every flow open now goes silent, as with
    /// [`blackhole_existing`](Self::blackhole_existing), and so does every connection accepted
    /// until [`heal`](Self::heal). No socket is closed.
    pub fn partition(&self) {
        self.shared.partitioned.store(true, Ordering::Relaxed);
        self.blackhole_existing();
    }

    /// Ends a [`partition`](Self::partition): connections accepted from now on are forwarded.
    /// (The flows silenced meanwhile stay silent, as a forgotten flow does.)
    pub fn heal(&self) {
        self.shared.partitioned.store(false, Ordering::Relaxed);
    }

    /// Forwards every chunk `delay` after it was read (order is kept per direction). Applies
    /// to chunks read from now on; `Duration::ZERO` turns it off.
    pub fn set_delay(&self, delay: Duration) {
        self.shared.delay_us.store(micros(delay), Ordering::Relaxed);
    }

    /// Holds chunks and flushes them together every `interval` (`None`: off).
    pub fn set_batching(&self, interval: Option<Duration>) {
        let us = interval.map_or(0, |i| micros(i).max(1));
        self.shared.batch_us.store(us, Ordering::Relaxed);
    }

    /// Closes every current flow abruptly: both sockets are closed with `SO_LINGER` 0, so
    /// each peer gets an RST.
    pub fn reset_all(&self) {
        for flow in self.shared.flows().values() {
            flow.reset.send_replace(true);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.reset_all();
        if let Some(runtime) = self.runtime.take() {
            // Allowed inside async code too, unlike dropping the runtime: its tasks, and with
            // them the listener and every socket, are dropped by its own thread.
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of descriptors or an aborted handshake: try again shortly.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let ctl = Arc::new(FlowCtl {
            blackholed: AtomicBool::new(shared.partitioned.load(Ordering::Relaxed)),
            reset: watch::Sender::new(false),
        });
        {
            let mut flows = shared.flows();
            if flows.len() >= MAX_FLOWS {
                continue; // `client` is dropped: closed at once.
            }
            flows.insert(id, ctl.clone());
        }
        tokio::spawn(run_flow(shared.clone(), id, ctl, client));
    }
}

/// Forwards one accepted connection until both directions finish or it is cut.
async fn run_flow(shared: Arc<Shared>, id: u64, ctl: Arc<FlowCtl>, client: TcpStream) {
    let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, shared.upstream));
    let server = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(server)) => server,
        _ => {
            shared.flows().remove(&id);
            return; // `client` is dropped: closed.
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (up_tx, up_rx) = mpsc::channel(QUEUE_CHUNKS);
    let (down_tx, down_rx) = mpsc::channel(QUEUE_CHUNKS);
    let up_read = tokio::spawn(read_side(client_read, up_tx, ctl.clone()));
    let up_write = tokio::spawn(write_side(server_write, up_rx, ctl.clone(), shared.clone()));
    let down_read = tokio::spawn(read_side(server_read, down_tx, ctl.clone()));
    let down_write = tokio::spawn(write_side(
        client_write,
        down_rx,
        ctl.clone(),
        shared.clone(),
    ));
    let (up_read, up_write, down_read, down_write) =
        tokio::join!(up_read, up_write, down_read, down_write);

    if *ctl.reset.borrow() {
        // Put each socket back together to set SO_LINGER 0: closing it then sends an RST.
        for (read, write) in [(up_read, down_write), (down_read, up_write)] {
            if let (Ok(read), Ok(write)) = (read, write)
                && let Ok(stream) = read.reunite(write)
            {
                // Linger 0 aborts the connection on close: it cannot block the thread.
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                drop(stream);
            }
        }
    }
    shared.flows().remove(&id);
}

/// Resolves once the flow is to be cut.
async fn cut(reset: &mut watch::Receiver<bool>) {
    // The sender lives in the flow's controls, which outlive this task; if it were gone,
    // cutting is the right outcome anyway.
    let _ = reset.wait_for(|cut| *cut).await;
}

/// Reads one side and queues what it read, or discards it while blackholed. Returns its half
/// for the flow to close.
async fn read_side(
    mut source: OwnedReadHalf,
    queue: mpsc::Sender<Chunk>,
    ctl: Arc<FlowCtl>,
) -> OwnedReadHalf {
    let mut reset = ctl.reset.subscribe();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = tokio::select! {
            biased;
            () = cut(&mut reset) => return source,
            read = source.read(&mut buf) => read,
        };
        let chunk = match read {
            // EOF, or the peer reset: end this direction like a FIN.
            Ok(0) | Err(_) => Chunk::Eof,
            Ok(n) => Chunk::Data(buf[..n].to_vec(), Instant::now()),
        };
        let eof = matches!(chunk, Chunk::Eof);
        if !ctl.blackholed.load(Ordering::Relaxed) {
            let sent = tokio::select! {
                biased;
                () = cut(&mut reset) => return source,
                sent = queue.send(chunk) => sent.is_ok(),
            };
            if !sent {
                // The writer stopped (its destination failed): nothing more to forward.
                return source;
            }
        }
        if eof {
            // Keep the half open until the flow ends; a blackholed flow forwards no FIN.
            cut(&mut reset).await;
            return source;
        }
    }
}

/// Writes what the reader queued, each chunk when it is due, coalescing chunks due together.
/// Returns its half for the flow to close.
async fn write_side(
    mut dest: OwnedWriteHalf,
    mut queue: mpsc::Receiver<Chunk>,
    ctl: Arc<FlowCtl>,
    shared: Arc<Shared>,
) -> OwnedWriteHalf {
    let mut reset = ctl.reset.subscribe();
    let mut pending: Option<Chunk> = None;
    loop {
        let chunk = match pending.take() {
            Some(chunk) => chunk,
            None => tokio::select! {
                biased;
                () = cut(&mut reset) => return dest,
                chunk = queue.recv() => match chunk {
                    Some(chunk) => chunk,
                    None => {
                        cut(&mut reset).await;
                        return dest;
                    }
                },
            },
        };
        if ctl.blackholed.load(Ordering::Relaxed) {
            continue;
        }
        let (mut out, read_at) = match chunk {
            Chunk::Eof => {
                let _ = dest.shutdown().await;
                cut(&mut reset).await;
                return dest;
            }
            Chunk::Data(bytes, read_at) => (bytes, read_at),
        };
        let due = shared.due(read_at);
        if due > Instant::now() {
            tokio::select! {
                biased;
                () = cut(&mut reset) => return dest,
                () = tokio::time::sleep_until(due) => {}
            }
        }
        // Everything else already due goes out in the same write (one burst).
        while out.len() < MAX_WRITE {
            match queue.try_recv() {
                Ok(Chunk::Data(bytes, at)) if shared.due(at) <= Instant::now() => {
                    out.extend_from_slice(&bytes);
                }
                Ok(other) => {
                    pending = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        if ctl.blackholed.load(Ordering::Relaxed) {
            continue;
        }
        let written = tokio::select! {
            biased;
            () = cut(&mut reset) => return dest,
            written = dest.write_all(&out) => written,
        };
        if written.is_err() {
            cut(&mut reset).await;
            return dest;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Instant;

    use super::*;
    use crate::RedisServer;

    async fn connect(url: &str, timeout: Duration) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap()
    }

    async fn ping(con: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<String> {
        redis::cmd("PING").query_async(con).await
    }

    async fn clients_of(server: &RedisServer) -> usize {
        let mut raw = server.raw().await;
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut raw)
            .await
            .unwrap();
        // Not counting the connection asking.
        list.lines().count() - 1
    }

    /// The server's client count once it equals `want`, or what it is after a second. The
    /// harness's own short connections (the readiness `PING`, an earlier `clients_of`) are
    /// closed before the test goes on, but Redis may not have handled their close yet.
    async fn clients_settled_at(server: &RedisServer, want: usize) -> usize {
        let mut seen = clients_of(server).await;
        for _ in 0..50 {
            if seen == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            seen = clients_of(server).await;
        }
        seen
    }

    #[tokio::test]
    async fn forwards_both_ways() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
        let mut con = connect(&proxy.url(), Duration::from_secs(2)).await;
        let big = "x".repeat(200_000);
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg(&big)
            .query_async(&mut con)
            .await
            .unwrap();
        let got: String = redis::cmd("GET")
            .arg("k")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(got, big);
        assert_eq!(proxy.connections(), 1);
        assert_eq!(proxy.open_flows(), 1);

        // Batching and delay still forward everything, in order.
        proxy.set_delay(Duration::from_millis(2));
        proxy.set_batching(Some(Duration::from_millis(3)));
        let mut pipe = redis::pipe();
        for i in 0..100 {
            pipe.cmd("INCR").arg("n").ignore();
            if i % 10 == 0 {
                pipe.cmd("GET").arg("n");
            }
        }
        let seen: Vec<u64> = pipe.query_async(&mut con).await.unwrap();
        assert_eq!(seen, (0..10).map(|i| i * 10 + 1).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn blackhole_silences_open_flows_only_and_closes_nothing() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let mut old = connect(&proxy.url(), Duration::from_millis(300)).await;
        assert_eq!(ping(&mut old).await.unwrap(), "PONG");
        assert_eq!(clients_settled_at(&server, 1).await, 1);

        proxy.blackhole_existing();
        let err = ping(&mut old).await.unwrap_err();
        assert!(err.is_timeout(), "expected a timeout, got {err:?}");

        let mut new = connect(&proxy.url(), Duration::from_millis(300)).await;
        assert_eq!(ping(&mut new).await.unwrap(), "PONG");

        // The client gives up on the old flow: its FIN is not forwarded, so Redis still
        // sees it (a flow the network forgot, not one that was closed).
        drop(old);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(clients_settled_at(&server, 2).await, 2);
        assert_eq!(proxy.connections(), 2);
    }

    #[tokio::test]
    async fn delay_holds_each_direction() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let mut con = connect(&proxy.url(), Duration::from_secs(5)).await;
        assert_eq!(ping(&mut con).await.unwrap(), "PONG");

        proxy.set_delay(Duration::from_millis(150));
        let started = Instant::now();
        assert_eq!(ping(&mut con).await.unwrap(), "PONG");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300),
            "round trip took {took:?}"
        );

        proxy.set_delay(Duration::ZERO);
        proxy.set_batching(Some(Duration::from_millis(100)));
        // The request waits for a tick, and the reply for the next one.
        let started = Instant::now();
        assert_eq!(ping(&mut con).await.unwrap(), "PONG");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(90),
            "round trip took {took:?}"
        );
    }

    #[tokio::test]
    async fn reset_cuts_open_flows_at_once() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let mut con = connect(&proxy.url(), Duration::from_secs(5)).await;
        assert_eq!(ping(&mut con).await.unwrap(), "PONG");
        proxy.blackhole_existing();
        proxy.reset_all();
        // An error well before the 5 s response timeout: the flow was cut, not silenced.
        let started = Instant::now();
        let err = ping(&mut con).await.unwrap_err();
        assert!(
            !err.is_timeout(),
            "expected a connection error, got {err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(4));
        for _ in 0..50 {
            if proxy.open_flows() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(proxy.open_flows(), 0);
        assert_eq!(
            clients_settled_at(&server, 0).await,
            0,
            "Redis still has the cut flow"
        );

        let mut new = connect(&proxy.url(), Duration::from_secs(2)).await;
        assert_eq!(ping(&mut new).await.unwrap(), "PONG");
    }
}
