//! `rediss://`: locking and notified waiting over TLS, against a `redis-server` whose
//! certificate a private CA signed (made here with the `openssl` command).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::LockClient;
use rlock_tests::certs::Certificates;
use rlock_tests::{RedisServer, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiting_work_over_tls_with_a_private_ca() {
    let certs = Certificates::make("tls");
    let tls_port = free_port();
    let args = certs.server_args(tls_port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = RedisServer::start_with_args(&args);
    let ca = certs.ca();
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let connect = || {
        LockClient::builder()
            .url(url.as_str())
            .tls_root_certificate(ca.clone())
            .connect()
    };

    let holder = connect().await.unwrap();
    let waiter = connect().await.unwrap();
    let guard = holder.lock("tls:1").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        let g = waiter
            .lock("tls:1")
            .wait(Duration::from_secs(5))
            .acquire()
            .await?;
        g.release().await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap();

    // Without the private CA the server's certificate is not trusted.
    let untrusted = LockClient::builder()
        .url(url.as_str())
        .command_timeout(Duration::from_secs(1))
        .connect()
        .await;
    assert!(untrusted.is_err());
    drop(server);
}
