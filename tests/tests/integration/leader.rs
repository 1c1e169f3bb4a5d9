//! Leader election (`LockClient::leader`) against a real `redis-server` (and on Redis Cluster
//! and through Sentinel): one leader at a time, every new leader's term greater than the last, a leader killed or stopped past its
//! lease replaced and its stale term refused by a fenced store, the loop form cancelling the
//! leader's work before another instance's work starts, and observers told who leads.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlock_runtime::{LeaderInfo, LockClient};
use rlock_tests::RedisServer;
use rlock_tests::child::LineChild;
use rlock_tests::deploy::{ClusterDeployment, SentinelDeployment};
use rlock_tests::locking::{PATIENCE, client_at};
use rlock_tests::protocol::{Command, Line, Outcome};
use rlock_tests::proxy::FaultProxy;
use rlock_tests::worker::{Hold, HoldKind};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

/// A store that keeps the highest term it has seen and refuses a write under a lower one,
/// as the fenced SQL row of the shop does (`UPDATE … WHERE fence <= $term`).
#[derive(Default)]
struct FencedStore {
    highest: Mutex<u64>,
}

impl FencedStore {
    fn write(&self, term: u64) -> bool {
        let mut highest = self.highest.lock().unwrap();
        if term < *highest {
            return false;
        }
        *highest = term;
        true
    }
}

/// Reads who leads until `until` says so, for at most [`PATIENCE`]: the holder card that
/// names a leader is posted about a second into its leadership.
async fn observed(
    client: &LockClient,
    name: &str,
    until: impl Fn(&Option<LeaderInfo>) -> bool,
) -> Option<LeaderInfo> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = client.leader(name).observe().await.unwrap();
        if until(&now) || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A leader process (the `hold` worker as a leader) on `name`, with its token and term.
fn start_leader(server: &RedisServer, name: &str, ttl_ms: u64) -> (LineChild, String, u64) {
    let hold = Hold {
        redis: server.url(),
        key: name.to_owned(),
        ttl_ms,
        renew: true,
        kind: HoldKind::Leader,
        permits: 1,
        take_over: None,
    };
    let mut leader = LineChild::start(WORKER, &hold.args());
    match leader.line() {
        Some(Line::Acquired {
            token,
            fence: Some(term),
        }) => (leader, token, term),
        other => panic!("the leader process was not elected: {other:?}"),
    }
}

#[tokio::test]
async fn one_leader_at_a_time_each_term_greater_and_observers_told_who() {
    let server = RedisServer::start();
    elected_in_turn_at(&server.url()).await;
}

/// The same on Redis Cluster: the seat, its queue and its fence record share a slot, and the
/// waiting candidate hears the resignation on the seat's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_a_cluster() {
    let cluster = ClusterDeployment::start();
    elected_in_turn_at(&cluster.url()).await;
}

/// The same through Sentinel: the seat on the master the sentinels name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_through_sentinel() {
    let deployment = SentinelDeployment::start();
    elected_in_turn_at(&deployment.url()).await;
}

/// [`elected_in_turn`] with three clients of the deployment at `url`.
async fn elected_in_turn_at(url: &str) {
    let (a, b, c) = (client(url).await, client(url).await, client(url).await);
    elected_in_turn(&a, &b, &c).await;
}

/// `a` leads and `b` finds the seat taken; the observer `c` sees `a`, with its term and
/// identity once its card is up; `a` resigns and the waiting `b` leads under a greater term;
/// `c`'s changes report `b`, then nobody once `b` resigns.
async fn elected_in_turn(a: &LockClient, b: &LockClient, c: &LockClient) {
    assert!(c.leader("billing").observe().await.unwrap().is_none());

    let lead = a.leader("billing").campaign().await.unwrap();
    let busy = b.leader("billing").campaign().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");

    // An observer sees the leader at once, and its term and identity once its card is up.
    let seen = observed(c, "billing", |now| {
        now.as_ref().is_some_and(|info| info.term.is_some())
    })
    .await
    .unwrap();
    assert_eq!(seen.token, lead.token());
    assert_eq!(seen.term, Some(lead.term()));
    assert_eq!(seen.holder.as_ref(), Some(a.identity()));
    assert!(seen.since.is_some() && !seen.here);

    // Resigning hands the seat to the waiting candidate at once, under a greater term.
    let first = lead.term();
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.leader("billing")
                .wait(PATIENCE)
                .campaign()
                .await
                .map(|lead| (lead.term(), lead))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    lead.resign().await.unwrap();
    let (second, lead) = waiting.await.unwrap().unwrap();
    assert!(second > first, "{second} after {first}");
    assert!(lead.token() != seen.token);

    // Changes: the current leader at once, then nobody once it resigns.
    let mut changes = c.leader("billing").changes().unwrap();
    assert_eq!(changes.next().await.unwrap().unwrap().token, lead.token());
    lead.resign().await.unwrap();
    assert_eq!(changes.next().await.unwrap(), None);
}

async fn client(url: &str) -> LockClient {
    client_at(url, Duration::from_secs(2)).await
}

/// A leader killed (SIGKILL) is replaced once its lease ends; a leader stopped (SIGSTOP) past
/// its lease is replaced too, learns on waking that it lost, and its stale term is refused
/// by the store its successor wrote to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_stopped_leaders_are_replaced_and_their_terms_fenced_out() {
    let server = RedisServer::start();
    let follower = client(&server.url()).await;
    let store = FencedStore::default();

    for stop in [false, true] {
        let (mut leader, token, old_term) = start_leader(&server, "sweeper", 1_000);
        assert!(store.write(old_term));
        if stop {
            leader.signal("-STOP");
        } else {
            leader.signal("-KILL");
        }
        let lead = follower
            .leader("sweeper")
            .ttl(Duration::from_secs(1))
            .wait(PATIENCE)
            .campaign()
            .await
            .unwrap_or_else(|e| panic!("stop={stop}: no new leader: {e}"));
        assert!(lead.token() != token);
        assert!(lead.term() > old_term, "{} after {old_term}", lead.term());
        assert!(store.write(lead.term()));
        if stop {
            leader.signal("-CONT");
            assert_eq!(leader.ask(Command::WaitLost), Some(Line::Lost(true)));
            // The woken former leader's write, under its old term, is refused.
            assert!(!store.write(old_term));
            assert_eq!(
                leader.ask(Command::Release),
                Some(Line::Released(Outcome::Lost))
            );
        }
        lead.resign().await.unwrap();
    }
}

/// The loop form: the leader's work is dropped when leadership is lost (here, a partition
/// from Redis), before the other instance's work starts under a greater term; once the
/// other's work returns, `run` resigns and returns its output, and the first instance,
/// healed, leads again under a greater term still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancels_the_work_on_loss_before_another_instance_leads() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let a = client_at(&proxy.url(), Duration::from_millis(300)).await;
    let b = client(&server.url()).await;
    let history = History::default();
    let work = |me: char, history: History, done: Arc<tokio::sync::Notify>| {
        move |term: u64| {
            let history = history.clone();
            let done = done.clone();
            async move {
                let at = {
                    let mut works = history.lock().unwrap();
                    works.push(Work {
                        who: me,
                        term,
                        started: Instant::now(),
                        ended: None,
                    });
                    works.len() - 1
                };
                let _ends = Ends(history.clone(), at);
                done.notified().await;
                term
            }
        }
    };
    let (a_done, b_done) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let ttl = Duration::from_millis(900);
    let a_run = tokio::spawn({
        let a = a.clone();
        let w = work('a', history.clone(), a_done.clone());
        async move { a.leader("billing").ttl(ttl).run(w).await }
    });
    wait_for(&history, 1).await;
    let b_run = tokio::spawn({
        let b = b.clone();
        let w = work('b', history.clone(), b_done.clone());
        async move { b.leader("billing").ttl(ttl).run(w).await }
    });

    proxy.partition();
    wait_for(&history, 2).await;
    proxy.heal();
    b_done.notify_one();
    let b_term = b_run.await.unwrap().unwrap();
    wait_for(&history, 3).await;
    a_done.notify_one();
    let a_term = a_run.await.unwrap().unwrap();

    let works = history.lock().unwrap().clone();
    let who: Vec<char> = works.iter().map(|w| w.who).collect();
    assert_eq!(who, ['a', 'b', 'a'], "{works:?}");
    for pair in works.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            before.ended.is_some_and(|ended| ended <= after.started),
            "{before:?} overlaps {after:?}"
        );
        assert!(after.term > before.term, "{before:?} then {after:?}");
    }
    assert_eq!((works[1].term, works[2].term), (b_term, a_term));
}

/// One run of a leader's work, as recorded on the test's one clock.
#[derive(Debug, Clone)]
struct Work {
    who: char,
    term: u64,
    started: Instant,
    /// When its future was dropped: cancelled, or done.
    ended: Option<Instant>,
}

type History = Arc<Mutex<Vec<Work>>>;

/// Marks its work's end when dropped.
struct Ends(History, usize);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.lock().unwrap()[self.1].ended = Some(Instant::now());
    }
}

/// Waits until `n` leaders' works have started, for at most [`PATIENCE`].
async fn wait_for<T>(history: &Mutex<Vec<T>>, n: usize) {
    let deadline = Instant::now() + PATIENCE;
    while history.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "no leader number {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
