//! The `rlock` command line against real servers: one Redis, and a Cluster.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::{Identity, LockClient, LockGuard};
use rlock_tests::RedisServer;
use rlock_tests::deploy::ClusterDeployment;
use rlock_tests::locking::PATIENCE;
use serde_json::Value;

/// What one run of `rlock` printed and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// Its stdout's lines as JSON.
    fn json(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

async fn rlock(url: &str, args: &[&str]) -> Ran {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rlock"))
        .arg("--redis")
        .arg(url)
        .args(args)
        .output()
        .await
        .unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn service(url: &str, name: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .identity(Identity::new(name).host("pod-1"))
        .connect()
        .await
        .unwrap()
}

async fn hold(client: &LockClient, key: &str) -> LockGuard {
    client
        .lock(key)
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap()
}

/// `rlock inspect KEY --json` once the holder's card names it (a hold is listed once it
/// has lasted about a second).
async fn named(url: &str, key: &str) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let ran = rlock(url, &["inspect", key, "--json"]).await;
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        let info = ran.json().remove(0);
        if !info["holder"].is_null() {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never named: {info}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_redis_rlock_names_lists_watches_and_breaks_a_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let checkout = service(&url, "checkout").await;
    let held = hold(&checkout, "order:42").await;
    let _other = hold(&checkout, "order:43").await;
    let waiter = service(&url, "checkout").await;
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock("order:42").wait(PATIENCE).acquire().await;
        guard.map(|_| ())
    });

    let info = named(&url, "order:42").await;
    assert_eq!(info["holder"]["service"], "checkout");
    assert_eq!(info["holder"]["host"], "pod-1");
    assert_eq!(info["holder"]["pid"], std::process::id());
    assert_eq!(info["token"], held.token());
    assert!(info["granted_at"].is_string(), "{info}");
    let human = rlock(&url, &["inspect", "order:42"]).await.stdout;
    assert!(
        human.starts_with("order:42: held by checkout on pod-1 (pid ")
            && human.contains("granted "),
        "{human}"
    );

    // The waiter's queue is not a lock; both locks are listed, in order.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while rlock(&url, &["inspect", "order:42", "--json"]).await.json()[0]["waiters"] != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = rlock(&url, &["list", "order:*", "--json"]).await.json();
    let keys: Vec<&str> = listed.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["order:42", "order:43"]);
    let limited = rlock(&url, &["list", "order:*", "--limit", "1"]).await;
    assert_eq!(limited.stdout.lines().count(), 1, "{}", limited.stdout);
    assert!(limited.stderr.contains("limit"), "{}", limited.stderr);

    // Not without --yes.
    let refused = rlock(&url, &["force-unlock", "order:43"]).await;
    assert_eq!(refused.code, Some(2));
    assert!(refused.stderr.contains("--yes"), "{}", refused.stderr);
    assert!(checkout.inspect("order:43").await.unwrap().held);

    // Broken: the waiter is handed the lock, and the holder finds its lease lost.
    let broken = rlock(&url, &["force-unlock", "order:42", "--yes", "--json"]).await;
    let broken = broken.json().remove(0);
    assert_eq!(broken["deleted"], true);
    assert_eq!(broken["was"]["holder"]["service"], "checkout");
    waiting.await.unwrap().unwrap();
    assert!(held.release().await.unwrap_err().is_lost());

    // Watched as it is taken and given back.
    let watching = tokio::spawn({
        let url = url.clone();
        async move {
            rlock(
                &url,
                &[
                    "watch",
                    "job:7",
                    "--json",
                    "--every",
                    "50ms",
                    "--changes",
                    "3",
                ],
            )
            .await
        }
    });
    let mut states = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !watching.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watch never saw three states"
        );
        let guard = hold(&checkout, "job:7").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let watched = watching.await.unwrap();
    for line in watched.json() {
        states.push(line["held"].as_bool().unwrap());
    }
    // Whichever it saw first, each state printed differs from the one before.
    assert_eq!(states.len(), 3, "{}", watched.stdout);
    assert!(
        states.windows(2).all(|w| w[0] != w[1]),
        "{}",
        watched.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_rlock_lists_every_master_and_names_the_holder() {
    let cluster = ClusterDeployment::start();
    let url = cluster.url();
    let billing = service(&url, "billing").await;
    // Keys in many slots, so on every master.
    let mut guards = Vec::new();
    for i in 0..12 {
        guards.push(hold(&billing, &format!("invoice:{i}")).await);
    }
    let info = named(&url, "invoice:3").await;
    assert_eq!(info["holder"]["service"], "billing");

    let listed = rlock(&url, &["list", "invoice:*", "--json"]).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let mut keys: Vec<String> = listed
        .json()
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    let mut expected: Vec<String> = (0..12).map(|i| format!("invoice:{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected);

    let broken = rlock(&url, &["force-unlock", "invoice:5", "--yes"]).await;
    assert!(
        broken.stdout.starts_with("invoice:5: deleted"),
        "{}",
        broken.stdout
    );
    assert!(!billing.inspect("invoice:5").await.unwrap().held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_redis_or_with_a_dead_one_rlock_says_so() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rlock"))
        .args(["inspect", "order:1"])
        .env_remove("REDIS_URL")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--redis"));

    let port = RedisServer::start().port();
    // (The server is gone once dropped: its port answers nobody.)
    let dead = rlock(
        &format!("redis://127.0.0.1:{port}"),
        &["inspect", "order:1", "--timeout", "300ms"],
    )
    .await;
    assert_eq!(dead.code, Some(1));
    assert!(!dead.stderr.contains("busy"), "{}", dead.stderr);
    assert!(dead.stderr.starts_with("rlock: "), "{}", dead.stderr);
}
