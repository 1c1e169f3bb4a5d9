//! The lease under races and delays: `extend()` racing a watchdog renewal never shortens
//! the lease silently, and a grant whose reply arrives after its lease ended is not handed
//! out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock_runtime::{LockClient, LockError, LockGuard, Operation};
use rlock_tests::RedisServer;
use rlock_tests::locking::{client_at, client_for};
use rlock_tests::proxy::FaultProxy;

/// What a holder shares with the contender of its key: the number of the hold and its guard
/// while it holds, so the contender can read `is_lost()` the moment it is granted the key.
type Slot = Arc<Mutex<Option<(usize, Arc<LockGuard>)>>>;

#[derive(Debug, Default)]
struct RaceTally {
    holds: usize,
    extended: usize,
    extend_errors: BTreeMap<String, usize>,
    acquire_errors: BTreeMap<String, usize>,
    lost: usize,
    /// Holds (key, number) during which the contender got the key while the holder did not
    /// know its lease was lost.
    violations: std::collections::BTreeSet<(String, usize)>,
}

/// Holds `keys` keys in parallel, `holds_per_key` times each in sequence, through `holder`:
/// ttl 300 ms with renewal, `extend(30 s)` at a random moment 0-250 ms into the hold (mostly
/// right at a renewal), then 350 ms more. A contender (another client, straight to Redis) tries each key every few ms.
async fn extend_race(holder: LockClient, contender: LockClient, keys: usize, holds_per_key: usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(RaceTally::default()));
    let mut holders = tokio::task::JoinSet::new();
    let mut contenders = tokio::task::JoinSet::new();
    for k in 0..keys {
        let key = format!("race:{k}");
        let slot: Slot = Arc::new(Mutex::new(None));
        {
            let (contender, key, slot, stop, tally) = (
                contender.clone(),
                key.clone(),
                slot.clone(),
                stop.clone(),
                tally.clone(),
            );
            contenders.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(grant) = contender
                        .lock(key.as_str())
                        .ttl(Duration::from_millis(50))
                        .renew(false)
                        .acquire()
                        .await
                    {
                        // Read the holder's state before anything else can change it.
                        let holder = slot
                            .lock()
                            .unwrap()
                            .as_ref()
                            .map(|(hold, g)| (*hold, g.is_lost()));
                        if let Some((hold, false)) = holder {
                            tally.lock().unwrap().violations.insert((key.clone(), hold));
                        }
                        let _ = grant.release().await;
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            });
        }
        let (holder, tally) = (holder.clone(), tally.clone());
        holders.spawn(async move {
            let mut rng = fastrand::Rng::new();
            for hold in 0..holds_per_key {
                let guard = match holder
                    .lock(key.as_str())
                    .ttl(Duration::from_millis(300))
                    .wait(Duration::from_secs(5))
                    .acquire()
                    .await
                {
                    Ok(guard) => Arc::new(guard),
                    Err(e) => {
                        *tally
                            .lock()
                            .unwrap()
                            .acquire_errors
                            .entry(e.to_string())
                            .or_default() += 1;
                        continue;
                    }
                };
                *slot.lock().unwrap() = Some((hold, guard.clone()));
                // Any moment in 0-250 ms, or (two times in three) one of the moments the
                // watchdog renews (every ttl/3 after the grant), where the race is likeliest.
                let at = match rng.u8(0..3) {
                    0 => rng.u64(0..=250),
                    _ => rng.u64(1..=2) * 100 - rng.u64(0..=2),
                };
                tokio::time::sleep(Duration::from_millis(at)).await;
                let extended = guard.extend(Duration::from_secs(30)).await;
                tokio::time::sleep(Duration::from_millis(350)).await;
                let taken = slot.lock().unwrap().take();
                drop(taken);
                {
                    let mut t = tally.lock().unwrap();
                    t.holds += 1;
                    match &extended {
                        Ok(()) => t.extended += 1,
                        Err(e) => *t.extend_errors.entry(e.to_string()).or_default() += 1,
                    }
                    if guard.is_lost() {
                        t.lost += 1;
                    }
                }
                if let Ok(guard) = Arc::try_unwrap(guard) {
                    let _ = guard.release().await;
                }
            }
        });
    }
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(done) = holders.join_next().await {
            done.unwrap();
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = contenders.join_next().await {
        done.unwrap();
    }
    assert!(finished.is_ok(), "the holders did not finish within 60 s");
    let t = tally.lock().unwrap();
    eprintln!(
        "extend race: {} holds, {} extended, {} lost, {} violations; extend errors {:?}, \
         acquire errors {:?}; holder {:?}",
        t.holds,
        t.extended,
        t.lost,
        t.violations.len(),
        t.extend_errors,
        t.acquire_errors,
        holder.metrics()
    );
    assert!(
        t.violations.is_empty(),
        "{} of {} holds had their lease cut short silently after extend(30s): the contender \
         got the key while the holder held it and its is_lost() was false (key, hold: {:?}); \
         {} lost, extend errors {:?}; holder {:?}",
        t.violations.len(),
        t.holds,
        t.violations.iter().take(5).collect::<Vec<_>>(),
        t.lost,
        t.extend_errors,
        holder.metrics()
    );
    assert!(
        t.holds >= keys * holds_per_key * 9 / 10,
        "only {} of {} holds happened; acquire errors {:?}",
        t.holds,
        keys * holds_per_key,
        t.acquire_errors
    );
}

/// `extend()` racing a watchdog renewal never shortens the lease silently: when the renewal
/// (with the old 300 ms ttl) is sent after the extend (30 s) but its reply is handled first,
/// a client that believed in the 30 s lease while Redis held 300 ms would lose the key to
/// another client with its `lost()` silent. Direct connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_racing_a_renewal_never_shortens_the_lease_silently() {
    let server = RedisServer::start();
    let holder = client_for(&server, Duration::from_secs(2)).await;
    let contender = client_for(&server, Duration::from_secs(2)).await;
    extend_race(holder, contender, 10, 30).await;
}

/// The same race, with the holder behind a slow, bursty network (3 ms each way, flushed
/// every 2 ms): the extend's round trip is long enough for a renewal to be sent inside it,
/// and both replies arrive in one burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_racing_a_renewal_through_a_slow_bursty_network() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    proxy.set_delay(Duration::from_millis(3));
    proxy.set_batching(Some(Duration::from_millis(2)));
    let holder = client_at(&proxy.url(), Duration::from_secs(2)).await;
    let contender = client_for(&server, Duration::from_secs(2)).await;
    extend_race(holder, contender, 10, 30).await;
}

/// A grant whose reply arrives after the lease it grants could have ended (a stalled process,
/// a slow network) is not handed out: by then the lock may be another holder's, and the late
/// holder would run unprotected with `lost()` silent (in the soak: a worker frozen past the
/// ttl, resuming to hold a lease another worker has been granted since).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_arrives_after_its_lease_ended_is_not_handed_out() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let slow = client_at(&proxy.url(), Duration::from_secs(3)).await;
    let other = client_for(&server, Duration::from_secs(2)).await;
    // Connected; from now on every chunk takes 300 ms each way. The grant lands in Redis
    // about 300 ms after it is sent, its 200 ms lease ends about 500 ms in, and the reply
    // comes about 600 ms in.
    proxy.set_delay(Duration::from_millis(300));
    let ttl = Duration::from_millis(200);
    let late = slow.lock("late").ttl(ttl).fenced().acquire().await;
    match late {
        Err(LockError::Timeout { operation, .. }) => assert_eq!(operation, Operation::Acquire),
        Ok(guard) => panic!(
            "a lease that had ended was handed out (is_lost() = {})",
            guard.is_lost()
        ),
        Err(e) => panic!("unexpected error: {e}"),
    }
    // Nothing is left behind: another client takes the key at once, or when the late lease
    // has ended.
    let taken = other
        .lock("late")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    taken.release().await.unwrap();
    proxy.set_delay(Duration::ZERO);
}
