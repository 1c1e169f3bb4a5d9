//! Waiters' check ins, counted on Redis's side.
//!
//! A queued waiter's check in runs the acquire script, which looks for the waiter's entry with
//! `LPOS` exactly once when it finds the lock busy (`rlock-runtime/scripts/acquire.lua`; a
//! check in that takes the lock or finds it handed over does not get that far, and a
//! newcomer's first call does not look). The entry is `"<owner token> <lease> <fenced>"`, and
//! an owner token is `<client id>:<n>`: so the `LPOS` calls a `MONITOR` connection sees
//! (a script's commands show as `[<db> lua]` lines) tell whose check in it was, and on which
//! lock. [`CheckInCounter`] keeps one such connection per server, reconnecting whenever the
//! server goes away (killed, restarted, failed over), and counts per client and lock key.
//!
//! ```no_run
//! use rlock_tests::RedisServer;
//! use rlock_tests::checkins::CheckInCounter;
//!
//! let server = RedisServer::start();
//! let counter = CheckInCounter::start(&[server.port()]);
//! // ... waiters queue and check in ...
//! for ((client, key), n) in counter.finish() {
//!     println!("{client} checked in {n} times on {key}");
//! }
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Check ins per (client id, lock key).
pub type Counts = BTreeMap<(String, String), u64>;

/// How long a read waits before looking whether to stop.
const READ_TIMEOUT: Duration = Duration::from_millis(200);
/// Pause between attempts to reach a server that is away.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// One `MONITOR` connection per server, counting check ins until [`finish`](Self::finish).
#[derive(Debug)]
pub struct CheckInCounter {
    stop: Arc<AtomicBool>,
    watchers: Vec<JoinHandle<Counts>>,
}

impl CheckInCounter {
    /// Watches the servers on these loopback ports.
    pub fn start(ports: &[u16]) -> CheckInCounter {
        let stop = Arc::new(AtomicBool::new(false));
        let watchers = ports
            .iter()
            .map(|&port| {
                let stop = stop.clone();
                thread::spawn(move || watch(port, &stop))
            })
            .collect();
        CheckInCounter { stop, watchers }
    }

    /// Stops watching and sums the counts of every server.
    pub fn finish(self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = Counts::new();
        for watcher in self.watchers {
            // A watcher does not panic (it only parses and counts); if it did, its counts are
            // lost and the rates shown low, never high.
            for (k, n) in watcher.join().unwrap_or_default() {
                *total.entry(k).or_default() += n;
            }
        }
        total
    }
}

fn watch(port: u16, stop: &AtomicBool) -> Counts {
    let mut counts = Counts::new();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            thread::sleep(RECONNECT_PAUSE);
            continue;
        };
        let ready = stream.set_read_timeout(Some(READ_TIMEOUT)).is_ok()
            && stream
                .set_write_timeout(Some(Duration::from_secs(1)))
                .is_ok()
            && (&stream).write_all(b"MONITOR\r\n").is_ok();
        if !ready {
            thread::sleep(RECONNECT_PAUSE);
            continue;
        }
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) if line.ends_with(b"\n") => {
                    if let Some(check_in) = parse_lpos(&line) {
                        *counts.entry(check_in).or_default() += 1;
                    }
                    line.clear();
                }
                // A timeout keeps what was read of the line; the rest follows.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => break,
            }
        }
    }
    counts
}

/// The (client id, lock key) of a `MONITOR` line that shows a script's `LPOS` of a waiter's
/// entry in a lock's queue (`{<key>}:waiters`, or `<key>::waiters` for a key with a `}`).
pub fn parse_lpos(line: &[u8]) -> Option<(String, String)> {
    let (from_script, args) = monitored(std::str::from_utf8(line).ok()?)?;
    if !from_script {
        return None;
    }
    let [command, queue, entry] = args.as_slice() else {
        return None;
    };
    if !command.eq_ignore_ascii_case("lpos") {
        return None;
    }
    let key = match queue.strip_suffix("}:waiters") {
        Some(tagged) => tagged.strip_prefix('{')?,
        None => queue.strip_suffix("::waiters")?,
    };
    let token = entry.split(' ').next()?;
    let (client, _) = token.split_once(':')?;
    Some((client.to_owned(), key.to_owned()))
}

/// The arguments of one `MONITOR` line (`+<time> [<db> <client>] "arg" "arg" …`), unescaped,
/// and whether a script ran the command (`lua` in place of the client).
pub fn monitored(line: &str) -> Option<(bool, Vec<String>)> {
    let (source, rest) = line.trim_end().strip_prefix('+')?.split_once("] ")?;
    Some((source.ends_with(" lua"), quoted(rest)))
}

/// The double-quoted arguments of a `MONITOR` line, unescaped (`\"`, `\\`; a `\x..` escape
/// is kept as its letters: rlock's keys and entries never need one).
fn quoted(rest: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        arg.push(escaped);
                    }
                }
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_scripts_lpos_of_a_queue_entry_is_a_check_in() {
        let line = b"+1795601168.443183 [0 lua] \"LPOS\" \"{soak:single:wait:0}:waiters\" \"9f3a:12 2000 1\"\r\n";
        assert_eq!(
            parse_lpos(line),
            Some(("9f3a".to_owned(), "soak:single:wait:0".to_owned()))
        );
        let odd = b"+1.0 [0 lua] \"lpos\" \"odd}key::waiters\" \"c:1 500 0\"\r\n";
        assert_eq!(
            parse_lpos(odd),
            Some(("c".to_owned(), "odd}key".to_owned()))
        );
    }

    #[test]
    fn other_lines_are_not() {
        for line in [
            &b"+OK\r\n"[..],
            b"+1.0 [0 127.0.0.1:5] \"LPOS\" \"{k}:waiters\" \"c:1 500 0\"\r\n",
            b"+1.0 [0 lua] \"RPUSH\" \"{k}:waiters\" \"c:1 500 0\"\r\n",
            b"+1.0 [0 lua] \"LPOS\" \"k\" \"c:1 500 0\"\r\n",
            b"+1.0 [0 127.0.0.1:5] \"eval\" \"redis.call('LPOS', KEYS[1])\" \"1\" \"{k}:waiters\"\r\n",
        ] {
            assert_eq!(parse_lpos(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn counts_what_a_server_runs() {
        let server = crate::RedisServer::start();
        let counter = CheckInCounter::start(&[server.port()]);
        let mut raw = server.redis_client().get_connection().unwrap();
        let _: i64 = redis::cmd("RPUSH")
            .arg("{k}:waiters")
            .arg("c:1 500 0")
            .query(&mut raw)
            .unwrap();
        // Until the MONITOR connection is in place (a client with the `O` flag).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut raw).unwrap();
            if clients.lines().any(|c| c.contains(" flags=O ")) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no MONITOR connection"
            );
            thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..3 {
            let _: Option<i64> = redis::cmd("EVAL")
                .arg("return redis.call('LPOS', KEYS[1], ARGV[1])")
                .arg(1)
                .arg("{k}:waiters")
                .arg("c:1 500 0")
                .query(&mut raw)
                .unwrap();
        }
        thread::sleep(Duration::from_millis(500));
        let counts = counter.finish();
        assert_eq!(counts[&("c".to_owned(), "k".to_owned())], 3);
    }
}
