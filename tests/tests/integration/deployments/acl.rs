//! rlock as a least-privilege ACL user: the rule set in the README ("A least-privilege Redis
//! user"), read from it, is all rlock needs. Every feature runs as that user, and the
//! server's ACL log shows that nothing was refused.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_tests::RedisServer;
use rlock_tests::locking::app_client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_user_is_enough() {
    let server = RedisServer::start();
    let url = server.documented_user("rlock", &[]).await;
    let (a, b) = (app_client(&url).await, app_client(&url).await);

    // Acquire with a fence, renewals across several leases, extend, inspect.
    let held = a
        .lock("order:1")
        .ttl(Duration::from_millis(300))
        .fenced()
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!held.is_lost(), "renewals were refused");
    held.extend(Duration::from_secs(2)).await.unwrap();
    assert!(b.inspect("order:1").await.unwrap().held);

    // A fair waiter of another client, handed the lock by the release and told of it.
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("order:1")
                .wait(Duration::from_secs(5))
                .fair()
                .fenced()
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();

    // The admin's way out, and the holder told.
    assert!(a.force_unlock("order:1").await.unwrap());
    let told = tokio::time::timeout(Duration::from_secs(3), handed.lost()).await;
    assert!(told.is_ok(), "lost() did not fire after force_unlock");

    // A semaphore: permits renewed, one handed to a waiter by a release, inspected.
    let permit = a
        .semaphore("export:1", 1)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            b.semaphore("export:1", 1)
                .wait(Duration::from_secs(5))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!permit.is_lost(), "a permit's renewals were refused");
    assert_eq!(a.inspect_semaphore("export:1").await.unwrap().in_use, 1);
    permit.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    // Several permits at once, handed over to another client and released there.
    let two = a
        .semaphore("export:2", 3)
        .permits(2)
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let taken = b.take_over(two.hand_over().unwrap()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !taken.is_lost(),
        "a taken-over hold's renewals were refused"
    );
    assert_eq!(a.inspect_semaphore("export:2").await.unwrap().in_use, 2);
    // Its count changed at run time while a waiter waits, which the raised count admits.
    a.set_permits("export:2", 2).await.unwrap();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            b.semaphore("export:2", 3)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    assert_eq!(a.add_permits("export:2", 1).await.unwrap(), 3);
    waiting.await.unwrap().unwrap().release().await.unwrap();
    a.clear_permits("export:2").await.unwrap();
    taken.release().await.unwrap();

    // A read-write lock: a fenced writer renewed, readers admitted by its release,
    // inspected, broken; another kind refused on its name.
    let writer = a
        .write_lock("config:1")
        .ttl(Duration::from_millis(300))
        .fenced()
        .acquire()
        .await
        .unwrap();
    let reading = tokio::spawn({
        let b = b.clone();
        async move {
            b.read_lock("config:1")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!writer.is_lost(), "a writer's renewals were refused");
    assert!(a.inspect_read_write("config:1").await.unwrap().writer);
    assert!(b.lock("config:1").acquire().await.is_err());
    writer.release().await.unwrap();
    let reader = reading.await.unwrap().unwrap();
    assert_eq!(a.force_unlock_read_write("config:1").await.unwrap(), 1);
    drop(reader);

    // Nothing was refused: not a command, a key or a channel.
    let mut admin = server.raw().await;
    let refused: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    // (`CLIENT SETINFO`, which the redis crate sends on connect and whose refusal it
    // ignores, is left out: the README names it for Redis 7.2 and later, and before 7.2
    // there is no such command, logged then as a refused `client`.)
    let has_setinfo = server.version().redis_at_least(7, 2);
    let refused: Vec<String> = refused
        .iter()
        .map(|entry| format!("{entry:?}"))
        .filter(|entry| {
            !entry.contains("setinfo") && (has_setinfo || !entry.contains("cmd=client "))
        })
        .collect();
    assert!(refused.is_empty(), "Redis refused: {refused:?}");
}
