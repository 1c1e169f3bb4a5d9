//! A `redis-server` started for one run of an example, when no Redis was named: on a free
//! loopback port, without persistence, stopped (and its directory removed) when dropped.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a fresh server may take to answer its first `PING`.
const READY_WITHIN: Duration = Duration::from_secs(5);

/// A `redis-server` child process.
#[derive(Debug)]
pub struct LocalRedis {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl LocalRedis {
    /// Starts one, or says why it could not (not installed, or it never answered).
    pub fn start() -> Result<LocalRedis, String> {
        // The kernel's choice of a free port; the server binds it a moment later.
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(format!("rlock-example-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err("redis-server not found on PATH; install it with \
                     `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis`"
                    .to_owned());
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("redis-server did not start: {e}"));
            }
        };
        // Dropped on every early return below: the child is killed and the directory removed.
        let mut server = LocalRedis { child, port, dir };
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if server.answers_ping() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server exited at start ({status})"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "redis-server on port {port} did not answer within {READY_WITHIN:?}"
        ))
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether it answers `PING` with `+PONG`.
    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_server_answers_and_leaves_nothing_behind() {
        let server = LocalRedis::start().expect("redis-server is installed for the tests");
        assert!(server.answers_ping());
        assert!(server.url().starts_with("redis://127.0.0.1:"));
        let dir = server.dir.clone();
        assert!(dir.exists());
        drop(server);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
