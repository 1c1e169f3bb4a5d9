//! A server's address: the driver's client for a URL, checked but not connected. Every
//! topology makes its clients here (one server, each sentinel and master, each Redlock
//! master).

use redis::RedisError;

use crate::error::LockError;

/// The driver's client for `url`, checked but not connected.
pub(crate) fn client(url: &str) -> Result<redis::Client, LockError> {
    client_with_roots(url, None)
}

/// Like [`client`](Self::client), trusting the PEM `roots` for `rediss://` when given
/// (only with the `tls` feature; without it a `rediss://` URL is refused).
pub(crate) fn client_with_roots(
    url: &str,
    roots: Option<&[u8]>,
) -> Result<redis::Client, LockError> {
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") {
        // rustls panics at the first handshake when no process-wide crypto provider is
        // installed and its features do not name exactly one; an application that
        // installed its own keeps it (this call then fails, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        if let Some(roots) = roots {
            let certificates = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(roots.to_vec()),
            };
            return redis::Client::build_with_tls(url, certificates)
                .map_err(|e| config_error(url, &e));
        }
    }
    let _ = roots;
    redis::Client::open(url).map_err(|e| config_error(url, &e))
}

/// A URL the driver refused. The URL itself is left out: it may carry a password.
fn config_error(url: &str, e: &RedisError) -> LockError {
    let hint = if url.starts_with("rediss://") && !cfg!(feature = "tls") {
        "; `rediss://` needs rlock-runtime's `tls` feature"
    } else {
        "; expected redis://[user:password@]host[:port][/db] or rediss://…"
    };
    LockError::InvalidConfig(format!("unusable Redis URL: {e}{hint}"))
}
