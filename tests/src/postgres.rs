//! A PostgreSQL server owned by a test: `initdb` into a directory of its own, `postgres` on
//! a free loopback port with trust authentication for the user `rlock`; dropped, it is shut
//! down (immediate mode: a test's data is not kept) and its directory removed.
//!
//! PostgreSQL refuses to run as root, so under root (a CI container) both programs run as
//! the `postgres` user that Debian's package creates, through `setpriv` (which executes the
//! program in place: the child is the server itself, and stopping it stops the server).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::server::free_port;

/// What to do when PostgreSQL is missing.
pub const INSTALL_POSTGRES: &str = "PostgreSQL's `initdb` and `postgres` were not found (in PATH \
     or /usr/lib/postgresql/<version>/bin): install them with `apt-get install -y postgresql` \
     (Debian/Ubuntu) or `brew install postgresql`";

/// The user the server is made with, as its superuser.
const USER: &str = "rlock";

/// How long the server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A `postgres` child process owned by a test.
pub struct PostgresServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl std::fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl PostgresServer {
    /// Makes and starts a server.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is not installed (the message names the install command), or the
    /// server does not start.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|why| panic!("{why}"))
    }

    /// Like [`start`](Self::start), saying why it could not instead of panicking.
    pub fn try_start() -> Result<Self, String> {
        let bin = binaries()?;
        let as_postgres = running_as_root()?;
        let port = free_port();
        let dir = unique_dir(port);
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if as_postgres {
            run(Command::new("chown").arg("postgres").arg(&dir))?;
        }
        let mut initdb = program(&bin.join("initdb"), as_postgres, &dir);
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", USER, "-E", "UTF8", "--no-sync"]);
        run(&mut initdb)?;

        let log = dir.join("server.log");
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let log_err = log_file.try_clone().map_err(|e| e.to_string())?;
        let mut postgres = program(&bin.join("postgres"), as_postgres, &dir);
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err);
        let child = postgres
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.join("postgres").display()))?;
        let server = Self { child, port, dir };
        server.wait_ready(&log)?;
        Ok(server)
    }

    /// Its URL, for the superuser on the `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits until the server's log says it accepts connections.
    fn wait_ready(&self, log: &Path) -> Result<(), String> {
        let started = Instant::now();
        let mut text = String::new();
        while started.elapsed() < READY_WITHIN {
            text.clear();
            if let Ok(mut file) = std::fs::File::open(log) {
                let _ = file.read_to_string(&mut text);
            }
            if text.contains("ready to accept connections") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "postgres on port {} was not ready within {READY_WITHIN:?}; its log:\n{text}",
            self.port
        ))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown, the server's children included.
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let stopping = Instant::now();
        while stopping.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory holding `initdb` and `postgres`: the one in PATH, else the newest of
/// Debian's `/usr/lib/postgresql/<version>/bin`.
fn binaries() -> Result<PathBuf, String> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| INSTALL_POSTGRES.to_owned())
}

/// Whether this process runs as root (the server must then run as `postgres`).
fn running_as_root() -> Result<bool, String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
        return Ok(line.split_whitespace().nth(1) == Some("0"));
    }
    let out = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("id -u: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `binary`, in `dir` (a directory the server's user can enter), run as `postgres` when
/// `as_postgres`.
fn program(binary: &Path, as_postgres: bool, dir: &Path) -> Command {
    let mut command = if as_postgres {
        let mut command = Command::new("setpriv");
        command
            .args([
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--init-groups",
                "--",
            ])
            .arg(binary);
        command
    } else {
        Command::new(binary)
    };
    command.current_dir(dir);
    command
}

/// Runs `command` to its end; its output is the error when it fails.
fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{command:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn unique_dir(port: u16) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "rlock-postgres-{}-{port}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}
