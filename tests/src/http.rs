//! One HTTP/1.1 exchange written by hand over a real TCP connection, for the tests of the
//! services that answer lock errors over HTTP (axum, actix-web): what the bytes on the wire
//! say, with no HTTP client's interpretation in between.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one exchange may take before the test fails: a service that never answers is a
/// failure, not a hang.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A service's answer.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The status line and headers, lower-cased, each line ending in `\r\n`.
    pub head: String,
    /// The body as sent (the requests ask for `Connection: close`, so it is read to the end).
    pub body: String,
}

impl Reply {
    /// Whether the head has the header `name: value` (both lower-case).
    pub fn has_header(&self, name: &str, value: &str) -> bool {
        self.head.contains(&format!("\r\n{name}: {value}\r\n"))
    }
}

/// Sends `method path` with `headers` and an empty body on its own connection, and reads the
/// whole reply.
///
/// # Panics
/// When the service does not answer within 30 s, or answers what is not HTTP/1.1.
pub async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let reply = tokio::time::timeout(EXCHANGE_TIMEOUT, async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    })
    .await
    .unwrap_or_else(|_| panic!("{method} {path}: no answer from {addr} in {EXCHANGE_TIMEOUT:?}"))
    .unwrap_or_else(|e| panic!("{method} {path} to {addr}: {e}"));
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: not an HTTP reply: {reply:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no status in {head:?}"));
    Reply {
        status,
        head: format!("{}\r\n", head.to_lowercase()),
        body: body.to_owned(),
    }
}
