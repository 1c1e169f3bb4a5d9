//! rlock's scripts keep Redis's scripting contract: every key a script touches is one it
//! declared (`KEYS`). Redis itself does not enforce it, but servers and proxies that route or
//! lock by declared keys do (Dragonfly by default, some proxies), and Redis Cluster can only
//! vouch for declared keys. A `MONITOR` connection sees every command a script runs, right
//! after the script's own call: the test runs every kind of lease's operations (and the
//! holder card's) and checks each key-taking command against the keys its script declared,
//! and that every command a script runs is known here as taking a key or not.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use rlock_runtime::LockClient;
use rlock_tests::RedisServer;
use rlock_tests::checkins::monitored;
use rlock_tests::locking::{PATIENCE, wait_then_release};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The lease of the holds that must be renewed while the test watches, and how long it
/// watches: several renewals (every ttl/3), with room for a late one on a busy machine.
const RENEWED_TTL: Duration = Duration::from_millis(1200);
const RENEWALS: Duration = Duration::from_millis(900);

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
    "LINDEX",
    "LRANGE",
    "LSET",
    "ZADD",
    "ZREM",
    "ZSCORE",
    "ZMSCORE",
    "ZCOUNT",
    "ZCARD",
    "ZRANGEBYSCORE",
    "ZREVRANGEBYSCORE",
    "ZREMRANGEBYSCORE",
    "HSET",
    "HDEL",
    "HLEN",
];

/// The commands scripts run that take no key.
const KEYLESS: &[&str] = &["TIME", "PUBLISH", "SPUBLISH", "PUBSUB"];

/// The holder card's fields that name its client (`@service`, `@host`, `@pid`).
const NAME_FIELDS: usize = 3;

/// The length of every holder card on `server` (a hash per client).
async fn card_lengths(raw: &mut redis::aio::MultiplexedConnection) -> Vec<usize> {
    let cards: Vec<String> = redis::cmd("KEYS")
        .arg("rlock:holder:*")
        .query_async(raw)
        .await
        .unwrap();
    let mut lengths = Vec::new();
    for card in cards {
        lengths.push(
            redis::cmd("HLEN")
                .arg(&card)
                .query_async(raw)
                .await
                .unwrap(),
        );
    }
    lengths
}

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
        let renewed = a.lock(key).ttl(RENEWED_TTL).acquire().await.unwrap();
        tokio::time::sleep(RENEWALS).await;
        assert!(b.force_unlock(key).await.unwrap());
        drop(renewed);
        // A lock asked of a name another kind holds: refused after the script looked.
        let permit = a
            .semaphore(format!("{key}:s"), 1)
            .ttl(RENEWED_TTL)
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
            .ttl(RENEWED_TTL)
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
        tokio::time::sleep(RENEWALS).await;
        permit.extend(Duration::from_secs(5)).await.unwrap();
        writer.extend(Duration::from_secs(5)).await.unwrap();
        let _ = a.inspect_semaphore(format!("{key}:s")).await.unwrap();
        let _ = a.inspect_read_write(format!("{key}:rw")).await.unwrap();
        // The permit's count raised at run time, which admits the waiter, then forgotten.
        assert_eq!(a.add_permits(format!("{key}:s"), 1).await.unwrap(), 2);
        a.clear_permits(format!("{key}:s")).await.unwrap();
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
        // The upgradeable reader, its upgrade waiting for a reader, and inspected.
        let upgradeable = a
            .upgradeable_read_lock(format!("{key}:rw"))
            .acquire()
            .await
            .unwrap();
        let reader = b.read_lock(format!("{key}:rw")).acquire().await.unwrap();
        let upgrade = async {
            let write = upgradeable.upgrade_within(Duration::from_secs(30)).await?;
            let _ = b.inspect_read_write(format!("{key}:rw")).await?;
            write.release().await
        };
        let (upgraded, released) = tokio::join!(upgrade, async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            reader.release().await
        });
        upgraded.unwrap();
        released.unwrap();
        upgradeable.release().await.unwrap();
        let held = a.read_lock(format!("{key}:rw")).acquire().await.unwrap();
        assert_eq!(
            b.force_unlock_read_write(format!("{key}:rw"))
                .await
                .unwrap(),
            1
        );
        drop(held);
    }

    // A hold that lasts past a card pass is listed on its client's holder card (`card.lua`),
    // and taken off after its release.
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let long = a.lock("listed").acquire().await.unwrap();
    let listed = async {
        while !card_lengths(&mut raw)
            .await
            .iter()
            .any(|&n| n > NAME_FIELDS)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PATIENCE, listed)
        .await
        .expect("a hold past a card pass is listed");
    long.release().await.unwrap();
    let unlisted = async {
        while card_lengths(&mut raw)
            .await
            .iter()
            .any(|&n| n > NAME_FIELDS)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PATIENCE, unlisted)
        .await
        .expect("a released hold is taken off its card");

    let seen = watching.await.unwrap();
    let mut declared: BTreeSet<String> = BTreeSet::new();
    let mut scripts = 0;
    let mut checked = 0;
    let mut card_calls = 0;
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
                if declared.iter().any(|key| key.starts_with("rlock:holder:")) {
                    card_calls += 1;
                }
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
        } else {
            assert!(
                KEYLESS.iter().any(|k| command.eq_ignore_ascii_case(k)),
                "a script ran `{command}`, which this test does not know as taking a key or not"
            );
        }
    }
    eprintln!(
        "{scripts} script calls ({card_calls} of them the card's), {checked} keyed commands \
         inside them, all declared"
    );
    assert!(
        scripts > 20 && checked > 50 && card_calls >= 2,
        "{scripts} scripts, {card_calls} of them the card's, {checked} commands"
    );
}
