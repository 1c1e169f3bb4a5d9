//! rlock's scripts keep Redis's scripting contract: every key a script touches is one it
//! declared (`KEYS`). Redis itself does not enforce it, but servers and proxies that route or
//! lock by declared keys do (Dragonfly by default, some proxies), and Redis Cluster can only
//! vouch for declared keys. A `MONITOR` connection sees every command a script runs, right
//! after the script's own call: the test runs every kind of lock operation and checks each
//! key-taking command against the keys its script declared.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::checkins::monitored;
use rlock_tests::locking::wait_then_release;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The commands scripts run that take a key, as their first argument.
const KEYED: &[&str] = &[
    "GET",
    "SET",
    "DEL",
    "EXISTS",
    "TYPE",
    "PTTL",
    "PEXPIRE",
    "PEXPIREAT",
    "LPOP",
    "LPUSH",
    "RPUSH",
    "RPOP",
    "LREM",
    "LPOS",
    "LLEN",
    "ZADD",
    "ZREM",
    "ZSCORE",
    "ZMSCORE",
    "ZCOUNT",
    "ZCARD",
    "ZRANGEBYSCORE",
    "ZREVRANGEBYSCORE",
    "ZREMRANGEBYSCORE",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_a_script_touches_is_declared() {
    let server = RedisServer::start();
    let mut monitor = TcpStream::connect(("127.0.0.1", server.port()))
        .await
        .unwrap();
    monitor.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = BufReader::new(monitor).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));
    let watching = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(Duration::from_secs(2), lines.next_line()).await
        {
            seen.push(line);
        }
        seen
    });

    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    for key in ["plain", "{tagged}:x", "odd}{key}"] {
        let key: &'static str = Box::leak(key.to_owned().into_boxed_str());
        // Fenced and not, a hand-off to a fenced and to a plain waiter, fair or not.
        let guard = a.lock(key).fenced().acquire().await.unwrap();
        let fenced_waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let guard = b
                    .lock(key)
                    .fenced()
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await?;
                guard.release().await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await.unwrap();
        fenced_waiter.await.unwrap().unwrap();
        let guard = a.lock(key).acquire().await.unwrap();
        let fair_waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let guard = b
                    .lock(key)
                    .fair()
                    .fenced()
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await?;
                guard.release().await
            })
        };
        let plain_waiter = wait_then_release(&b, key, Duration::from_secs(30));
        // A waiter that gives up leaves the queue (the withdraw script).
        let leaving = wait_then_release(&b, key, Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(leaving.await.unwrap().unwrap_err().is_busy());
        guard.extend(Duration::from_secs(20)).await.unwrap();
        let _ = a.inspect(key).await.unwrap();
        guard.release().await.unwrap();
        fair_waiter.await.unwrap().unwrap();
        plain_waiter.await.unwrap().unwrap();
        // Renewals, and an operator breaking the lock.
        let renewed = a
            .lock(key)
            .ttl(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(b.force_unlock(key).await.unwrap());
        drop(renewed);
        // A lock asked of a name another kind holds: refused after the script looked.
        let permit = a
            .semaphore(format!("{key}:s"), 1)
            .ttl(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        assert!(a.lock(format!("{key}:s")).acquire().await.is_err());
        // A permit and a read-write lock handed on, renewed, extended, inspected, broken.
        let permit_waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let permit = b
                    .semaphore(format!("{key}:s"), 1)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await?;
                permit.release().await
            })
        };
        let writer = a
            .write_lock(format!("{key}:rw"))
            .ttl(Duration::from_millis(300))
            .fenced()
            .acquire()
            .await
            .unwrap();
        let reader = {
            let b = b.clone();
            tokio::spawn(async move {
                let reader = b
                    .read_lock(format!("{key}:rw"))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await?;
                reader.release().await
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        permit.extend(Duration::from_secs(5)).await.unwrap();
        writer.extend(Duration::from_secs(5)).await.unwrap();
        let _ = a.inspect_semaphore(format!("{key}:s")).await.unwrap();
        let _ = a.inspect_read_write(format!("{key}:rw")).await.unwrap();
        permit.release().await.unwrap();
        writer.release().await.unwrap();
        permit_waiter.await.unwrap().unwrap();
        reader.await.unwrap().unwrap();
        let all = a
            .lock_all([format!("{key}:1"), format!("{key}:2")])
            .acquire()
            .await
            .unwrap();
        all.release().await.unwrap();
        let held = a.read_lock(format!("{key}:rw")).acquire().await.unwrap();
        assert_eq!(
            b.force_unlock_read_write(format!("{key}:rw"))
                .await
                .unwrap(),
            1
        );
        drop(held);
    }

    let seen = watching.await.unwrap();
    let mut declared: BTreeSet<String> = BTreeSet::new();
    let mut scripts = 0;
    let mut checked = 0;
    for line in &seen {
        let Some((from_script, args)) = monitored(line) else {
            continue;
        };
        let Some(command) = args.first() else {
            continue;
        };
        if !from_script {
            declared.clear();
            if command.eq_ignore_ascii_case("evalsha") || command.eq_ignore_ascii_case("eval") {
                scripts += 1;
                let count: usize = args[2].parse().unwrap();
                declared.extend(args[3..3 + count].iter().cloned());
            }
            continue;
        }
        if KEYED.iter().any(|k| command.eq_ignore_ascii_case(k)) {
            checked += 1;
            assert!(
                declared.contains(&args[1]),
                "a script touched `{}` ({command}), which it did not declare among {declared:?}",
                args[1]
            );
        }
    }
    eprintln!("{scripts} script calls, {checked} keyed commands inside them, all declared");
    assert!(
        scripts > 20 && checked > 50,
        "{scripts} scripts, {checked} commands"
    );
}
