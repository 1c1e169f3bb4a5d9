//! The lock's semantics, run once against a real `redis-server` and once against the in-memory
//! backend: every test here is one `async fn check_…(&Fixture)`, and `both!` makes the pair.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::{LockClient, LockError, LockOptions};
use rlock_tests::RedisServer;
use rlock_tests::locking::lock_and_release;

/// One backend under test: a client, and the server behind it when there is one.
struct Fixture {
    client: LockClient,
    server: Option<RedisServer>,
}

impl Fixture {
    async fn redis() -> Self {
        let server = RedisServer::start();
        let client = LockClient::connect(&server.url()).await.unwrap();
        Self {
            client,
            server: Some(server),
        }
    }

    fn memory() -> Self {
        Self {
            client: LockClient::in_memory(),
            server: None,
        }
    }

    /// Another service instance on the same backend.
    fn other_instance(&self) -> LockClient {
        self.client.sibling()
    }
}

macro_rules! both {
    ($($check:ident),* $(,)?) => {
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Fixture::redis().await).await;
                }
            )*
        }
        mod in_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Fixture::memory()).await;
                }
            )*
        }
    };
}

both!(
    busy_while_held_and_free_after_release,
    stale_holder_cannot_release_the_next_holders_lock,
    stale_holder_cannot_extend_the_next_holders_lock,
    lease_expires_on_its_own,
    waiting_gets_the_lock_when_released,
    reentry_in_the_same_call_chain,
    spawned_task_does_not_inherit_the_hold,
    fences_strictly_increase_across_holders_and_expiry,
    dropped_guard_releases_in_the_background,
    extend_keeps_the_lock_past_its_first_lease,
    namespace_separates_clients,
    invalid_keys_are_errors,
    min_hold_keeps_the_key_after_an_early_release,
    min_hold_keeps_the_key_after_a_dropped_guard,
    min_hold_kept_key_goes_to_a_waiter_when_it_ends,
    a_release_after_min_hold_is_an_ordinary_release,
    absurd_min_holds_are_errors,
    a_job_extends_its_min_hold,
    extending_a_min_hold_is_refused_when_it_cannot_hold,
);

/// A job lock released before its `min_hold` leaves the key taken, for what is left of
/// `min_hold` rather than the ttl, and `with_lock` keeps it the same way.
async fn min_hold_keeps_the_key_after_an_early_release(f: &Fixture) {
    let other = f.other_instance();
    let run = f
        .client
        .lock("job:report")
        .ttl(Duration::from_secs(2))
        .min_hold(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    run.release().await.unwrap();
    assert!(
        other
            .lock("job:report")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    let info = other.inspect("job:report").await.unwrap();
    assert!(info.held && !info.held_here, "{info:?}");
    let left = info.remaining.unwrap();
    assert!(
        left > Duration::from_secs(2),
        "kept for what is left of min_hold, not the ttl: {left:?}"
    );
    assert!(other.force_unlock("job:report").await.unwrap());
    lock_and_release(&other, "job:report", Duration::ZERO).await;

    let options = LockOptions::new().min_hold(Duration::from_secs(60));
    f.client
        .with_lock("job:sweep", options, async {})
        .await
        .unwrap();
    assert!(
        other
            .lock("job:sweep")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
}

/// A guard dropped before `min_hold` is released in the background the same way: the key
/// stays taken past the ttl.
async fn min_hold_keeps_the_key_after_a_dropped_guard(f: &Fixture) {
    let ttl = Duration::from_secs(2);
    let run = f
        .client
        .lock("job:dropped")
        .ttl(ttl)
        .min_hold(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    drop(run);
    // The background release lands within moments; until it does, the lease is the ttl's.
    let mut kept = None;
    for _ in 0..500 {
        let info = f.client.inspect("job:dropped").await.unwrap();
        if info.remaining.is_some_and(|left| left > ttl) && !info.held_here {
            kept = Some(info);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = kept.expect("the dropped guard's release kept the key for its min_hold");
    assert!(kept.held, "{kept:?}");
    assert!(
        f.other_instance()
            .lock("job:dropped")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
}

/// Nobody is handed a kept key, but a waiter takes it once `min_hold` ends.
async fn min_hold_kept_key_goes_to_a_waiter_when_it_ends(f: &Fixture) {
    let run = f
        .client
        .lock("job:queued")
        .ttl(Duration::from_secs(10))
        .min_hold(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let other = f.other_instance();
    let waiter = tokio::spawn(async move {
        other
            .lock("job:queued")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .map(|guard| guard.token().to_owned())
    });
    run.release().await.unwrap();
    let token = waiter.await.unwrap().unwrap();
    assert_ne!(token, "");
}

/// Once `min_hold` has passed, a release deletes the key (or hands it on) as usual.
async fn a_release_after_min_hold_is_an_ordinary_release(f: &Fixture) {
    let run = f
        .client
        .lock("job:long")
        .min_hold(Duration::from_millis(20))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    run.release().await.unwrap();
    assert!(!f.client.inspect("job:long").await.unwrap().held);
    lock_and_release(&f.other_instance(), "job:long", Duration::ZERO).await;
}

/// `min_hold` beyond the longest lease, or beyond `max_hold`, is refused before anything is
/// sent.
async fn absurd_min_holds_are_errors(f: &Fixture) {
    for request in [
        f.client.lock("job:x").min_hold(Duration::from_secs(90_000)),
        f.client
            .lock("job:x")
            .min_hold(Duration::from_secs(600))
            .max_hold(Duration::from_secs(300)),
    ] {
        let err = request.acquire().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
}

/// A job that extends its `min_hold` while it runs (ShedLock's `extend`) keeps the key for
/// the new one after an early release, and a shorter extension never shortens it: the key
/// is kept past its ttl and past the first `min_hold`, for whoever is left of the longer.
async fn a_job_extends_its_min_hold(f: &Fixture) {
    let other = f.other_instance();
    let run = f
        .client
        .lock("job:extended")
        .ttl(Duration::from_secs(2))
        .min_hold(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    run.extend_min_hold(Duration::from_secs(60)).unwrap();
    run.extend_min_hold(Duration::from_millis(10)).unwrap();
    run.release().await.unwrap();
    let info = other.inspect("job:extended").await.unwrap();
    assert!(info.held && !info.held_here, "{info:?}");
    let left = info.remaining.unwrap();
    assert!(
        left > Duration::from_secs(30),
        "kept for the extended min_hold, not the ttl or the first one: {left:?}"
    );
    assert!(
        other
            .lock("job:extended")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    // Without a min_hold at the start, an extension alone keeps the key too.
    let plain = f.client.lock("job:later").acquire().await.unwrap();
    plain.extend_min_hold(Duration::from_secs(60)).unwrap();
    plain.release().await.unwrap();
    assert!(other.inspect("job:later").await.unwrap().held);
}

/// An extension past the longest lease, past the guard's `max_hold`, or of a lease already
/// lost, is refused, and changes nothing.
async fn extending_a_min_hold_is_refused_when_it_cannot_hold(f: &Fixture) {
    let run = f
        .client
        .lock("job:capped")
        .max_hold(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    for at_least in [Duration::from_secs(90_000), Duration::from_secs(120)] {
        let err = run.extend_min_hold(at_least).unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
    run.release().await.unwrap();
    assert!(!f.client.inspect("job:capped").await.unwrap().held);

    let lapsed = f
        .client
        .lock("job:lapsed")
        .ttl(Duration::from_millis(50))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    lapsed.lost().await;
    let err = lapsed.extend_min_hold(Duration::from_secs(10)).unwrap_err();
    assert!(err.is_lost(), "{err:?}");
}

async fn busy_while_held_and_free_after_release(f: &Fixture) {
    let a = &f.client;
    let b = f.other_instance();
    let guard = a.lock("order:1").acquire().await.unwrap();
    let err = b.lock("order:1").acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::Busy { key, .. } if key == "order:1"),
        "{err:?}"
    );
    guard.release().await.unwrap();
    lock_and_release(&b, "order:1", Duration::ZERO).await;
}

async fn stale_holder_cannot_release_the_next_holders_lock(f: &Fixture) {
    // Holder A's lease ends while it is still "working" (a GC pause, a slow call); B takes
    // the lock; A's late release must report the loss and leave B's lock alone.
    // Renewal off: this holder's lease really ends (the watchdog case is tested apart).
    let a = f
        .client
        .lock("stock:9")
        .ttl(Duration::from_millis(100))
        .renew(false);
    let a = a.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let b_client = f.other_instance();
    let b = b_client.lock("stock:9").acquire().await.unwrap();

    let err = a.release().await.unwrap_err();
    assert!(err.is_lost(), "{err:?}");

    let c = f.other_instance();
    assert!(c.lock("stock:9").acquire().await.unwrap_err().is_busy());
    if let Some(server) = &f.server {
        let mut raw = server.raw().await;
        let stored: Option<String> = redis::cmd("GET")
            .arg("stock:9")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(stored.as_deref(), Some(b.token()));
    }
    b.release().await.unwrap();
}

async fn stale_holder_cannot_extend_the_next_holders_lock(f: &Fixture) {
    let a = f
        .client
        .lock("stock:10")
        .ttl(Duration::from_millis(100))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let b_client = f.other_instance();
    let b = b_client
        .lock("stock:10")
        .ttl(Duration::from_millis(500))
        .acquire()
        .await
        .unwrap();
    assert!(
        a.extend(Duration::from_secs(60))
            .await
            .unwrap_err()
            .is_lost()
    );
    assert!(a.is_lost());
    b.release().await.unwrap();
}

async fn lease_expires_on_its_own(f: &Fixture) {
    let guard = f
        .client
        .lock("crash:1")
        .ttl(Duration::from_millis(150))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    // The holder "crashes": the guard is forgotten, so nothing ever releases or renews it.
    std::mem::forget(guard);
    let other = f.other_instance();
    let got = other
        .lock("crash:1")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    got.release().await.unwrap();
}

async fn waiting_gets_the_lock_when_released(f: &Fixture) {
    let holder = f.client.lock("queue:1").acquire().await.unwrap();
    let waiter = f.other_instance();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock("queue:1")
            .wait(Duration::from_secs(10))
            .acquire()
            .await?;
        guard.release().await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.unwrap();
    waiting.await.unwrap().unwrap();

    // A waiter whose budget runs out is told how long it waited.
    let _holder = f.client.lock("queue:2").acquire().await.unwrap();
    let err = f
        .other_instance()
        .lock("queue:2")
        .wait(Duration::from_millis(120))
        .acquire()
        .await
        .unwrap_err();
    match err {
        LockError::Busy { waited, .. } => assert!(waited >= Duration::from_millis(120)),
        other => panic!("expected busy, got {other:?}"),
    }
}

async fn reentry_in_the_same_call_chain(f: &Fixture) {
    let client = &f.client;
    let outer_fence = client
        .with_lock("cart:5", LockOptions::new(), async {
            let outer = client.lock("cart:5").acquire().await.unwrap();
            assert!(outer.fence().is_none(), "a fence nobody asked for");
            assert!(outer.is_reentrant());
            let inner_fence = client
                .with_lock("cart:5", LockOptions::new(), async {
                    let again = client.lock("cart:5").acquire().await.unwrap();
                    let fence = again.fence();
                    again.release().await.unwrap();
                    fence
                })
                .await
                .unwrap();
            assert_eq!(inner_fence, outer.fence());
            outer.release().await.unwrap();
            // Inner releases only drop the hold count: the lock is still held.
            assert!(
                f.other_instance()
                    .lock("cart:5")
                    .acquire()
                    .await
                    .unwrap_err()
                    .is_busy()
            );
            inner_fence
        })
        .await
        .unwrap();
    assert_eq!(outer_fence, None);
    // The outermost release deleted it.
    lock_and_release(&f.other_instance(), "cart:5", Duration::ZERO).await;
}

async fn spawned_task_does_not_inherit_the_hold(f: &Fixture) {
    let client = f.client.clone();
    f.client
        .with_lock("job:1", LockOptions::new(), async move {
            let spawned = tokio::spawn(async move { client.lock("job:1").acquire().await });
            let err = spawned.await.unwrap().unwrap_err();
            assert!(err.is_busy(), "{err:?}");
        })
        .await
        .unwrap();
}

async fn fences_strictly_increase_across_holders_and_expiry(f: &Fixture) {
    let mut last = 0;
    for round in 0..6 {
        let client = if round % 2 == 0 {
            f.client.clone()
        } else {
            f.other_instance()
        };
        let guard = client
            .lock("ledger:1")
            .fenced()
            .ttl(Duration::from_millis(60))
            .renew(false)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        let fence = guard.fence().unwrap().get();
        assert!(fence > last, "fence {fence} after {last} in round {round}");
        last = fence;
        match round % 3 {
            0 => guard.release().await.unwrap(),
            // Let the lease (and the fence record with it) expire.
            1 => {
                std::mem::forget(guard);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            _ => drop(guard),
        }
    }
    // A client connected afresh continues the sequence.
    if let Some(server) = &f.server {
        let fresh = LockClient::connect(&server.url()).await.unwrap();
        let guard = fresh
            .lock("ledger:1")
            .fenced()
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        assert!(guard.fence().unwrap().get() > last);
        guard.release().await.unwrap();
    }
}

async fn dropped_guard_releases_in_the_background(f: &Fixture) {
    let guard = f
        .client
        .lock("drop:1")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    drop(guard);
    // Released well before the 60 s lease: a second instance gets it while waiting briefly.
    lock_and_release(&f.other_instance(), "drop:1", Duration::from_secs(5)).await;
}

async fn extend_keeps_the_lock_past_its_first_lease(f: &Fixture) {
    let guard = f
        .client
        .lock("long:1")
        .ttl(Duration::from_millis(150))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(75)).await;
        guard.extend(Duration::from_millis(150)).await.unwrap();
    }
    assert!(
        f.other_instance()
            .lock("long:1")
            .acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    guard.release().await.unwrap();
}

async fn namespace_separates_clients(f: &Fixture) {
    let (shop, billing) = match &f.server {
        Some(server) => (
            LockClient::builder()
                .url(server.url())
                .namespace("shop")
                .connect()
                .await
                .unwrap(),
            LockClient::builder()
                .url(server.url())
                .namespace("billing")
                .connect()
                .await
                .unwrap(),
        ),
        None => (
            LockClient::builder().namespace("shop").in_memory(),
            LockClient::builder().namespace("billing").in_memory(),
        ),
    };
    let a = shop.lock("order:1").acquire().await.unwrap();
    let b = billing.lock("order:1").acquire().await.unwrap();
    assert_eq!(shop.redis_key(a.key()), "shop:order:1");
    if let Some(server) = &f.server {
        let mut raw = server.raw().await;
        let stored: Option<String> = redis::cmd("GET")
            .arg("shop:order:1")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(stored.as_deref(), Some(a.token()));
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
}

async fn invalid_keys_are_errors(f: &Fixture) {
    let err = f.client.lock("").acquire().await.unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    let long = "k".repeat(5000);
    let err = f.client.lock(long).acquire().await.unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    let err = f
        .client
        .lock("zero")
        .ttl(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");

    // Absurd durations are refused before anything reaches the backend, never a panic.
    for request in [
        f.client.lock("huge").ttl(Duration::MAX),
        f.client.lock("huge").max_hold(Duration::MAX),
    ] {
        let err = request.acquire().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
    let guard = f.client.lock("huge").acquire().await.unwrap();
    let err = guard.extend(Duration::MAX).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    guard.release().await.unwrap();

    // Names where other locks keep their fencing records are not lock names.
    let err = f
        .client
        .lock("{order:42}:fence")
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    lock_and_release(&f.client, "order:fence", Duration::ZERO).await;
}
