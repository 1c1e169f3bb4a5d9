//! What a server runs, as a `MONITOR` connection sees it: the commands its clients send, in
//! the order the server runs them, each as its arguments.
//!
//! ```no_run
//! # async fn demo() {
//! use rlock_tests::RedisServer;
//! use rlock_tests::monitor::Monitor;
//!
//! let server = RedisServer::start();
//! let monitor = Monitor::start(&server).await;
//! // ... clients send commands ...
//! for args in monitor.finish(&server).await {
//!     println!("{}", args.join(" "));
//! }
//! # }
//! ```

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::RedisServer;
use crate::checkins::monitored;
use crate::locking::PATIENCE;

/// The `ECHO` that ends a recording: the server runs it after every command sent before.
const END: &str = "rlock-tests:monitor:end";

/// A `MONITOR` connection recording what clients send, until [`finish`](Self::finish).
#[derive(Debug)]
pub struct Monitor {
    recording: JoinHandle<Vec<Vec<String>>>,
}

impl Monitor {
    /// Starts recording on `server`: every command the server runs from the return on.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached, or does not confirm `MONITOR` within
    /// [`PATIENCE`].
    pub async fn start(server: &RedisServer) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port()))
            .await
            .expect("connect for MONITOR");
        stream
            .write_all(b"MONITOR\r\n")
            .await
            .expect("send MONITOR");
        let mut lines = BufReader::new(stream).lines();
        let confirmed = timeout(PATIENCE, lines.next_line()).await;
        assert!(
            matches!(&confirmed, Ok(Ok(Some(line))) if line == "+OK"),
            "MONITOR not confirmed: {confirmed:?}"
        );
        let recording = tokio::spawn(async move {
            let mut sent = Vec::new();
            while let Ok(Ok(Some(line))) = timeout(PATIENCE, lines.next_line()).await {
                match monitored(&line) {
                    Some((false, args)) if args.len() == 2 && args[1] == END => break,
                    Some((false, args)) => sent.push(args),
                    // What scripts run, and lines of no command.
                    Some((true, _)) | None => {}
                }
            }
            sent
        });
        Monitor { recording }
    }

    /// The commands clients sent since [`start`](Self::start), the first of each its name.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached to end the recording.
    pub async fn finish(self, server: &RedisServer) -> Vec<Vec<String>> {
        let mut raw = server.raw().await;
        let _: String = redis::cmd("ECHO")
            .arg(END)
            .query_async(&mut raw)
            .await
            .expect("ECHO the end of the recording");
        self.recording.await.expect("the recording task")
    }
}
