//! `rlock doctor URL` (and `LockClient::diagnose`, which it prints) against real servers,
//! whichever the harness runs (`RLOCK_TEST_SERVER`: Redis 6.2, 7.0, Valkey 8.1), on one
//! server and a cluster, and under the limits managed services set, emulated with ACL
//! users: only the commands the README lists (as an allow-list such as Memorystore's, with
//! no `CLIENT`, `CONFIG`, `DEBUG` or `INFO`), pub/sub refused, `WAIT` refused, scripts
//! refused.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::{LockClient, LockError};
use rlock_tests::RedisServer;
use rlock_tests::deploy::ClusterDeployment;
use rlock_tests::locking::app_client;
use serde_json::Value;

/// One run of `rlock doctor URL --json`: its exit code and its report. The namespace is
/// the limited users' (their keys are `app:*`).
async fn doctor(url: &str) -> (Option<i32>, Value) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rlock"))
        .args([
            "doctor",
            url,
            "--json",
            "--timeout",
            "5s",
            "--namespace",
            "app",
        ])
        .env_remove("REDIS_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["servers"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// On the server of the matrix: its make and version as the harness reads them, every
/// check allowed, herd-free waiting, fencing, and nothing left behind; the human form says
/// the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_the_server_and_finds_everything_allowed() {
    let server = RedisServer::start();
    let (code, report) = doctor(&server.url()).await;
    assert_eq!(code, Some(0), "{report}");
    let version = server.version();
    let (major, minor, patch) = version.version;
    assert_eq!(report["servers"][0]["server"], version.server.as_str());
    assert_eq!(
        report["servers"][0]["version"],
        format!("{major}.{minor}.{patch}").as_str()
    );
    assert_eq!(report["usable"], true);
    assert_eq!(report["waiting"]["mode"], "announced", "{report}");
    assert_eq!(report["fencing"], true);
    assert_eq!(report["replica_acks"]["available"], true);
    for check in report["servers"][0]["checks"].as_array().unwrap() {
        assert_eq!(check["outcome"], "allowed", "{check}");
    }
    assert!(report["servers"][0]["clock_offset_ms"].is_i64(), "{report}");

    let mut raw = server.raw().await;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert_eq!(keys, 0, "the probe left a key behind");

    let human = tokio::process::Command::new(env!("CARGO_BIN_EXE_rlock"))
        .args(["doctor", &server.url()])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("waiting: herd-free"), "{text}");
    assert!(
        text.contains("every command rlock needs is allowed"),
        "{text}"
    );
}

/// On a cluster: announced on sharded channels where the cluster has them; on one without
/// (Redis 6.2), polling, because `SSUBSCRIBE` is missing, and still usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_a_cluster_says_how_waiters_are_woken() {
    let cluster = ClusterDeployment::start();
    let (code, report) = doctor(&cluster.url()).await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["deployment"], "Redis Cluster");
    assert_eq!(report["servers"][0]["mode"], "cluster");
    if cluster.has_sharded_pubsub() {
        assert_eq!(report["waiting"]["mode"], "announced", "{report}");
        assert_eq!(check(&report, "ssubscribe")["outcome"], "allowed");
        assert_eq!(check(&report, "pubsub|shardnumsub")["outcome"], "allowed");
    } else {
        assert_eq!(report["waiting"]["mode"], "polling", "{report}");
        assert_eq!(report["waiting"]["every_ms"], 50);
        assert_eq!(check(&report, "ssubscribe")["outcome"], "missing");
    }
}

/// A user allowed the README's commands only, as a managed service's allow-list leaves one
/// (no `CLIENT`, `CONFIG`, `DEBUG`, `INFO`): rlock has all it needs, and waiting is
/// herd-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_of_the_documented_commands_is_enough() {
    let server = RedisServer::start();
    let url = server.documented_user("allowed", &[]).await;
    let (code, report) = doctor(&url).await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["usable"], true, "{report}");
    assert_eq!(report["waiting"]["mode"], "announced", "{report}");
    // `HELLO` needs no right (a client may send it before it authenticates), so the server
    // is named even with `INFO` refused.
    assert_eq!(
        report["servers"][0]["server"],
        server.version().server.as_str()
    );
    // (`DEBUG` is refused to everyone from Redis 7.0 unless the server enables it.)
    for command in ["client", "config", "info"] {
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let err = redis::cmd(command)
            .arg("help")
            .query_async::<redis::Value>(&mut con)
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), Some("NOPERM"), "{command}: {err}");
    }
}

/// Pub/sub refused (no channel, no `SUBSCRIBE`, as behind a proxy that carries none):
/// waiters poll every 50 ms, and locks still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pubsub_waiters_poll_at_the_documented_rate() {
    let server = RedisServer::start();
    let url = server
        .documented_user("nopubsub", &["resetchannels", "-subscribe"])
        .await;
    let (code, report) = doctor(&url).await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["waiting"]["mode"], "polling", "{report}");
    assert_eq!(report["waiting"]["every_ms"], 50);
    assert_eq!(check(&report, "subscribe")["outcome"], "refused");

    let (a, b) = (app_client(&url).await, app_client(&url).await);
    let held = a.lock("order:1").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        b.lock("order:1")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .map(|guard| guard.is_lost())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    assert!(
        !waiting.await.unwrap().unwrap(),
        "the waiter's hold was lost"
    );
}

/// `WAIT` refused: the doctor says `min_replicas` is not available, and a lock asking for a
/// replica's acknowledgement fails at once with a sentence, not after a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_min_replicas_fails_at_once_and_says_why() {
    let server = RedisServer::start();
    let url = server.documented_user("nowait", &["-wait"]).await;
    let (code, report) = doctor(&url).await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["replica_acks"]["available"], false, "{report}");

    let client = LockClient::builder()
        .url(url.as_str())
        .namespace("app")
        .command_timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let err = client
        .lock("order:2")
        .min_replicas(1)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(why) if why.contains("wait")
            && why.contains("least-privilege")),
        "{err:?}"
    );
    // Nothing stays held by the refused grant.
    assert!(!client.inspect("order:2").await.unwrap().held);
}

/// Scripts refused (a service with Lua disabled, or one that refuses `EVAL`/`EVALSHA`):
/// connecting fails with a sentence that names what rlock needs and why, and the doctor
/// prints it and exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_connecting_fails_and_says_why() {
    let server = RedisServer::start();
    let url = server
        .documented_user("noscripts", &["-evalsha", "-eval", "-script"])
        .await;
    let err = LockClient::connect(&url).await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig(why) if why.contains("Lua script")),
        "{err:?}"
    );
    let (code, report) = doctor(&url).await;
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["usable"], false);
    assert!(
        report["connect_error"]
            .as_str()
            .unwrap()
            .contains("allow scripts"),
        "{report}"
    );
}

/// Redlock: each master reported, and no fencing tokens (each master would issue its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_redlock_master() {
    let masters = RedisServer::start_many(3);
    let hosts: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port()))
        .collect();
    let (code, report) = doctor(&format!("redlock://{}", hosts.join(","))).await;
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["deployment"], "Redlock masters");
    assert_eq!(report["servers"].as_array().unwrap().len(), 3);
    assert_eq!(report["fencing"], false);
}
