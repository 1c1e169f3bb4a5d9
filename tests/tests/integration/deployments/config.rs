//! A client configured from the environment (`LockClient::from_env`) against a real Redis.
//! The environment is given to a child process (this test binary, running one ignored
//! test), since a test must not change its own process's environment.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use redis::AsyncCommands;
use rlock_runtime::LockClient;
use rlock_tests::RedisServer;

#[test]
fn a_client_from_the_environment_locks_on_redis() {
    let server = RedisServer::start();
    // The test's name within its program: this module's path without the program's name.
    let (_, module) = module_path!().split_once("::").unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("{module}::locks_as_the_environment_says"),
            "--ignored",
        ])
        .env_remove("RLOCK_URL")
        .env("REDIS_URL", server.url())
        .env("RLOCK_NAMESPACE", "envtest")
        .env("RLOCK_DEFAULT_TTL", "7s")
        .env("RLOCK_COMMAND_TIMEOUT", "1500ms")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
#[ignore = "run by a_client_from_the_environment_locks_on_redis, which sets its environment"]
async fn locks_as_the_environment_says() {
    let client = LockClient::from_env().await.unwrap();
    let guard = client.lock("k").acquire().await.unwrap();
    let url = std::env::var("REDIS_URL").unwrap();
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pttl: i64 = raw.pttl("envtest:k").await.unwrap();
    assert!(
        pttl > 6_000 && pttl <= 7_000,
        "the default ttl is 7 s: {pttl}"
    );
    guard.release().await.unwrap();
}
