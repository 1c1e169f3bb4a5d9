//! Fencing in the database: a holder process stopped (SIGSTOP) past its lease wakes up,
//! writes with its old token, and PostgreSQL itself refuses the write (`UPDATE … WHERE fence
//! < $3` matches no row), so the newer holder's report stands.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rlock_examples::reports::{Reports, Write};
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::locking::PATIENCE;
use rlock_tests::postgres::PostgresServer;

/// The report both holders write.
const REPORT: u64 = 7;

/// A `fenced-writer` process, driven line by line; killed on drop.
struct Writer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Writer {
    fn start(redis: &str, database: &str) -> Self {
        let program = env!("CARGO_BIN_EXE_fenced-writer");
        let mut child = Command::new(program)
            .args(["--redis", redis, "--database", database])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_a_holder_stopped_past_its_lease_has_its_late_write_refused() {
    let (server, postgres) = (RedisServer::start(), PostgresServer::start());
    let reports = Reports::connect(&postgres.url()).await.unwrap();
    reports.reset(REPORT).await.unwrap();

    let mut stopped = Writer::start(&server.url(), &postgres.url());
    let first = stopped.line();
    let fence: u64 = first.strip_prefix("fence ").unwrap().parse().unwrap();
    assert_eq!(
        stopped.ask("write by the first holder, in its lease"),
        "accepted"
    );
    // Stopped whole, watchdog included: nobody renews its lease now.
    stopped.signal("-STOP");

    let client = LockClient::connect(&server.url()).await.unwrap();
    let newer = client
        .lock(format!("report:{REPORT}"))
        .fenced()
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    let token = newer.fence().unwrap().get();
    assert!(token > fence, "{token} after {fence}");
    assert_eq!(
        reports
            .write(REPORT, token, "by the newer holder")
            .await
            .unwrap(),
        Write::Accepted
    );

    // Woken while the newer holder still holds: it writes as if nothing happened.
    stopped.signal("-CONT");
    let late = tokio::task::spawn_blocking(move || {
        let late = stopped.ask("write by the stopped holder, after its lease");
        (late, stopped.ask("release"))
    })
    .await
    .unwrap();
    assert_eq!(late, (format!("refused {token}"), "lost".to_owned()));
    let report = reports.read(REPORT).await.unwrap().unwrap();
    assert_eq!(
        (report.body.as_str(), report.fence),
        ("by the newer holder", token)
    );
    newer.release().await.unwrap();
}
