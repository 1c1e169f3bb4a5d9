//! `rediss://`: locking and notified waiting over TLS, against a `redis-server` whose
//! certificate a private CA signed (made here with the `openssl` command).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rlock_runtime::LockClient;
use rlock_tests::RedisServer;

/// Writes `ca.pem`, `server.pem` and `server.key` (for 127.0.0.1) into `dir`.
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("openssl not found ({e}); install it with `apt-get install -y openssl`")
            });
        assert!(status.status.success(), "openssl {args:?}: {status:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=rlock test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiting_work_over_tls_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("rlock-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    make_certificates(&dir);
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let server = RedisServer::start_with_args(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &path("server.pem"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.pem"),
        "--tls-auth-clients",
        "no",
    ]);
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
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
    let _ = std::fs::remove_dir_all(&dir);
}
