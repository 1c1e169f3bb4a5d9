//! Semaphores against a real `redis-server` (and the in-process backend where it keeps the
//! same rules): never more holders than permits, a crashed holder's permit back at its own
//! lease's end, a release that hands its permit to one queued waiter, one count per
//! semaphore, reentry within a locked scope, and the requests that are refused.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rlock_runtime::{KeyKind, LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::deploy::redlock_url;
use rlock_tests::locking::{
    Of, PATIENCE, cancel_around_release, client, keys_left, queued_and_listening,
    take_and_give_back,
};

/// `clients` siblings of one client, `tasks` tasks each, take a permit of `key` (naming
/// `named` permits) `turns` times each, holding it `hold`; every task gets all its turns.
/// Returns the most bodies that ran at once.
async fn take_permits_in_turn(
    server: &RedisServer,
    key: &'static str,
    named: u32,
    (clients, tasks, turns): (usize, usize, usize),
    hold: Duration,
) -> usize {
    let first = client(server).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut running = Vec::new();
    for _ in 0..clients {
        let c = first.sibling();
        for _ in 0..tasks {
            let (c, inside, most, entered) =
                (c.clone(), inside.clone(), most.clone(), entered.clone());
            running.push(tokio::spawn(async move {
                for _ in 0..turns {
                    let permit = c
                        .semaphore(key, named)
                        .wait(PATIENCE)
                        .acquire()
                        .await
                        .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    entered.fetch_add(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            }));
        }
    }
    for task in running {
        task.await.unwrap();
    }
    assert_eq!(entered.load(Ordering::SeqCst), clients * tasks * turns);
    most.load(Ordering::SeqCst)
}

/// How many permits of `key` are in use.
async fn permits_in_use(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> u32 {
    redis::cmd("ZCOUNT")
        .arg(key)
        .arg(0)
        .arg("+inf")
        .query_async(raw)
        .await
        .unwrap()
}

/// 4 clients × 6 tasks contend for 3 permits, each task 15 times: the number of bodies
/// running at once never exceeds 3, and every task gets its turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits() {
    let server = RedisServer::start();
    let most = take_permits_in_turn(
        &server,
        "export:acme",
        3,
        (4, 6, 15),
        Duration::from_millis(1),
    )
    .await;
    assert!(most <= 3, "{most} bodies at once");
    // The last release took the count with it: nothing is left behind.
    let mut raw = server.raw().await;
    let exists = keys_left(&mut raw, &["export:acme"]).await;
    assert_eq!(exists, 0);
}

/// A client already waiting for a semaphore queues its next waiter with one plain `RPUSHX`,
/// as for a lock: a contended grant costs about one script call (the release that hands the
/// permit on), where an arrival through the acquire script made two. Under a count set at
/// run time a plain join's entry would carry the caller's count, which no release serves:
/// there every arrival takes the script, which writes the entry under the count set, and
/// every waiter is granted within the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_joins_the_semaphores_queue_with_one_command() {
    const HOLD: Duration = Duration::from_millis(2);
    let server = RedisServer::start();
    let grants = 4 * 4 * 10;
    let before = server.counts();
    let most = take_permits_in_turn(&server, "export:plain", 3, (4, 4, 10), HOLD).await;
    let counts = server.counts().minus(&before);
    assert!(most <= 3, "{most} bodies at once");
    let scripts = counts.calls("evalsha") + counts.calls("eval");
    assert!(counts.calls("rpushx") > 0, "{counts:?}");
    assert!(
        scripts as f64 <= 1.5 * f64::from(grants),
        "{scripts} script calls for {grants} grants: {counts:?}"
    );

    let admin = client(&server).await;
    admin.set_permits("export:set", 2).await.unwrap();
    let before = server.counts();
    let most = take_permits_in_turn(&server, "export:set", 3, (4, 4, 10), HOLD).await;
    let counts = server.counts().minus(&before);
    assert!(most <= 2, "{most} bodies at once under the count set");
    assert_eq!(counts.calls("rpushx"), 0, "{counts:?}");
}

/// A holder that stops without releasing (a crash: no release, no renewal) keeps its permit
/// only until its own lease ends, by Redis's clock; the other holder's permit is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_permit_comes_back_at_its_lease_end() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let crashed = a
        .semaphore("report:t1", 2)
        .ttl(Duration::from_millis(400))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let kept = a
        .sibling()
        .semaphore("report:t1", 2)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed);
    let b = a.sibling();
    let third = b
        .semaphore("report:t1", 2)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    // Two permits in use now: the survivor's and the newcomer's.
    assert!(
        b.semaphore("report:t1", 2)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    kept.release().await.unwrap();
    third.release().await.unwrap();
}

/// A release hands its permit to one queued waiter; the others stay queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_its_permit_to_one_waiter() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let holders = [a.clone(), a.sibling()];
    let mut guards = Vec::new();
    for c in &holders {
        let request = c.semaphore("render:x", 2).ttl(Duration::from_secs(60));
        guards.push(request.acquire().await.unwrap());
    }
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let (c, granted_tx) = (a.sibling(), granted_tx.clone());
        waiters.push(tokio::spawn(async move {
            let permit = c
                .semaphore("render:x", 2)
                .wait(PATIENCE)
                .acquire()
                .await
                .unwrap();
            granted_tx.send(()).unwrap();
            // Held until the test ends.
            std::future::pending::<()>().await;
            drop(permit);
        }));
    }
    let mut raw = server.raw().await;
    let queue = "{render:x}:waiters";
    queued_and_listening(&server, "render:x", 3, 3).await;
    guards.pop().unwrap().release().await.unwrap();
    tokio::time::timeout(PATIENCE, granted.recv())
        .await
        .unwrap()
        .unwrap();
    let in_use = permits_in_use(&mut raw, "render:x").await;
    assert_eq!(in_use, 2, "one permit handed on, not more");
    let queued: u32 = redis::cmd("LLEN")
        .arg(queue)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(queued, 2, "the other waiters keep their places");
    for waiter in waiters {
        waiter.abort();
    }
}

/// What a release does in Redis, seen without any client waiting: two waiters stand in the
/// queue as rlock's would (an entry each, and a subscriber on their client's channel), and a
/// holder gives its permit back. The release script itself grants the permit to the first
/// waiter, and tells it alone; the second keeps its place, and the count of permits in use
/// never passes the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_script_grants_the_permit_to_the_first_live_waiter() {
    use futures_util::StreamExt as _;

    let server = RedisServer::start();
    let a = client(&server).await;
    let kept = a.semaphore("render:y", 2).acquire().await.unwrap();
    let released = a.semaphore("render:y", 2).acquire().await.unwrap();
    let mut listener = server.redis_client().get_async_pubsub().await.unwrap();
    for waiter in ["w1", "w2"] {
        listener
            .subscribe(format!("rlock:released:render:y:{waiter}"))
            .await
            .unwrap();
    }
    let mut raw = server.raw().await;
    for waiter in ["w1", "w2"] {
        let _: () = redis::cmd("RPUSH")
            .arg("{render:y}:waiters")
            .arg(format!("{waiter}:1 5000 0 p2"))
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    released.release().await.unwrap();

    let score = |member: &'static str| redis::cmd("ZSCORE").arg("render:y").arg(member).to_owned();
    let first: Option<f64> = score("w1:1").query_async(&mut raw).await.unwrap();
    let second: Option<f64> = score("w2:1").query_async(&mut raw).await.unwrap();
    assert!(first.is_some(), "the first waiter holds the permit");
    assert!(second.is_none(), "the second does not");
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg("{render:y}:waiters")
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(queue, ["w2:1 5000 0 p2"]);
    let in_use = permits_in_use(&mut raw, "render:y").await;
    assert_eq!(in_use, 2);
    let told = tokio::time::timeout(PATIENCE, listener.on_message().next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(told.get_channel_name(), "rlock:released:render:y:w1");
    assert_eq!(told.get_payload::<String>().unwrap(), "w1:1 0");
    kept.release().await.unwrap();
}

/// How far `key`'s expiry is from the end of its latest permit, in ms, read at one instant.
async fn expiry_past_latest_end(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    let (pttl, (secs, micros), latest): (i64, (i64, i64), Vec<(String, f64)>) = redis::pipe()
        .atomic()
        .cmd("PTTL")
        .arg(key)
        .cmd("TIME")
        .cmd("ZREVRANGEBYSCORE")
        .arg(key)
        .arg("+inf")
        .arg("(0")
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(0)
        .arg(1)
        .query_async(raw)
        .await
        .unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    pttl - (latest[0].1 as i64 - now_ms)
}

/// A release that hands its permit on leaves the set's expiry exactly at its latest permit's
/// end, whichever lease is the latest: another holder's (the grant's end is written with
/// `PEXPIREAT … GT` on 7.0 and later, without a look at the set), the grant's, or, when the
/// permit given back was the latest and the grant ends sooner, the next latest (the set is
/// read). A set that outlived its leases would keep the name from any other kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_keeps_the_sets_expiry_at_its_latest_permit() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let mut raw = server.raw().await;
    let _listening = {
        let mut listener = server.redis_client().get_async_pubsub().await.unwrap();
        for key in ["exp:other", "exp:grant", "exp:next"] {
            listener
                .subscribe(format!("rlock:released:{key}:w"))
                .await
                .unwrap();
        }
        listener
    };
    let secs = Duration::from_secs;
    // (key, the kept permit's lease, the released one's, the grant's lease in ms)
    for (key, kept, released, grant) in [
        ("exp:other", secs(60), secs(10), 20_000),
        ("exp:grant", secs(10), secs(10), 30_000),
        ("exp:next", secs(10), secs(60), 5_000),
    ] {
        let kept = a.semaphore(key, 2).ttl(kept).acquire().await.unwrap();
        let released = a.semaphore(key, 2).ttl(released).acquire().await.unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(format!("{{{key}}}:waiters"))
            .arg(format!("w:1 {grant} 0 p2"))
            .query_async(&mut raw)
            .await
            .unwrap();
        released.release().await.unwrap();
        let in_use = permits_in_use(&mut raw, key).await;
        assert_eq!(in_use, 2, "{key}: the permit was handed on");
        let past = expiry_past_latest_end(&mut raw, key).await;
        assert!(
            past.abs() <= 2,
            "{key}: the set expires {past} ms past its latest permit's end"
        );
        kept.release().await.unwrap();
    }
}

/// The count is stored with the permits: another count is an error while one is in use, and
/// free to choose once the last is given back.
async fn one_count_per_semaphore(a: &LockClient) {
    let permit = a.semaphore("pool:db", 3).acquire().await.unwrap();
    let err = a
        .sibling()
        .semaphore("pool:db", 2)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(m) if m.contains("3 permits") && m.contains("names 2")),
        "{err:?}"
    );
    permit.release().await.unwrap();
    let other = a.semaphore("pool:db", 2).acquire().await.unwrap();
    other.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_count_per_semaphore_on_redis() {
    let server = RedisServer::start();
    one_count_per_semaphore(&client(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_count_per_semaphore_in_memory() {
    one_count_per_semaphore(&LockClient::in_memory()).await;
}

/// A name is a lock or a semaphore: asking for a permit of a held lock is an error that says
/// so, not a wait that never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_not_a_semaphore() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.lock("thing:1").acquire().await.unwrap();
    let err = a.semaphore("thing:1", 2).acquire().await.unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::WrongKind {
                asked: KeyKind::Semaphore,
                found: KeyKind::Lock,
                ..
            }
        ),
        "{err:?}"
    );
    lock.release().await.unwrap();
}

/// Inside a locked scope, the same semaphore re-enters the permit held: a task that holds
/// the only permit does not wait on itself.
async fn reentry_takes_no_second_permit(a: &LockClient) {
    let outer = a.semaphore("job:import", 1);
    let inner = outer
        .run(async {
            a.semaphore("job:import", 1)
                .run(async { "inner ran" })
                .await
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inner, "inner ran");
    // Outside any scope, each acquire is a permit of its own.
    let first = a.semaphore("job:export", 2).acquire().await.unwrap();
    let second = a.semaphore("job:export", 2).acquire().await.unwrap();
    assert!(
        a.semaphore("job:export", 2)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_takes_no_second_permit_on_redis() {
    let server = RedisServer::start();
    reentry_takes_no_second_permit(&client(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_takes_no_second_permit_in_memory() {
    reentry_takes_no_second_permit(&LockClient::in_memory()).await;
}

/// Renewal keeps a permit past its first lease; `extend` sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_permit_outlives_its_first_lease() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let permit = a
        .semaphore("upload:u", 1)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    // Several leases long: only renewal keeps it.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!permit.is_lost());
    assert!(
        a.sibling()
            .semaphore("upload:u", 1)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    permit.extend(Duration::from_secs(30)).await.unwrap();
    permit.release().await.unwrap();
    take_and_give_back(&a, Of::Permit(1), "upload:u", Duration::ZERO).await;
}

/// Refused before anything is sent: no permits, a fence, and Redlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_that_cannot_be_kept_are_refused() {
    let memory = LockClient::in_memory();
    for request in [memory.semaphore("s", 0), memory.semaphore("s", 2).fenced()] {
        let err = request.acquire().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = LockClient::connect(&redlock_url(&masters)).await.unwrap();
    let err = redlock.semaphore("s", 2).acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(m) if m.contains("not safe on Redlock")),
        "{err:?}"
    );
}

/// A restart that loses the data set takes every permit with it: a holder's next renewal
/// finds its permit gone and `lost()` fires, and the semaphore starts anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_loses_the_permits_is_a_lost_lease() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let permit = a
        .semaphore("batch:b", 2)
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    server.restart();
    tokio::time::timeout(PATIENCE, permit.lost()).await.unwrap();
    assert!(permit.release().await.unwrap_err().is_lost());
    let fresh = a
        .semaphore("batch:b", 3)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    fresh.release().await.unwrap();
}

/// On Redis Cluster a semaphore's set and its queue share a slot: permits are counted and
/// handed on as on one server, the release announced on the key's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_on_a_cluster() {
    let cluster = rlock_tests::deploy::ClusterDeployment::start();
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    let b = LockClient::connect(&cluster.url()).await.unwrap();
    let first = a.semaphore("export:c1", 2).acquire().await.unwrap();
    let second = b.semaphore("export:c1", 2).acquire().await.unwrap();
    assert!(
        b.semaphore("export:c1", 2)
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let permit = b
                .semaphore("export:c1", 2)
                .wait(PATIENCE)
                .acquire()
                .await
                .unwrap();
            permit.release().await.unwrap();
        })
    };
    first.release().await.unwrap();
    tokio::time::timeout(PATIENCE, waiter)
        .await
        .unwrap()
        .unwrap();
    second.release().await.unwrap();
    let node = cluster.master_of_key("export:c1").unwrap();
    let mut raw = node.raw().await;
    let left = keys_left(&mut raw, &["export:c1", "{export:c1}:waiters"]).await;
    assert_eq!(left, 0, "nothing is left behind");
}

/// An operator's view: the permits in use, the count, who holds them here and how many wait;
/// then every permit given back by force, the first going to the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_unlock_a_semaphore() {
    let server = RedisServer::start();
    let ops = client(&server).await;
    let elsewhere = ops.sibling();
    let here = ops.semaphore("ops:s", 2).acquire().await.unwrap();
    let there = elsewhere.semaphore("ops:s", 2).acquire().await.unwrap();
    let waiter = {
        let c = ops.sibling();
        tokio::spawn(async move {
            let permit = c.semaphore("ops:s", 2).wait(PATIENCE).acquire().await?;
            permit.release().await
        })
    };
    let mut info = ops.inspect_semaphore("ops:s").await.unwrap();
    for _ in 0..3000 {
        if info.waiters == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        info = ops.inspect_semaphore("ops:s").await.unwrap();
    }
    assert_eq!(
        (info.permits, info.in_use, info.held_here, info.waiters),
        (2, 2, 1, Some(1)),
        "{info:?}"
    );
    assert!(info.next_end.is_some(), "{info:?}");

    assert_eq!(ops.force_unlock_semaphore("ops:s").await.unwrap(), 2);
    assert!(here.is_lost(), "a hold of this client is lost at once");
    tokio::time::timeout(PATIENCE, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(there.release().await.unwrap_err().is_lost());
    let after = ops.inspect_semaphore("ops:s").await.unwrap();
    assert_eq!((after.permits, after.in_use), (0, 0), "{after:?}");
    assert_eq!(ops.metrics().forced_unlocks, 2);
}

/// A permit's holder whose process is stopped past its lease (a GC pause, a VM migration):
/// its permit goes to another instance at the lease's end, by Redis's clock, and on resuming
/// the holder is told it lost it; its late release gives back nothing of the new holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_holder_stopped_past_its_lease_is_told_it_lost_it() {
    use rlock_tests::child::LineChild;
    use rlock_tests::protocol::{Command, Line, Outcome};
    use rlock_tests::worker::{Hold, HoldKind};

    let server = RedisServer::start();
    let hold = Hold {
        redis: server.url(),
        key: "render:stopped".into(),
        ttl_ms: 600,
        renew: true,
        kind: HoldKind::Permit,
        permits: 1,
        take_over: None,
    };
    let mut holder = LineChild::start(env!("CARGO_BIN_EXE_worker"), &hold.args());
    assert!(matches!(holder.line(), Some(Line::Acquired { .. })));
    holder.signal("-STOP");
    let other = client(&server).await;
    let permit = other
        .semaphore("render:stopped", 1)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    holder.signal("-CONT");
    assert_eq!(holder.ask(Command::WaitLost), Some(Line::Lost(true)));
    assert_eq!(
        holder.ask(Command::Release),
        Some(Line::Released(Outcome::Lost))
    );
    let info = other.inspect_semaphore("render:stopped").await.unwrap();
    assert_eq!((info.in_use, info.held_here), (1, 1), "{info:?}");
    permit.release().await.unwrap();
}

/// A waiter cancelled at any moment around a release (queued, handed the permit, adopting
/// it, holding it) leaves nothing behind: its entry is withdrawn, a permit handed to it is
/// given back, and an arrival whose answer it never read is released in the background.
/// Permits are asked for a minute, so one left behind would outlast the check by far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_is_never_left_holding_a_permit() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let long = Duration::from_secs(60);
    for round in 0..24u64 {
        let held = a
            .semaphore("render:c", 1)
            .ttl(long)
            .wait(PATIENCE)
            .acquire()
            .await
            .unwrap();
        let waiter = {
            let c = a.sibling();
            tokio::spawn(async move {
                let permit = c
                    .semaphore("render:c", 1)
                    .ttl(long)
                    .wait(PATIENCE)
                    .acquire()
                    .await?;
                permit.release().await
            })
        };
        cancel_around_release(round, held, waiter).await;
    }
    let mut raw = server.raw().await;
    let left = keys_left(&mut raw, &["render:c", "{render:c}:waiters"]).await;
    assert_eq!(left, 0, "a permit or an entry was left behind");
}

/// Behind Sentinel, a failover moves the semaphore with the master: afterwards a permit is
/// taken on the new master, every permit held before is renewed there or reported lost, and
/// the new master never counts more permits in use than the semaphore has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_follow_a_sentinel_failover() {
    let deployment = rlock_tests::deploy::SentinelDeployment::start();
    // A short command timeout, so that the failover is seen at once; on a loaded machine
    // the first connection (Sentinel, then the master) may need more than one try.
    let connect = || async {
        let mut tries = 0;
        loop {
            let client = LockClient::builder()
                .url(deployment.url().as_str())
                .command_timeout(Duration::from_millis(300))
                .connect()
                .await;
            tries += 1;
            match client {
                Ok(client) => break client,
                Err(e) if tries < 20 => eprintln!("connecting, try {tries}: {e}"),
                Err(e) => panic!("cannot connect through Sentinel: {e}"),
            }
        }
    };
    let (a, b) = (connect().await, connect().await);
    let mut held = Vec::new();
    for _ in 0..2 {
        let request = a.semaphore("export:s", 3).ttl(Duration::from_secs(2));
        held.push(request.acquire().await.unwrap());
    }
    // Let replication carry them over, as it normally would before a crash.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let new_master = deployment.fail_over();

    // Waiting retries failed attempts within its budget: it serves again on the new master.
    let after = b
        .semaphore("export:s", 3)
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    // A few renewal periods on the new master.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut raw = new_master.raw().await;
    let owners: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("export:s")
        .arg(0)
        .arg("+inf")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(owners.len() <= 3, "{owners:?}");
    assert!(owners.iter().any(|t| t == after.token()), "{owners:?}");
    for guard in &held {
        assert!(
            guard.is_lost() || owners.iter().any(|t| t == guard.token()),
            "a permit missing on the new master was kept"
        );
    }
    after.release().await.unwrap();
}
