//! Acquisitions whose reply never came: their background release is not counted as a
//! release, one that runs in Redis after a long stop is released, and so is a waiter's
//! check in that runs after its withdrawal found the lock handed to it.

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::LockError;
use rlock_tests::RedisServer;
use rlock_tests::locking::{client, client_at, client_for, keys_left, queued_and_listening};
use rlock_tests::proxy::FaultProxy;

use super::blocking;

/// The counters agree: the background release of an orphan acquisition (whose reply never
/// came) is not counted as a release, since nothing was counted as acquired. Redis is
/// paused, an acquire times out, Redis resumes; once the orphan release has removed the key,
/// `released <= acquired` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_releases_do_not_count_as_releases() {
    let server = RedisServer::start();
    let client = client_for(&server, Duration::from_millis(200)).await;

    blocking(|| server.pause());
    let result = client
        .lock("orphan:1")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await;
    blocking(|| server.resume());
    assert!(
        matches!(
            result,
            Err(LockError::Timeout { .. } | LockError::Unavailable { .. })
        ),
        "expected a timeout while Redis was paused: {result:?}"
    );

    // The acquisition went through once Redis resumed, and the orphan release removed it.
    let mut raw = server.raw().await;
    let mut gone = false;
    for _ in 0..100 {
        let exists: bool = raw.exists("orphan:1").await.unwrap();
        if !exists {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = client.metrics();
    eprintln!("orphan key gone: {gone}; {m:?}");
    assert!(
        m.released <= m.acquired,
        "more releases than acquisitions counted (orphan key gone: {gone}): {m:?}"
    );
}

/// An acquisition sent to a Redis stopped for longer than the orphan release's first tries
/// (3 s, a 200 ms command timeout) waits in Redis's input and runs when Redis resumes, with
/// a 30 s lease and nobody holding it. The background release keeps trying until Redis
/// answers, then once more after its `SET` could have run: the key is gone soon after the
/// resume, not 30 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_that_runs_after_a_long_stop_is_released() {
    let server = RedisServer::start();
    let client = client_for(&server, Duration::from_millis(200)).await;
    blocking(|| server.pause());
    let result = client
        .lock("orphan:late")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await;
    assert!(result.is_err(), "{result:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    blocking(|| server.resume());
    let mut raw = server.raw().await;
    let mut ran = false;
    for _ in 0..200 {
        let exists: bool = raw.exists("orphan:late").await.unwrap();
        ran |= exists;
        if !exists && ran {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exists: bool = raw.exists("orphan:late").await.unwrap();
    assert!(
        !exists,
        "the acquisition that ran on resume was left held (it ran: {ran})"
    );
}

/// A queued waiter on `key` is cut while its check in is on its way, held back `held_back`
/// by the network, and a release has just handed it the lock; then, past the check in, what
/// is left of the key: `None` when nothing, else who holds it and for how long.
async fn left_after_a_held_back_check_in(key: &'static str, held_back: Duration) -> Option<String> {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = client(&server).await;
    // The waiter's client goes through the proxy: its caller connection and its background
    // one alike.
    let waiter_client = client_at(&proxy.url(), Duration::from_secs(10)).await;
    let held = holder
        .lock(key)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock(key)
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    queued_and_listening(&server, key, 1, 1).await;
    // The check in that the confirmation of its subscription brings is answered by now; the
    // next comes a check interval (0.67 s) later, and the proxy holds it back.
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_delay(held_back);
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The release hands the lock to the waiter (its announcement held back too), which is
    // cut while its check in is still on its way.
    held.release().await.unwrap();
    proxy.set_delay(Duration::ZERO);
    waiter.abort();
    let _ = waiter.await;
    // Past the held-back check in, and what was sent after it.
    tokio::time::sleep(held_back + Duration::from_secs(2)).await;
    let mut raw = server.raw().await;
    if keys_left(&mut raw, &[key]).await == 0 {
        return None;
    }
    let pttl: i64 = raw.pttl(key).await.unwrap();
    let token: Option<String> = raw.get(key).await.unwrap();
    Some(format!(
        "held by {token:?} with {pttl} ms of its lease, nobody holding it"
    ))
}

/// A queued waiter is cut while its check in is on its way, and a release has just handed it
/// the lock. Its withdrawal finds the lock its own (the hand-off) and gives it on; a check in
/// that ran after that would find the lock free and take it, for the full ttl, under a token
/// nobody holds. So the key must be released soon, not 30 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_in_that_runs_after_its_withdrawal_is_released() {
    let left = left_after_a_held_back_check_in("orphan:check-in", Duration::from_millis(600));
    assert_eq!(left.await, None);
}

/// As above, with the check in held back longer than the withdrawal's resends go on (for
/// `ORPHAN_SETTLE` after Redis first answers it): only the order of the two on one connection
/// keeps the lock from being taken again. The withdrawal is sent on the waiter's own
/// connection, behind its check in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_runs_after_a_check_in_held_back_past_its_resends() {
    let left = left_after_a_held_back_check_in("orphan:held-back", Duration::from_secs(3));
    assert_eq!(left.await, None);
}

/// Waits until one of `server`'s clients is blocked in a `WAIT`.
async fn blocked_in_wait(server: &RedisServer) {
    let mut raw = server.raw().await;
    for _ in 0..200 {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut raw)
            .await
            .unwrap();
        let blocked = clients.lines().any(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or_default()
            };
            field("cmd") == "wait" && field("flags").contains('b')
        });
        if blocked {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no client was ever blocked in WAIT");
}

/// Holds `client`'s connection on the calling runtime for 1 s (half a 2 s command timeout) in
/// Redis: a lock asking a replica's confirmation on a server without any sends a `WAIT` that
/// blocks it, and whatever the client sends meanwhile on that connection runs after it. Its
/// task ends once the `WAIT` answered.
async fn hold_back_caller_connection(
    server: &RedisServer,
    client: &rlock_runtime::LockClient,
) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    let blocker = tokio::spawn(async move {
        let refused = client.lock("orphan:wait").min_replicas(1).acquire().await;
        assert!(refused.is_err(), "no replica confirmed anything");
    });
    blocked_in_wait(server).await;
    blocker
}

/// What is left of `keys` once they settled: empty when nothing.
async fn held_keys(server: &RedisServer, keys: &[&str]) -> Vec<String> {
    let mut raw = server.raw().await;
    let _ = keys_left(&mut raw, keys).await;
    let mut left = Vec::new();
    for key in keys {
        let token: Option<String> = raw.get(*key).await.unwrap();
        if let Some(token) = token {
            let pttl: i64 = raw.pttl(*key).await.unwrap();
            left.push(format!("{key} held by {token} with {pttl} ms of its lease"));
        }
    }
    left
}

/// A `lock_all` that found a key busy waits for it alone, then takes every key in one script
/// that sets the key it was handed again under its token. Cut while that script is held back
/// on its caller's connection, the handed key's hold is released at once, in the background,
/// on rlock's own connection: the script then runs after that release, and must not take the
/// key back for a hold nobody has any more (it stayed held for the whole 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_cut_after_its_wait_takes_nothing_back() {
    const KEYS: [&str; 2] = ["orphan:all:0", "orphan:all:1"];
    let server = RedisServer::start();
    let holder = client(&server).await;
    let taker = client_for(&server, Duration::from_secs(2)).await;
    let ttl = Duration::from_secs(30);
    let held = holder.lock(KEYS[1]).ttl(ttl).acquire().await.unwrap();
    let all = tokio::spawn({
        let taker = taker.clone();
        async move {
            let guard = taker
                .lock_all(KEYS)
                .ttl(ttl)
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            // Held on to: only the cut may end it.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(guard);
        }
    });
    queued_and_listening(&server, KEYS[1], 1, 1).await;
    let blocker = hold_back_caller_connection(&server, &taker).await;
    // The release hands the key to the waiting `lock_all`, which sends its script for both
    // keys behind the `WAIT`; then it is cut.
    held.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    all.abort();
    let _ = all.await;
    blocker.await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(held_keys(&server, &KEYS).await, Vec::<String>::new());
}

/// The same for a `lock_all` inside a locked scope that holds one of its keys: its script
/// sets that key's lease anew under the scope's token. Cut while the script is held back on
/// the caller's connection, the scope's hold is released in the background first; the script
/// must not take the key back afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_cut_inside_a_scope_of_its_key_takes_nothing_back() {
    const KEYS: [&str; 2] = ["orphan:scoped:0", "orphan:scoped:1"];
    let server = RedisServer::start();
    let taker = client_for(&server, Duration::from_secs(2)).await;
    let ttl = Duration::from_secs(30);
    // The script is loaded first: the one held back must be the one that runs, not a first
    // `EVALSHA` that finds no script.
    let warm = taker.lock_all(["orphan:warm:0", "orphan:warm:1"]).acquire();
    warm.await.unwrap().release().await.unwrap();
    let (entered, mut inside) = tokio::sync::mpsc::channel(1);
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let scoped = tokio::spawn({
        let (taker, go) = (taker.clone(), go.clone());
        async move {
            let body = async {
                entered.send(()).await.unwrap();
                go.notified().await;
                let guard = taker.lock_all(KEYS).ttl(ttl).acquire().await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                drop(guard);
            };
            let _ = taker.lock(KEYS[1]).ttl(ttl).run(body).await;
        }
    });
    inside.recv().await.unwrap();
    let blocker = hold_back_caller_connection(&server, &taker).await;
    go.notify_one();
    tokio::time::sleep(Duration::from_millis(200)).await;
    scoped.abort();
    let _ = scoped.await;
    blocker.await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(held_keys(&server, &KEYS).await, Vec::<String>::new());
}
