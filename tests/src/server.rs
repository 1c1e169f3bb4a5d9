//! [`RedisServer`]: one throw-away `redis-server` process on a free loopback port, with the
//! faults a test injects into it (pause, kill, restart) and the command counters it reads.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::IntoConnectionInfo as _;

use crate::binaries::{SERVER_SETTING, binaries};
use crate::resp::{Reply, resp_call};
use crate::stats::{Counts, info_field, parse_counts};

/// How long [`RedisServer::start`] and [`RedisServer::restart`] wait for the server to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of each harness-internal request (PING, INFO, CONFIG).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);
/// How many fresh ports [`RedisServer::start`] tries before giving up.
const PORT_ATTEMPTS: usize = 10;
/// Response and connect timeout of [`RedisServer::raw`] connections.
const RAW_TIMEOUT: Duration = Duration::from_secs(2);

/// Why `binary` could not be run: not installed, or not where the setting said.
fn not_found(binary: &Path) -> String {
    format!(
        "{} not found ({SERVER_SETTING}: {}); install it with `apt-get install -y \
         redis-server` (Debian/Ubuntu) or `brew install redis`",
        binary.display(),
        binaries().origin
    )
}

/// A `redis-server` child process owned by a test.
///
/// All methods take `&self`, so one server can be shared by several tasks of a test (for example
/// one task holds a lock while another pauses the server). Dropping the value resumes the process
/// if it was paused, kills it, reaps it and removes its working directory.
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    state: Mutex<State>,
}

struct State {
    child: Option<Child>,
    paused: bool,
    /// Commands the harness itself sent since the server's statistics were last reset.
    own: Counts,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock_state();
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &state.child.as_ref().map(Child::id))
            .field("paused", &state.paused)
            .field("dir", &self.dir)
            .finish()
    }
}

/// A server's make and version, as `INFO server` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `valkey` or `redis`.
    pub server: String,
    /// Its own version (`valkey_version` on Valkey), as `(major, minor, patch)`.
    pub version: (u32, u32, u32),
}

impl ServerVersion {
    fn from_info(info: &str) -> Self {
        let parse = |v: &str| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            let mut next = || parts.next().unwrap_or(0);
            (next(), next(), next())
        };
        match info_field(info, "valkey_version") {
            Some(v) => Self {
                server: "valkey".to_owned(),
                version: parse(v),
            },
            None => Self {
                server: "redis".to_owned(),
                version: parse(info_field(info, "redis_version").unwrap_or("0")),
            },
        }
    }

    /// Whether this is Redis `major.minor` or later, or any Valkey (which forked from 7.2).
    pub fn redis_at_least(&self, major: u32, minor: u32) -> bool {
        self.server == "valkey" || (self.version.0, self.version.1) >= (major, minor)
    }

    /// Sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`, `PUBSUB SHARDCHANNELS`): Redis 7.0.
    pub fn has_sharded_pubsub(&self) -> bool {
        self.redis_at_least(7, 0)
    }

    /// `SET … NX … GET` in one command: Redis 7.0.
    pub fn has_set_nx_get(&self) -> bool {
        self.redis_at_least(7, 0)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor, patch) = self.version;
        write!(f, "{} {major}.{minor}.{patch}", self.server)
    }
}

/// Why one launch attempt failed.
enum LaunchError {
    /// The binary does not exist.
    NotFound,
    /// The process exited or never answered; carries a description and the log tail.
    Failed(String),
}

impl RedisServer {
    /// Starts a `redis-server` on a free loopback port and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not on `PATH` (the message names the install command), or when no
    /// server answered after several ports were tried.
    pub fn start() -> RedisServer {
        Self::start_with_args(&[])
    }

    /// Like [`start`](Self::start), with extra command-line configuration appended after the
    /// harness' own (for example `&["--maxmemory", "10mb"]`); later options win in Redis.
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        Self::launch(&binaries().server, args)
    }

    /// Starts `n` independent servers (for Redlock-style tests), each on its own port.
    pub fn start_many(n: usize) -> Vec<RedisServer> {
        (0..n).map(|_| Self::start()).collect()
    }

    /// Starts a `redis-server` as [`start`](Self::start) does, but says why it could not
    /// instead of panicking: for programs that fall back to something else, such as the
    /// examples, which run on the in-memory backend when `redis-server` is not installed.
    pub fn try_start() -> Result<RedisServer, String> {
        Self::try_launch(&binaries().server, &[])
    }

    fn launch(binary: &Path, args: &[&str]) -> RedisServer {
        Self::try_launch(binary, args).unwrap_or_else(|why| panic!("{why}"))
    }

    fn try_launch(binary: &Path, args: &[&str]) -> Result<RedisServer, String> {
        let extra_args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let mut failures = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let dir = unique_dir(port);
            let server = RedisServer {
                binary: binary.to_owned(),
                port,
                dir,
                extra_args: extra_args.clone(),
                state: Mutex::new(State {
                    child: None,
                    paused: false,
                    own: Counts::default(),
                }),
            };
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(LaunchError::NotFound) => return Err(not_found(binary)),
                // Most likely another process took the port between our probe and the bind;
                // dropping `server` cleans up, then try a different port.
                Err(LaunchError::Failed(why)) => failures.push(format!("port {port}: {why}")),
            }
        }
        Err(format!(
            "redis-server did not start after {PORT_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        ))
    }

    /// The TCP port the server listens on (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's working directory (holds `redis.log`); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id of the running server, `None` after [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.lock_state().child.as_ref().map(Child::id)
    }

    /// Freezes the server with SIGSTOP: connections are still accepted by the kernel, but no
    /// command gets an answer until [`resume`](Self::resume). This is how a test simulates a
    /// stalled server or a network partition.
    ///
    /// # Panics
    ///
    /// When the server is not running.
    pub fn pause(&self) {
        let mut state = self.lock_state();
        let pid = state
            .child
            .as_ref()
            .map(Child::id)
            .expect("pause: server is not running");
        send_signal("STOP", pid);
        state.paused = true;
    }

    /// Continues a server frozen by [`pause`](Self::pause) (SIGCONT). A no-op when not paused.
    pub fn resume(&self) {
        let mut state = self.lock_state();
        if let (true, Some(child)) = (state.paused, state.child.as_ref()) {
            send_signal("CONT", child.id());
        }
        state.paused = false;
    }

    /// Kills the server with SIGKILL and reaps it. All data is lost (there is no persistence);
    /// new connections are refused until [`restart`](Self::restart). A no-op when not running.
    pub fn kill(&self) {
        let mut state = self.lock_state();
        if let Some(mut child) = state.child.take() {
            // SIGKILL also ends a stopped process; no SIGCONT needed.
            let _ = child.kill();
            let _ = child.wait();
        }
        state.paused = false;
    }

    /// Starts the server again on the same port with the same configuration and an empty data
    /// set, waiting until it answers. A running server is killed first.
    ///
    /// # Panics
    ///
    /// When the port cannot be bound again within a few seconds.
    pub fn restart(&self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT * 2;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(LaunchError::NotFound) => panic!("{}", not_found(&self.binary)),
                Err(LaunchError::Failed(why)) => {
                    if Instant::now() >= deadline {
                        panic!("redis-server did not restart on port {}: {why}", self.port);
                    }
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Calls per command since the server started or since [`reset_stats`](Self::reset_stats),
    /// from `INFO commandstats`, for example `{"evalsha": 3, "set": 1}`.
    ///
    /// Commands sent by the harness itself (readiness `PING`s, these `INFO` calls,
    /// `CONFIG RESETSTAT`) are subtracted, so the numbers are exactly what clients sent.
    /// Connections opened with [`raw`](Self::raw) send no handshake commands; an rlock client
    /// or any other redis-rs connection may send `client|setinfo` when it connects.
    ///
    /// This is blocking I/O with a short timeout; it is fine to call from async tests.
    ///
    /// # Panics
    ///
    /// When the server does not answer (for example while it is paused).
    pub fn command_stats(&self) -> BTreeMap<String, u64> {
        self.counts().by_command
    }

    /// `total_commands_processed` from `INFO stats`, minus the harness' own commands
    /// (see [`command_stats`](Self::command_stats)).
    pub fn total_commands_processed(&self) -> u64 {
        self.counts().total
    }

    /// Both counters from one `INFO all` call, minus the harness' own commands. (`INFO stats
    /// commandstats`, two sections in one call, is a syntax error before Redis 7.0.)
    pub fn counts(&self) -> Counts {
        // Taken before the INFO call, which is not part of its own output.
        let own = self.lock_state().own.clone();
        let info = self.admin_expect(&["INFO", "all"], "info");
        parse_counts(&info).minus(&own)
    }

    /// Zeroes the server's statistics (`CONFIG RESETSTAT`).
    pub fn reset_stats(&self) {
        let reply = self.admin(&["CONFIG", "RESETSTAT"], "config|resetstat");
        match reply {
            Ok(Reply::Simple(_)) => {
                // RESETSTAT counts itself after the reset.
                let mut own = Counts::default();
                own.add("config|resetstat", 1);
                self.lock_state().own = own;
            }
            other => panic!("CONFIG RESETSTAT on port {} failed: {other:?}", self.port),
        }
    }

    /// Runs `fut` and returns its output with the commands the server processed meanwhile.
    ///
    /// The harness' own `INFO` calls are not included. Everything else the server processed in
    /// that window is: commands from other tasks, background renewals, and the `client|setinfo`
    /// handshake of connections opened inside `fut`. Open connections before the window if the
    /// count must be exact.
    pub async fn commands_during<F: Future>(&self, fut: F) -> (F::Output, Counts) {
        let before = self.counts();
        let out = fut.await;
        let after = self.counts();
        (out, after.minus(&before))
    }

    /// Creates the ACL user `name` (password `pw`) with every command and key but no pub/sub
    /// channel, and returns its URL: a client that cannot hear release announcements.
    ///
    /// # Panics
    ///
    /// When the server refuses the user.
    pub async fn user_without_channel_rights(&self, name: &str) -> String {
        self.acl_user(name, &["~*", "+@all", "resetchannels"]).await
    }

    /// Creates (or resets) the ACL user `name` with password `pw` and the given rules
    /// (`"~*"`, `"+get"`, `"&rlock:*"`, …), and returns its URL.
    ///
    /// # Panics
    ///
    /// When the server refuses a rule.
    pub async fn acl_user(&self, name: &str, rules: &[&str]) -> String {
        let mut raw = self.raw().await;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", name, "reset", "on", ">pw"][..])
            .arg(rules)
            .query_async(&mut raw)
            .await
            .unwrap_or_else(|e| panic!("ACL SETUSER {name} {rules:?}: {e}"));
        format!("redis://{name}:pw@127.0.0.1:{}/", self.port)
    }

    /// Creates (or resets) the ACL user `name` (password `pw`) with the rules of the README's
    /// least-privilege `ACL SETUSER rlock …` line, then `more` (later rules win), and returns
    /// its URL: a user allowed only what rlock documents that it needs.
    ///
    /// # Panics
    ///
    /// When the README has no such line, or the server refuses a rule.
    pub async fn documented_user(&self, name: &str, more: &[&str]) -> String {
        let readme = include_str!("../../README.md");
        let line = readme
            .lines()
            .find(|l| l.starts_with("ACL SETUSER rlock "))
            .expect("the README shows the ACL line");
        let rules: Vec<&str> = line
            .split_whitespace()
            .skip(3)
            .filter(|rule| *rule != "on" && !rule.starts_with('>'))
            .chain(more.iter().copied())
            .collect();
        self.acl_user(name, &rules).await
    }

    /// A fresh multiplexed connection for poking keys directly (`GET`, `PTTL`, `SET`, `DEL`),
    /// with a 2 s connect and response timeout and no `CLIENT SETINFO` handshake.
    ///
    /// # Panics
    ///
    /// When the server does not accept the connection.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        self.raw_with_timeout(RAW_TIMEOUT).await
    }

    /// Like [`raw`](Self::raw) with a custom connect and response timeout (use a short one when
    /// the server is about to be paused).
    pub async fn raw_with_timeout(&self, timeout: Duration) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        self.redis_client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap_or_else(|e| panic!("raw connection to {} failed: {e}", self.url()))
    }

    /// Which server this is, from `INFO server`: Redis or Valkey, and its version.
    ///
    /// # Panics
    ///
    /// When the server does not answer.
    pub fn version(&self) -> ServerVersion {
        let info = self.admin_expect(&["INFO", "server"], "info");
        ServerVersion::from_info(&info)
    }

    /// The pub/sub channels matching `pattern` that some client listens on: `PUBSUB
    /// CHANNELS`, or `PUBSUB SHARDCHANNELS` with `sharded` (Redis Cluster). An rlock client
    /// waiting for `key` listens on `rlock:released:<key>:<client>` (on a cluster, with the
    /// key's hash tag before it), so `rlock:released:<key>:*` counts the waiting clients.
    ///
    /// # Panics
    ///
    /// When the server does not answer.
    pub async fn channels(&self, pattern: &str, sharded: bool) -> Vec<String> {
        let mut raw = self.raw().await;
        redis::cmd("PUBSUB")
            .arg(if sharded { "SHARDCHANNELS" } else { "CHANNELS" })
            .arg(pattern)
            .query_async(&mut raw)
            .await
            .unwrap_or_else(|e| panic!("PUBSUB on {}: {e}", self.url()))
    }

    /// Waits (at most 20 s) until this replica's link to its master is up.
    ///
    /// # Panics
    ///
    /// When it never is, or the server does not answer.
    pub async fn wait_linked(&self) {
        let mut raw = self.raw().await;
        let mut info = String::new();
        for _ in 0..200 {
            info = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut raw)
                .await
                .unwrap_or_else(|e| panic!("INFO on {}: {e}", self.url()));
            if info.contains("master_link_status:up") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the replica on {} did not sync: {info}", self.url());
    }

    /// A `redis::Client` for this server that sends no `CLIENT SETINFO` on connect.
    pub fn redis_client(&self) -> redis::Client {
        let info = self
            .url()
            .into_connection_info()
            .expect("harness URL is valid");
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        redis::Client::open(info.set_redis_settings(settings)).expect("harness URL is valid")
    }

    /// The last lines of the server's log file, for failure messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.join("redis.log"))
    }

    // ----- internals -----

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not turn the cleanup in `Drop` into a second panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns the process on `self.port` and waits until it answers as itself.
    fn spawn_and_wait(&self) -> Result<(), LaunchError> {
        fs::create_dir_all(&self.dir).map_err(|e| {
            LaunchError::Failed(format!("cannot create {}: {e}", self.dir.display()))
        })?;
        let log = self.dir.join("redis.log");
        let _ = fs::remove_file(&log);
        let port = self.port.to_string();
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(LaunchError::NotFound),
            Err(e) => {
                return Err(LaunchError::Failed(format!(
                    "cannot run {}: {e}",
                    self.binary.display()
                )));
            }
        };
        let pid = child.id();
        {
            let mut state = self.lock_state();
            state.child = Some(child);
            state.paused = false;
            state.own = Counts::default();
        }
        let result = self.wait_ready(pid);
        if let Err(LaunchError::Failed(why)) = &result {
            let tail = self.log_tail();
            self.kill();
            return Err(LaunchError::Failed(format!("{why}\nlog:\n{tail}")));
        }
        result
    }

    fn wait_ready(&self, pid: u32) -> Result<(), LaunchError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last_error = String::from("no answer");
        while Instant::now() < deadline {
            {
                let mut state = self.lock_state();
                let exited = match state.child.as_mut() {
                    Some(child) => child.try_wait().ok().flatten(),
                    None => return Err(LaunchError::Failed("killed while starting".into())),
                };
                if let Some(status) = exited {
                    state.child = None;
                    return Err(LaunchError::Failed(format!("exited early with {status}")));
                }
            }
            match self.admin(&["PING"], "ping") {
                Ok(Reply::Simple(s)) if s == "PONG" => {
                    // Make sure the answer came from our process, not from a stranger that owns
                    // the port while ours is failing to bind.
                    let info = self
                        .admin(&["INFO", "server"], "info")
                        .map_err(|e| LaunchError::Failed(format!("INFO server: {e}")))?;
                    let Reply::Bulk(info) = info else {
                        return Err(LaunchError::Failed(format!("INFO server: {info:?}")));
                    };
                    let info = String::from_utf8_lossy(&info);
                    let theirs = info_field(&info, "process_id");
                    if theirs == Some(pid.to_string().as_str()) {
                        return Ok(());
                    }
                    return Err(LaunchError::Failed(format!(
                        "port answered by another process ({theirs:?}, ours is {pid})"
                    )));
                }
                Ok(other) => last_error = format!("PING answered {other:?}"),
                Err(e) => last_error = e.to_string(),
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(LaunchError::Failed(format!(
            "no PONG within {READY_TIMEOUT:?} (last error: {last_error})"
        )))
    }

    /// Sends one command on a fresh raw connection (no handshake, so it is the only command the
    /// server sees from us) and records it as harness traffic when the server ran it.
    fn admin(&self, args: &[&str], stat_name: &str) -> io::Result<Reply> {
        let reply = resp_call(self.port, args, ADMIN_TIMEOUT)?;
        if !matches!(reply, Reply::Error(_)) {
            self.lock_state().own.add(stat_name, 1);
        }
        Ok(reply)
    }

    fn admin_expect(&self, args: &[&str], stat_name: &str) -> String {
        match self.admin(args, stat_name) {
            Ok(Reply::Bulk(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            other => panic!(
                "{} on port {} failed (is the server paused or killed?): {other:?}",
                args.join(" "),
                self.port
            ),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Asks the kernel for a free loopback port. The port is released again before Redis binds it,
/// so a concurrent process may take it; [`RedisServer::start`] retries in that case.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

fn unique_dir(port: u16) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "rlock-redis-{}-{port}-{n}-{nanos}",
        std::process::id()
    ))
}

fn send_signal(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("cannot run `kill -{signal} {pid}`: {e}"));
    assert!(status.success(), "`kill -{signal} {pid}` failed: {status}");
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn starts_and_answers_ping() {
        let server = RedisServer::start();
        assert_eq!(
            server.url(),
            format!("redis://127.0.0.1:{}/", server.port())
        );
        let mut con = server.raw().await;
        let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
        assert_eq!(pong, "PONG");
        let version = server.version();
        assert!(version.version.0 >= 6, "{version}");

        let other = RedisServer::start();
        assert_ne!(other.port(), server.port());
    }

    #[tokio::test]
    async fn extra_args_are_applied() {
        let server = RedisServer::start_with_args(&["--maxmemory", "12mb"]);
        let mut con = server.raw().await;
        let v: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(v, ["maxmemory", &(12 * 1024 * 1024).to_string()]);
    }

    #[tokio::test]
    async fn pause_times_out_and_resume_recovers() {
        let server = RedisServer::start();
        let mut con = server.raw_with_timeout(Duration::from_millis(200)).await;
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut con)
            .await
            .unwrap();

        server.pause();
        let res = tokio::time::timeout(
            Duration::from_secs(5),
            redis::cmd("GET")
                .arg("k")
                .query_async::<Option<String>>(&mut con),
        )
        .await
        .expect("the client's own response timeout must fire first");
        let err = res.expect_err("a paused server must not answer");
        assert!(err.is_timeout(), "expected a timeout, got {err:?}");

        server.resume();
        let v: Option<String> = redis::cmd("GET")
            .arg("k")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(v.as_deref(), Some("v"));
        let v: Option<String> = redis::cmd("GET")
            .arg("k")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(v.as_deref(), Some("v"));
    }

    #[tokio::test]
    async fn kill_then_restart_on_the_same_port() {
        let server = RedisServer::start();
        let port = server.port();
        let first_pid = server.pid().unwrap();
        let mut con = server.raw().await;
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut con)
            .await
            .unwrap();

        server.kill();
        assert_eq!(server.pid(), None);
        let refused = tokio::time::timeout(
            Duration::from_secs(5),
            server
                .redis_client()
                .get_multiplexed_async_connection_with_config(
                    &redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(Duration::from_millis(500))),
                ),
        )
        .await
        .unwrap();
        assert!(refused.is_err(), "a killed server must refuse connections");

        server.restart();
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), Some(first_pid));
        let mut con = server.raw().await;
        let v: Option<String> = redis::cmd("GET")
            .arg("k")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(v, None, "no persistence: the restarted server is empty");

        // Restarting a running server works too.
        server.restart();
        let mut con = server.raw().await;
        let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
        assert_eq!(pong, "PONG");
    }

    #[tokio::test]
    async fn command_stats_count_exactly_what_clients_sent() {
        let server = RedisServer::start();
        // Readiness probes and INFO calls of the harness are not counted.
        assert_eq!(server.command_stats(), BTreeMap::new());
        assert_eq!(server.total_commands_processed(), 0);

        let mut con = server.raw().await;
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("1")
            .query_async(&mut con)
            .await
            .unwrap();
        let stats = server.command_stats();
        assert_eq!(stats.get("set"), Some(&1), "{stats:?}");
        assert_eq!(stats.len(), 1, "{stats:?}");
        assert_eq!(server.total_commands_processed(), 1);

        server.reset_stats();
        assert_eq!(server.command_stats(), BTreeMap::new());
        assert_eq!(server.total_commands_processed(), 0);

        let (v, delta) = server
            .commands_during(async {
                let _: () = redis::cmd("SET")
                    .arg("k")
                    .arg("2")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                redis::cmd("GET")
                    .arg("k")
                    .query_async::<String>(&mut con)
                    .await
                    .unwrap()
            })
            .await;
        assert_eq!(v, "2");
        assert_eq!(delta.calls("set"), 1);
        assert_eq!(delta.calls("get"), 1);
        assert_eq!(delta.total, 2, "{delta:?}");
        assert_eq!(server.command_stats().get("set"), Some(&1));
    }

    #[test]
    #[should_panic(expected = "/nonexistent/redis-server not found (RLOCK_TEST_SERVER: ")]
    fn missing_binary_fails_loudly() {
        let _ = RedisServer::launch(Path::new("/nonexistent/redis-server"), &[]);
    }

    #[test]
    fn a_missing_binary_is_an_error_for_programs_that_fall_back() {
        let why = RedisServer::try_launch(Path::new("/nonexistent/redis-server"), &[])
            .expect_err("no such binary");
        assert!(
            why.starts_with("/nonexistent/redis-server not found (RLOCK_TEST_SERVER: "),
            "{why}"
        );
    }

    #[test]
    fn drop_kills_the_process() {
        let server = RedisServer::start();
        let port = server.port();
        let dir = server.dir().to_owned();
        server.pause();
        drop(server);
        assert!(resp_call(port, &["PING"], Duration::from_millis(300)).is_err());
        assert!(!dir.exists());
    }
}
