//! A private certificate authority for TLS tests, made with the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory holding `ca.pem` and a certificate for 127.0.0.1 it signed (`server.pem`,
/// `server.key`); removed on drop.
#[derive(Debug)]
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    /// Makes the authority and the server certificate in a fresh directory named for `name`.
    ///
    /// # Panics
    ///
    /// When `openssl` is missing or fails.
    pub fn make(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rlock-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for certificates");
        make_certificates(&dir);
        Self { dir }
    }

    /// The path of one of the files, as a string for a command line.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// The authority's certificate (PEM), for the client to trust.
    ///
    /// # Panics
    ///
    /// When the file is gone.
    pub fn ca(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("ca.pem")).expect("ca.pem")
    }

    /// The `redis-server` arguments that serve TLS on `tls_port` with these certificates,
    /// without asking clients for certificates of their own.
    pub fn server_args(&self, tls_port: u16) -> Vec<String> {
        [
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &self.path("server.pem"),
            "--tls-key-file",
            &self.path("server.key"),
            "--tls-ca-cert-file",
            &self.path("ca.pem"),
            "--tls-auth-clients",
            "no",
        ]
        .map(str::to_owned)
        .to_vec()
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").expect("write ext.cnf");
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
