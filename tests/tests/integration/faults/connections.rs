//! Connections that die silently or slow down: a command connection or release feed whose
//! flow goes silent is replaced, every call in flight on it ends by its own deadline, slow
//! calls inside the timeout are never cut, and a dropped client closes its connections.

use std::time::Duration;

use rlock_runtime::{LockError, Operation};
use rlock_tests::RedisServer;
use rlock_tests::locking::{client_at, client_for, lock_and_release};
use rlock_tests::proxy::FaultProxy;

use super::{SHORT, spawn_timed_waiter};

/// A silently dead command connection is replaced. The client reaches Redis through the
/// fault proxy; after `blackhole_existing()` its connection gets no answer and no error,
/// ever. Commands time out, and the client replaces the connection (new flows through the
/// proxy work), so locking works again within a few attempts, not after the kernel's
/// retransmission timeout. (After `reset_all()`, a failure the driver sees, the client
/// recovers at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_command_connection_is_replaced() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = client_at(&proxy.url(), SHORT).await;
    lock_and_release(&client, "heal:1", Duration::ZERO).await;

    proxy.blackhole_existing();
    let mut errors = Vec::new();
    let mut healed_at = None;
    for attempt in 1..=20 {
        let round = tokio::time::timeout(Duration::from_secs(1), async {
            let guard = client.lock("heal:1").acquire().await?;
            guard.release().await
        })
        .await;
        match round {
            Ok(Ok(())) => {
                healed_at = Some(attempt);
                break;
            }
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(_) => errors.push("no answer within 1 s".into()),
        }
    }
    let Some(attempt) = healed_at else {
        panic!(
            "no lock in 20 attempts after the connection went silent (the dead connection \
             was never replaced; {} proxy connections in all): {:?}",
            proxy.connections(),
            &errors[..errors.len().min(3)]
        );
    };
    assert!(
        attempt <= 5,
        "locking worked again only at attempt {attempt}: {errors:?}"
    );
}

/// A connection keeps its calls' deadlines itself (one watch per connection, no timer per
/// command). Many calls are in flight on one connection when its flow goes silent: every
/// one ends by itself with a timeout, none waits for the kernel, and the next call goes out
/// on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_in_flight_on_a_silenced_connection_times_out() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = client_at(&proxy.url(), SHORT).await;
    lock_and_release(&client, "silenced:warm", Duration::ZERO).await;
    let opened = proxy.connections();

    proxy.blackhole_existing();
    let calls: Vec<_> = (0..32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.lock(format!("silenced:{i}")).acquire().await })
        })
        .collect();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        let mut ended = Vec::new();
        for call in calls {
            ended.push(call.await.unwrap());
        }
        ended
    })
    .await
    .expect("calls on a silent connection must end by themselves");
    for outcome in ended {
        assert!(
            matches!(
                outcome,
                Err(LockError::Timeout {
                    operation: Operation::Acquire,
                    ..
                })
            ),
            "{outcome:?}"
        );
    }
    lock_and_release(&client, "silenced:after", Duration::ZERO).await;
    assert!(
        proxy.connections() > opened,
        "the silent connection was not replaced"
    );
}

/// A client dropped after its last lock closes its connections, idle ones too: rlock runs
/// their reply readers and deadline watches itself, and none of them may outlive it. The
/// lock is held long enough for the watchdog to look at it, so the watchdog's task is asleep
/// until the hold's renewal when the client goes: it must not keep the client's engine, and
/// its connections, alive until it wakes (ttl/3, 10 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_closes_its_idle_connections() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    // Only connections opened after `raw` count: the harness's own start-up connections may
    // still be listed for a moment after they closed, on a loaded machine.
    let own_id: u64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut raw)
        .await
        .unwrap();
    async fn clients(raw: &mut redis::aio::MultiplexedConnection) -> String {
        redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(raw)
            .await
            .unwrap()
    }
    let opened_after_raw = |list: &str| {
        list.lines()
            .filter_map(|line| {
                line.strip_prefix("id=")?
                    .split(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .filter(|id| *id > own_id)
            .count()
    };
    let client = client_for(&server, Duration::from_secs(1)).await;
    let guard = client.lock("bye:1").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    assert!(opened_after_raw(&clients(&mut raw).await) > 0);
    // Past a slice of the timeout without a call: the connection's watch is idle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(client);
    for _ in 0..100 {
        if opened_after_raw(&clients(&mut raw).await) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the dropped client's connections stayed open:\n{}",
        clients(&mut raw).await
    );
}

/// The other side of the same watch: calls slower than usual but well inside the command
/// timeout are never cut. Every reply comes 300 ms late (150 ms each way) with a 1 s
/// timeout, under 16 tasks locking at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_network_inside_the_timeout_cuts_no_call() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = client_at(&proxy.url(), Duration::from_secs(1)).await;
    lock_and_release(&client, "slow:warm", Duration::ZERO).await;

    proxy.set_delay(Duration::from_millis(150));
    let workers: Vec<_> = (0..16)
        .map(|worker| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut errors = Vec::new();
                for round in 0..8 {
                    let outcome = async {
                        let guard = client
                            .lock(format!("slow:{worker}:{round}"))
                            .acquire()
                            .await?;
                        guard.release().await
                    };
                    if let Err(e) = outcome.await {
                        errors.push(e.to_string());
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = Vec::new();
    for worker in workers {
        errors.extend(worker.await.unwrap());
    }
    assert!(
        errors.is_empty(),
        "calls inside the timeout failed: {errors:?}"
    );
}

/// The release feed's connection is replaced when its flow goes silent. A waiter (through
/// the proxy) is subscribed to a key held by a direct client with a 20 s lease; the flow
/// goes silent; the holder then releases. The feed notices (a failed health check),
/// reconnects, and lets the waiter retry, so it gets the lock within its budget instead of
/// sleeping on the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_release_feed_is_replaced() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let waiter = client_at(&proxy.url(), SHORT).await;
    let holder = client_for(&server, SHORT).await;
    let held = holder
        .lock("feed:1")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();

    let waiting = spawn_timed_waiter(&waiter, "feed:1", Duration::from_secs(6));
    let mut subscribers = 0;
    for _ in 0..100 {
        // The client's own channel for the key (the key's, then `:` and the client).
        subscribers = server
            .channels("rlock:released:feed:1:*", false)
            .await
            .len();
        if subscribers == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(subscribers, 1, "the waiter never subscribed");

    proxy.blackhole_existing();
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    let (result, waited) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter outlived its budget by far")
        .unwrap();
    assert!(
        result.is_ok(),
        "the waiter missed the release after its feed went silent: {result:?} after \
         {waited:?}; {:?}",
        waiter.metrics()
    );
}
