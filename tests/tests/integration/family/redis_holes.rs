//! Each hole of the naive Redis lock recipes, reproduced against a real `redis-server` and
//! shown closed: atomic value+expiry, owner-checked release (also across a real process
//! pause), reentry without round trips, bounded fence storage, interop with the plain
//! `SET NX PX` format, and bounded errors when Redis is down or paused.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::{LockClient, LockError, LockOptions, Operation};
use rlock_tests::RedisServer;
use rlock_tests::child::start_holder;
use rlock_tests::locking::{client_for, lock_and_release};
use rlock_tests::protocol::{Command, Line, Outcome};

const SHORT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn acquire_sets_value_and_expiry_in_one_atomic_round_trip() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    // Warm up the script cache so the measured call is the steady-state one.
    lock_and_release(&client, "warm", Duration::ZERO).await;

    // Without a fence: one `SET key token NX PX ttl`, the expiry part of the same command.
    let (guard, counts) = server
        .commands_during(async {
            client
                .lock("order:42")
                .ttl(Duration::from_secs(10))
                .acquire()
                .await
                .unwrap()
        })
        .await;
    if server.version().has_set_nx_get() {
        assert_eq!(counts.total, 1, "{counts:?}");
    } else {
        // Before Redis 7.0 (no `SET … NX … GET`): the acquire script, whose `SET NX PX`
        // the server counts too.
        assert_eq!(counts.calls("evalsha"), 1, "{counts:?}");
    }
    assert_eq!(counts.calls("set"), 1, "{counts:?}");
    check_stored(&server, "order:42", guard.token()).await;
    guard.release().await.unwrap();

    // With a fence: one EVALSHA, whose SET NX PX carries the expiry; no EXPIRE anywhere.
    let (guard, counts) = server
        .commands_during(async {
            client
                .lock("order:43")
                .ttl(Duration::from_secs(10))
                .fenced()
                .acquire()
                .await
                .unwrap()
        })
        .await;
    assert_eq!(counts.calls("evalsha"), 1, "{counts:?}");
    assert_eq!(
        counts.calls("expire") + counts.calls("pexpire") + counts.calls("setnx"),
        0,
        "{counts:?}"
    );
    check_stored(&server, "order:43", guard.token()).await;
    guard.release().await.unwrap();
}

/// `key` holds `token` with an expiry of at most 10 s.
async fn check_stored(server: &RedisServer, key: &str, token: &str) {
    let mut raw = server.raw().await;
    let pttl: i64 = raw.pttl(key).await.unwrap();
    assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");
    let stored: String = raw.get(key).await.unwrap();
    assert_eq!(stored, token);
}

#[tokio::test]
async fn plain_set_nx_px_clients_and_rlock_exclude_each_other() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let mut raw = server.raw().await;

    // Another service (redis-py's Lock, a Go service) holds the key in the common format.
    let set: Option<String> = redis::cmd("SET")
        .arg("voucher:1")
        .arg("python-owner")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(set.as_deref(), Some("OK"));
    assert!(
        client
            .lock("voucher:1")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    let _: () = raw.del("voucher:1").await.unwrap();

    // rlock holds it: the other client's SET NX fails, and its owner-checked release with
    // its own token deletes nothing.
    let guard = client.lock("voucher:1").acquire().await.unwrap();
    let set: Option<String> = redis::cmd("SET")
        .arg("voucher:1")
        .arg("python-owner")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(set, None);
    let foreign_release = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let deleted: i64 = foreign_release
        .key("voucher:1")
        .arg("python-owner")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(deleted, 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn nested_relock_sends_no_command_and_only_the_outer_release_deletes() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let mut raw = server.raw().await;

    client
        .with_lock("cart:1", LockOptions::new(), async {
            let (inner, counts) = server
                .commands_during(async {
                    let inner = client.lock("cart:1").acquire().await.unwrap();
                    let nested = client
                        .with_lock("cart:1", LockOptions::new(), async { 7 })
                        .await
                        .unwrap();
                    assert_eq!(nested, 7);
                    inner
                })
                .await;
            assert!(inner.is_reentrant());
            assert_eq!(counts.total, 0, "reentry reached Redis: {counts:?}");

            let (released, counts) = server.commands_during(inner.release()).await;
            released.unwrap();
            assert_eq!(counts.total, 0, "inner release reached Redis: {counts:?}");
            let exists: bool = raw.exists("cart:1").await.unwrap();
            assert!(exists, "an inner release deleted the outer hold");
        })
        .await
        .unwrap();
    let exists: bool = raw.exists("cart:1").await.unwrap();
    assert!(!exists, "the outermost release did not delete the lock");
}

#[tokio::test]
async fn fence_records_expire_with_their_lease() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let mut last = 0;
    for i in 0..50 {
        let guard = client
            .lock(format!("item:{i}"))
            .ttl(Duration::from_millis(100))
            .fenced()
            .acquire()
            .await
            .unwrap();
        let fence = guard.fence().unwrap().get();
        assert!(fence > last);
        last = fence;
        guard.release().await.unwrap();
    }
    let mut raw = server.raw().await;
    // Nothing per key outlives its lease: after it, the database is empty again.
    let mut keys = usize::MAX;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        keys = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
        if keys == 0 {
            break;
        }
    }
    assert_eq!(keys, 0, "fence or lock records outlived their lease");
    // A fence record carries its lease's expiry: read while the lease lives (a long one, so
    // that a slow machine reads it in time).
    let held = client
        .lock("item:held")
        .ttl(Duration::from_secs(5))
        .renew(false)
        .fenced()
        .acquire()
        .await
        .unwrap();
    let fence_ttl: i64 = raw.pttl("{item:held}:fence").await.unwrap();
    assert!(
        fence_ttl > 0 && fence_ttl <= 5000,
        "fence record ttl {fence_ttl}"
    );
    held.release().await.unwrap();
    // And the next token still exceeds every earlier one.
    let guard = client.lock("item:0").fenced().acquire().await.unwrap();
    assert!(guard.fence().unwrap().get() > last);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn holder_process_paused_past_its_ttl_cannot_delete_the_next_holders_lock() {
    let server = RedisServer::start();
    let (mut holder, holder_token) =
        start_holder(env!("CARGO_BIN_EXE_worker"), &server.url(), "stock:1", 300);
    holder.signal("-STOP");
    tokio::time::sleep(Duration::from_millis(600)).await;

    let client = client_for(&server, SHORT).await;
    let guard = client
        .lock("stock:1")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert_ne!(guard.token(), holder_token);

    holder.signal("-CONT");
    assert_eq!(
        holder.ask(Command::Release),
        Some(Line::Released(Outcome::Lost))
    );
    let mut raw = server.raw().await;
    let stored: String = raw.get("stock:1").await.unwrap();
    assert_eq!(
        stored,
        guard.token(),
        "the paused holder deleted the new lock"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn paused_redis_gives_timeouts_and_service_resumes() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let held = client.lock("a").acquire().await.unwrap();

    server.pause();
    let outcome = tokio::time::timeout(Duration::from_secs(10), async {
        let acquire = client.lock("b").acquire().await;
        let release = held.release().await;
        (acquire, release)
    })
    .await
    .expect("calls to a paused Redis must end by themselves");
    server.resume();

    let (acquire, release) = outcome;
    assert!(
        matches!(acquire, Err(LockError::Timeout { operation: Operation::Acquire, timeout }) if timeout == SHORT),
        "{acquire:?}"
    );
    assert!(
        matches!(
            release,
            Err(LockError::Timeout {
                operation: Operation::Release,
                ..
            })
        ),
        "{release:?}"
    );
    let guard = client.lock("c").acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn acquire_whose_reply_never_came_leaves_no_orphan_lock() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    lock_and_release(&client, "warm", Duration::ZERO).await;

    // The request reaches the paused server's socket; our timeout fires before the reply.
    server.pause();
    let err = client
        .lock("orphan:1")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    server.resume();

    // The server then grants the lock to a token nobody holds; the background release of
    // that token must delete it well before its 60 s lease.
    let other = client_for(&server, SHORT).await;
    let guard = other
        .lock("orphan:1")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn acquire_cancelled_in_flight_leaves_no_orphan_lock() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    lock_and_release(&client, "warm", Duration::ZERO).await;

    // The caller gives up (its request was dropped) while the request sits in the paused
    // server's socket, before the command timeout: the acquire future is dropped mid-flight.
    server.pause();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        client
            .lock("orphan:2")
            .ttl(Duration::from_secs(60))
            .acquire(),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the acquire should still have been waiting"
    );
    server.resume();

    // The server then grants the lock to the abandoned token; its background release must
    // free it long before the 60 s lease.
    let other = client_for(&server, SHORT).await;
    lock_and_release(&other, "orphan:2", Duration::from_secs(5)).await;
}

#[tokio::test]
async fn killed_redis_gives_errors_and_a_restart_needs_no_new_client() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    lock_and_release(&client, "k", Duration::ZERO).await;

    server.kill();
    let outcome = tokio::time::timeout(Duration::from_secs(10), client.lock("k").acquire())
        .await
        .expect("calls to a dead Redis must end by themselves");
    let err = outcome.unwrap_err();
    assert!(err.is_backend(), "{err:?}");

    server.restart();
    // The connection comes back on its own; a few attempts may still see the old failure.
    let mut last = None;
    for _ in 0..50 {
        match client.lock("k").acquire().await {
            Ok(guard) => {
                guard.release().await.unwrap();
                return;
            }
            Err(e) => {
                assert!(e.is_backend(), "{e:?}");
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("the client never recovered after the restart: {last:?}");
}

#[tokio::test]
async fn unreachable_redis_fails_to_connect_in_bounded_time() {
    // Reserve a port, then close it: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        LockClient::builder()
            .url(format!("redis://127.0.0.1:{port}/"))
            .command_timeout(SHORT)
            .connect(),
    )
    .await
    .expect("connecting must end by itself");
    assert!(result.unwrap_err().is_backend());

    let bad = LockClient::connect("http://example").await.unwrap_err();
    assert!(matches!(bad, LockError::InvalidConfig(_)), "{bad:?}");
}

#[tokio::test]
async fn passwords_in_the_url_are_used_and_a_wrong_one_is_a_clear_error() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query_async(&mut raw)
        .await
        .unwrap();
    let url = format!("redis://:s3cret@127.0.0.1:{}/", server.port());
    let client = LockClient::connect(&url).await.unwrap();
    let guard = client
        .lock("k")
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    // Waiting uses its own pub/sub connection, which must authenticate too.
    let other = LockClient::connect(&url).await.unwrap();
    let waiter = tokio::spawn(async move {
        other
            .lock("k")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .map(|g| g.fence())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    assert!(waiter.await.unwrap().is_ok());

    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    let err = LockClient::connect(&wrong).await.unwrap_err();
    assert!(err.is_backend(), "{err:?}");
    assert!(
        !err.to_string().contains("nope"),
        "the password leaked: {err}"
    );
}

#[tokio::test]
async fn a_key_overwritten_with_another_type_is_lost_not_an_error() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let ttl = Duration::from_millis(600);
    let doomed = client.lock("typed:1").ttl(ttl).acquire().await.unwrap();
    let healthy = client.lock("typed:2").ttl(ttl).acquire().await.unwrap();

    // Another application writes a hash where our lock was (say, after a failover).
    let mut raw = server.raw().await;
    let _: () = raw.del("typed:1").await.unwrap();
    let _: () = raw.hset("typed:1", "field", "value").await.unwrap();

    // The watchdog's batch renews the healthy lock and reports only the other one lost.
    tokio::time::timeout(Duration::from_secs(5), doomed.lost())
        .await
        .expect("the overwritten lock was never reported lost");
    tokio::time::sleep(ttl * 2).await;
    assert!(
        !healthy.is_lost(),
        "one bad key failed the whole renewal batch"
    );
    assert!(doomed.release().await.unwrap_err().is_lost());
    healthy.release().await.unwrap();
    let kind: String = redis::cmd("TYPE")
        .arg("typed:1")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "hash", "the other application's data was touched");
}

#[tokio::test]
async fn a_user_without_channel_rights_still_releases_cleanly() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let url = server.user_without_channel_rights("app").await;
    let client = LockClient::connect(&url).await.unwrap();
    let guard = client.lock("acl:1").acquire().await.unwrap();
    // The release script's announcement is refused (NOPERM); the release itself stands.
    guard.release().await.unwrap();
    let exists: bool = raw.exists("acl:1").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_release_cancelled_in_flight_still_frees_the_lock() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let guard = client
        .lock("release:1")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();

    // The caller gives up on the release while it sits in the paused server's socket.
    server.pause();
    let cancelled = tokio::time::timeout(Duration::from_millis(100), guard.release()).await;
    assert!(
        cancelled.is_err(),
        "the release should still have been waiting"
    );
    server.resume();

    let other = client_for(&server, SHORT).await;
    lock_and_release(&other, "release:1", Duration::from_secs(5)).await;
}

/// A server whose script cache was emptied (`SCRIPT FLUSH`, or a replica promoted after the
/// scripts were loaded on its master) runs every lease script on the next call: the call is
/// re-sent as `EVAL`, which caches the script again.
#[tokio::test]
async fn an_emptied_script_cache_costs_one_eval_per_script() {
    let server = RedisServer::start();
    let client = client_for(&server, SHORT).await;
    let mut raw = server.raw().await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let ((), counts) = server
        .commands_during(async {
            let guard = client
                .lock("flushed")
                .ttl(Duration::from_millis(300))
                .fenced()
                .acquire()
                .await
                .unwrap();
            assert!(guard.fence().is_some());
            guard.extend(Duration::from_millis(600)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await; // a renewal
            assert!(!guard.is_lost());
            guard.release().await.unwrap();
        })
        .await;
    // Acquire, extend, renew and release: each script missed once, then ran whole.
    assert_eq!(counts.calls("eval"), 4, "{counts:?}");
}

/// A release announces itself only when a client waits for the key and listens: waiters
/// queue in `{key}:waiters`, and a release that finds no queue publishes nothing; one that
/// finds a waiter whose client listens names it in one `PUBLISH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_publishes_only_when_someone_waits() {
    let server = RedisServer::start();
    let holder = client_for(&server, SHORT).await;
    let waiter = client_for(&server, SHORT).await;
    lock_and_release(&holder, "warm", Duration::ZERO).await;

    let ((), quiet) = server
        .commands_during(lock_and_release(&holder, "quiet", Duration::ZERO))
        .await;
    assert_eq!(quiet.calls("publish"), 0, "{quiet:?}");

    let guard = holder.lock("awaited").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        let g = waiter
            .lock("awaited")
            .wait(Duration::from_secs(10))
            .acquire()
            .await?;
        g.release().await
    });
    let mut raw = server.raw().await;
    for _ in 0..500 {
        let queued: bool = raw.exists("{awaited}:waiters").await.unwrap();
        let listening = server.channels("rlock:released:awaited:*", false).await;
        if queued && !listening.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (released, announced) = server.commands_during(guard.release()).await;
    released.unwrap();
    assert_eq!(announced.calls("publish"), 1, "{announced:?}");
    // Woken by the announcement, long before the holder's 30 s lease would have ended.
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
