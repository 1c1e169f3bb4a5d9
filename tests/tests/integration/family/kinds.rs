//! One name, one kind: a key is a lock, a semaphore or a read-write lock, never two at once,
//! and Redis keeps it so. Every pair of kinds meets on one name here, each in every role a
//! user can put it in (holder, waiter, fenced waiter, fair arrival, a guard whose lease ended
//! unnoticed, an operator's inspection and force-unlock), against a real server watched for
//! stalls: the other kind is refused with an error naming both, never granted, never told
//! busy, and no script runs away with the server.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use redis::AsyncCommands;
use rlock_runtime::{LockClient, LockError, LockGuard, LockRequest};
use rlock_tests::RedisServer;
use rlock_tests::locking::{
    Of, PATIENCE, client, keys_left, queued_and_listening, take_and_give_back, wait_queue_len,
};
use rlock_tests::stall::StallWatch;

const ALL: [Of; 5] = [
    Of::Lock,
    Of::Permit(PERMITS),
    Of::Read,
    Of::UpgradeableRead,
    Of::Write,
];

/// A semaphore's count in these tests.
const PERMITS: u32 = 2;

/// A lease long enough to outlast any step of a test on a loaded machine.
const LONG: Duration = Duration::from_secs(20);

/// The ways a request of `of` can ask, each a request to try.
fn requests<'c>(of: Of, client: &'c LockClient, key: &str) -> Vec<LockRequest<'c>> {
    let mut requests = vec![
        of.request(client, key),
        of.request(client, key).wait(PATIENCE),
        of.request(client, key).wait(PATIENCE).fair(),
    ];
    if matches!(of, Of::Lock | Of::Write) {
        requests.push(of.request(client, key).fenced());
        requests.push(of.request(client, key).wait(PATIENCE).fenced());
        requests.push(of.request(client, key).wait(PATIENCE).fenced().fair());
    }
    requests
}

/// Every ordered pair of kinds that differ.
fn pairs() -> impl Iterator<Item = (Of, Of)> {
    ALL.into_iter()
        .flat_map(|a| ALL.into_iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.key_kind() != b.key_kind())
}

/// Fails unless `result` is the refusal of `asked` on a name that holds `found`.
#[track_caller]
fn assert_wrong_kind<T: std::fmt::Debug>(result: Result<T, LockError>, asked: Of, found: Of) {
    match result {
        Err(LockError::WrongKind {
            asked: a, found: f, ..
        }) if a == asked.key_kind() && f == found.key_kind() => {}
        other => panic!(
            "{asked:?} on a {found:?}'s name: expected the other kind refused, got {other:?}"
        ),
    }
}

/// Fails unless `holder` (of `of`, on `key`) still holds, as Redis and its guard tell, and
/// nobody else could take the key as that kind exclusively beside it.
async fn assert_intact(holder: &LockGuard, of: Of, key: &str, others: &LockClient) {
    assert!(
        !holder.is_lost(),
        "the {of:?} holder of {key} was told it lost"
    );
    holder.extend(LONG).await.unwrap();
    assert!(of.held(others, key).await.unwrap(), "{of:?} {key} not held");
    // Nobody is let in beside it where it excludes them.
    let exclusive = match of {
        Of::Lock => Some(Of::Lock),
        Of::Write | Of::Read | Of::UpgradeableRead => Some(Of::Write),
        Of::Permit(_) => None,
    };
    if let Some(excluded) = exclusive {
        let beside = excluded.request(others, key).acquire().await;
        assert!(
            beside.as_ref().is_err_and(LockError::is_busy),
            "a {excluded:?} beside the {of:?} holder of {key}: {beside:?}"
        );
    }
}

/// Each kind on a name another kind holds, in every way it can ask, and that kind's
/// operator tools: refused, naming both; the holder keeps its hold; the name is free for
/// the other kind once the holder is gone.
async fn every_kind_refuses_another_kinds_name(x: &LockClient, y: &LockClient) {
    for (a, b) in pairs() {
        let key = format!("pair:{a:?}:{b:?}");
        let holder = a.request(x, &key).ttl(LONG).acquire().await.unwrap();
        for request in requests(b, y, &key) {
            assert_wrong_kind(request.acquire().await, b, a);
        }
        assert_wrong_kind(b.held(y, &key).await, b, a);
        assert_wrong_kind(b.force_unlock(y, &key).await, b, a);
        assert_intact(&holder, a, &key, y).await;
        holder.release().await.unwrap();
        let taken = b.request(y, &key).acquire().await.unwrap();
        taken.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_refuses_another_kinds_name_on_redis() {
    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    every_kind_refuses_another_kinds_name(&client(&server).await, &client(&server).await).await;
    watch.finish().await.assert_no_stall();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_refuses_another_kinds_name_in_process() {
    let x = LockClient::in_memory();
    every_kind_refuses_another_kinds_name(&x, &x.sibling()).await;
}

/// A guard that still believes it holds while its lease is gone (an operator broke it behind
/// its back, before its next renewal could tell) sends its release and its extend under its
/// own token when the name is another kind's by then: they touch nothing of it. (A stale
/// permit's release once deleted a write lock of the same name: two writers.)
async fn a_stale_guard_touches_nothing_of_another_kind(x: &LockClient, y: &LockClient) {
    let operator = y.sibling();
    for (a, b) in pairs() {
        let key = format!("stale:{a:?}:{b:?}");
        let stale = b.request(x, &key).ttl(LONG).acquire().await.unwrap();
        assert!(b.force_unlock(&operator, &key).await.unwrap() >= 1);
        let holder = a.request(y, &key).ttl(LONG).acquire().await.unwrap();
        let extended = stale.extend(LONG).await;
        assert!(
            extended.as_ref().is_err_and(LockError::is_lost),
            "{b:?}'s stale extend on a {a:?}: {extended:?}"
        );
        let released = stale.release().await;
        assert!(
            released.as_ref().is_err_and(LockError::is_lost),
            "{b:?}'s stale release on a {a:?}: {released:?}"
        );
        assert_intact(&holder, a, &key, &operator).await;
        holder.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_guard_touches_nothing_of_another_kind_on_redis() {
    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    a_stale_guard_touches_nothing_of_another_kind(&client(&server).await, &client(&server).await)
        .await;
    watch.finish().await.assert_no_stall();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_guard_touches_nothing_of_another_kind_in_process() {
    let x = LockClient::in_memory();
    a_stale_guard_touches_nothing_of_another_kind(&x, &x.sibling()).await;
}

/// A lease whose holder stopped renewing (renewal off here; a stalled process elsewhere)
/// lapses by Redis's clock, and another kind takes the name: the lapsed guard's release
/// touches nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_guard_touches_nothing_of_another_kind() {
    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    let (x, y) = (client(&server).await, client(&server).await);
    let mut raw = server.raw().await;
    for (a, b) in pairs() {
        let key = format!("lapsed:{a:?}:{b:?}");
        let lapsing = b
            .request(&x, &key)
            .ttl(Duration::from_millis(200))
            .renew(false)
            .acquire()
            .await
            .unwrap();
        // The name is free once its state is gone (with its last lease, by Redis's clock).
        assert_eq!(
            keys_left(&mut raw, &[&key]).await,
            0,
            "{b:?} {key} never lapsed"
        );
        let holder = a.request(&y, &key).ttl(LONG).acquire().await.unwrap();
        let _ = lapsing.release().await;
        assert_intact(&holder, a, &key, &y.sibling()).await;
        holder.release().await.unwrap();
    }
    watch.finish().await.assert_no_stall();
}

/// Entries of every other kind (fenced or not, a permit's of another count, and one in the
/// format of rlock's earlier versions, without a kind), of a client that listens, stand at
/// the head of a queue when each kind's release hands its lease on: only the kind's own
/// waiter is granted, and the others are dropped, never granted. (A lock waiter was once granted a semaphore's permit,
/// and a fenced one made the semaphore's release loop forever, stopping Redis.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_grants_only_its_own_kind() {
    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    let (holding, waiting) = (client(&server).await, client(&server).await);
    let mut raw = server.raw().await;
    // A client of another kind's waiters that listens, so that its entries look live.
    let mut listener = server.redis_client().get_async_pubsub().await.unwrap();
    // (holder, its waiter, the letters of other kinds' entries)
    // (A permit's entry carries its semaphore's count: a waiter of another count is never
    // handed a permit of this one.)
    let cases: [(Of, Of, &[&str]); 5] = [
        (Of::Lock, Of::Lock, &["p2", "r", "u", "w"]),
        (
            Of::Permit(PERMITS),
            Of::Permit(PERMITS),
            &["l", "r", "u", "w", "p1", "p3", "p"],
        ),
        (Of::Write, Of::Read, &["l", "p2"]),
        (Of::Write, Of::UpgradeableRead, &["l", "p2"]),
        (Of::Read, Of::Write, &["l", "p2"]),
    ];
    for (held, waiter, others) in cases {
        let key = format!("grant:{held:?}:{waiter:?}");
        listener
            .subscribe(format!("rlock:released:{key}:intruder"))
            .await
            .unwrap();
        let mut holders = vec![
            held.request(&holding, &key)
                .ttl(LONG)
                .acquire()
                .await
                .unwrap(),
        ];
        if held == Of::Permit(PERMITS) {
            holders.push(
                held.request(&holding, &key)
                    .ttl(LONG)
                    .acquire()
                    .await
                    .unwrap(),
            );
        }
        let queued = tokio::spawn({
            let (waiting, key) = (waiting.clone(), key.clone());
            async move {
                let guard = waiter
                    .request(&waiting, &key)
                    .wait(PATIENCE)
                    .acquire()
                    .await?;
                let token = guard.token().to_owned();
                guard.release().await?;
                Ok::<_, LockError>(token)
            }
        });
        // The waiter's client and the intruders' listen.
        queued_and_listening(&server, &key, 1, 2).await;
        let queue = format!("{{{key}}}:waiters");
        let mut intruders = Vec::new();
        for (i, letter) in others.iter().enumerate() {
            for fenced in ["0", "1"] {
                intruders.push(format!("intruder:{i}{fenced} 2000 {fenced} {letter}"));
            }
        }
        intruders.push("intruder:old 2000 1".to_owned());
        for entry in &intruders {
            let _: () = raw.lpush(&queue, entry).await.unwrap();
        }
        for holder in holders {
            holder.release().await.unwrap();
        }
        let token = queued.await.unwrap().unwrap();
        assert!(!token.starts_with("intruder"));
        // No intruder holds the name, whatever its kind keeps.
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if kind == "string" {
            let holder: Option<String> = raw.get(&key).await.unwrap();
            assert!(
                !holder.as_deref().is_some_and(|h| h.starts_with("intruder")),
                "{holder:?}"
            );
        } else if kind == "zset" {
            let members: Vec<String> = raw.zrange(&key, 0, -1).await.unwrap();
            assert!(
                !members.iter().any(|m| m.starts_with("intruder")),
                "{members:?}"
            );
        }
        let left: Vec<String> = raw.lrange(&queue, 0, -1).await.unwrap();
        assert!(!left.iter().any(|e| e.starts_with("intruder")), "{left:?}");
    }
    // Nobody announced a grant to the intruders' client.
    let told = tokio::time::timeout(Duration::from_millis(200), async {
        use futures_util::StreamExt as _;
        listener.on_message().next().await
    })
    .await;
    assert!(told.is_err(), "an intruder was told it holds: {told:?}");
    watch.finish().await.assert_no_stall();
}

/// The semaphore's name with every permit held: a lock waiter (fenced or not) is refused,
/// not queued for a permit, also when its client already waits for a permit of the same
/// name (its first call then joins the queue without a script, and its next check in is
/// refused); the permit waiter is served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiter_on_a_full_semaphore_is_refused() {
    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    let (a, b) = (client(&server).await, client(&server).await);
    let key = "full:semaphore";
    let permits = [
        a.semaphore(key, PERMITS).ttl(LONG).acquire().await.unwrap(),
        a.semaphore(key, PERMITS).ttl(LONG).acquire().await.unwrap(),
    ];
    for request in requests(Of::Lock, &b, key) {
        assert_wrong_kind(request.acquire().await, Of::Lock, Of::Permit(PERMITS));
    }
    let permit_waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore(key, PERMITS).wait(PATIENCE).acquire().await }
    });
    queued_and_listening(&server, key, 1, 1).await;
    for request in requests(Of::Lock, &b, key) {
        assert_wrong_kind(request.acquire().await, Of::Lock, Of::Permit(PERMITS));
    }
    wait_queue_len(&server, &format!("{{{key}}}:waiters"), 1).await;
    let [first, second] = permits;
    first.release().await.unwrap();
    let served = permit_waiter.await.unwrap().unwrap();
    assert_eq!(b.inspect_semaphore(key).await.unwrap().in_use, 2);
    served.release().await.unwrap();
    second.release().await.unwrap();
    watch.finish().await.assert_no_stall();
}

/// A fair permit arrival finds the semaphore's last permit lapsed and a fenced lock waiter's
/// entry (a name once used as a lock) at the head of the queue: it takes the permit, and
/// Redis answers throughout (that entry once made the arrival's script loop forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_arrival_after_a_lapse_passes_another_kinds_entry() {
    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    let a = client(&server).await;
    let mut raw = server.raw().await;
    let mut listener = server.redis_client().get_async_pubsub().await.unwrap();
    let key = "lapse:fair";
    listener
        .subscribe(format!("rlock:released:{key}:intruder"))
        .await
        .unwrap();
    let lapsing = a
        .semaphore(key, 1)
        .ttl(Duration::from_millis(200))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let queue = format!("{{{key}}}:waiters");
    let _: () = raw.rpush(&queue, "intruder:1 2000 1 l").await.unwrap();
    let _: () = raw.pexpire(&queue, 60_000).await.unwrap();
    assert_eq!(
        keys_left(&mut raw, &[key]).await,
        0,
        "the permit never lapsed"
    );
    let fair = a
        .sibling()
        .semaphore(key, 1)
        .wait(PATIENCE)
        .fair()
        .acquire()
        .await
        .unwrap();
    fair.release().await.unwrap();
    drop(lapsing);
    watch.finish().await.assert_no_stall();
}

/// A set of leases lives exactly as long as its latest lease: after a long lease is given
/// back (or shortened) the name goes with the last short one, by Redis's clock, and is free
/// for any kind then, not when the longest lease it ever had would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_free_when_its_last_lease_ends() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let mut raw = server.raw().await;
    for of in [Of::Permit(PERMITS), Of::Read] {
        let key = format!("last:{of:?}");
        let long = of.request(&a, &key).ttl(LONG).acquire().await.unwrap();
        let short = of
            .request(&a, &key)
            .ttl(Duration::from_millis(300))
            .renew(false)
            .acquire()
            .await
            .unwrap();
        long.extend(Duration::from_secs(60)).await.unwrap();
        long.release().await.unwrap();
        assert_eq!(
            keys_left(&mut raw, &[&key]).await,
            0,
            "{key} outlived its last lease"
        );
        take_and_give_back(&a, Of::Lock, &key, Duration::ZERO).await;
        drop(short);
    }
}

/// A `lock_all` one of whose keys holds another kind is refused naming both, and takes none
/// of the others, waiting or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_over_another_kinds_name_takes_nothing() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let mut raw = server.raw().await;
    for other in [Of::Permit(PERMITS), Of::Read, Of::Write] {
        let key = format!("all:{other:?}");
        let held = other.request(&a, &key).ttl(LONG).acquire().await.unwrap();
        for wait in [Duration::ZERO, PATIENCE] {
            let refused = a
                .sibling()
                .lock_all(["all:free", key.as_str()])
                .wait(wait)
                .acquire()
                .await;
            assert_wrong_kind(refused, Of::Lock, other);
            let kept: bool = raw.exists("all:free").await.unwrap();
            assert!(!kept, "a refused lock_all kept a key");
        }
        held.release().await.unwrap();
    }
}

/// The watches these tests and the soak trust see a script that holds Redis: one that runs
/// for 400 ms shows as a slow command in the latency monitor, and as `BUSY` answers to the
/// busy watch's pings (past its 100 ms limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stall_watches_see_a_script_that_holds_redis() {
    use rlock_tests::stall::BusyWatch;

    let server = RedisServer::start();
    let watch = StallWatch::start(&server).await;
    let busy = tokio::task::spawn_blocking({
        let port = server.port();
        move || BusyWatch::start(&[port])
    })
    .await
    .unwrap();
    // Room for the busy watch to lower the limit first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut raw = server.raw_with_timeout(Duration::from_secs(5)).await;
    let spin = "local t = redis.call('TIME') \
                local start = t[1] * 1000000 + t[2] \
                local now = start \
                for _ = 1, 100000000 do \
                  t = redis.call('TIME') \
                  now = t[1] * 1000000 + t[2] \
                  if now - start >= 400000 then break end \
                end \
                return now - start";
    let spun: i64 = redis::cmd("EVAL")
        .arg(spin)
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(spun >= 400_000);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stalls = watch.finish().await;
    let busy = tokio::task::spawn_blocking(move || busy.finish())
        .await
        .unwrap();
    assert!(!stalls.slow_commands.is_empty(), "{stalls:?}");
    assert!(!busy.is_empty(), "no BUSY answer seen");
}
