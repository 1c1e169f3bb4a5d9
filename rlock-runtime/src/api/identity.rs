//! A client's name for operators: which service, on which host, as which process. It is on
//! the holder card of every lock the client keeps for a while (`lease/card.rs`), where
//! [`LockClient::inspect`](crate::LockClient::inspect) from any process reads it.

use std::fmt;

/// Names the service, host and process a client belongs to, for operators asking who holds a
/// lock. Every client carries one: by default [`Identity::of_this_process`] (the service
/// from `RLOCK_SERVICE`, else the executable's name; the host from `RLOCK_HOST`, else the
/// machine's host name); set another on the builder with
/// [`identity`](crate::LockClientBuilder::identity).
///
/// ```
/// use rlock_runtime::{Identity, LockClient};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::builder()
///     .identity(Identity::new("order-service").host("pod-7f9c"))
///     .in_memory();
/// assert_eq!(client.identity().service, "order-service");
/// assert_eq!(client.identity().pid, std::process::id());
/// assert!(client.identity().to_string().starts_with("order-service on pod-7f9c (pid "));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Identity {
    /// The service's name.
    pub service: String,
    /// The host (machine, container, pod) it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
}

/// The variable naming the service, read by [`Identity::of_this_process`].
pub const SERVICE_VAR: &str = "RLOCK_SERVICE";
/// The variable naming the host, read by [`Identity::of_this_process`].
pub const HOST_VAR: &str = "RLOCK_HOST";

impl Identity {
    /// `service`, on this machine's host, as this process.
    pub fn new(service: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            host: host_name(),
            pid: std::process::id(),
        }
    }

    /// This process: the service named by `RLOCK_SERVICE`, else the executable's file name;
    /// the host named by `RLOCK_HOST`, else `HOSTNAME`, else the kernel's host name.
    pub fn of_this_process() -> Self {
        let service = non_empty_var(SERVICE_VAR)
            .or_else(|| {
                std::env::current_exe()
                    .ok()?
                    .file_name()?
                    .to_str()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Self::new(service)
    }

    /// The same, on `host` (a pod's or container's name, say).
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    /// Its card fields' values: service, host, pid.
    pub(crate) fn card_values(&self) -> [String; 3] {
        [
            self.service.clone(),
            self.host.clone(),
            self.pid.to_string(),
        ]
    }

    /// Read back from a card's fields; `None` unless all three are there.
    pub(crate) fn from_card(values: &[Option<String>]) -> Option<Self> {
        let [Some(service), Some(host), Some(pid), ..] = values else {
            return None;
        };
        Some(Self {
            service: service.clone(),
            host: host.clone(),
            pid: pid.parse().ok()?,
        })
    }
}

impl Default for Identity {
    fn default() -> Self {
        Self::of_this_process()
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} (pid {})", self.service, self.host, self.pid)
    }
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `RLOCK_HOST`, `HOSTNAME`, the kernel's host name, or `unknown`.
fn host_name() -> String {
    non_empty_var(HOST_VAR)
        .or_else(|| non_empty_var("HOSTNAME"))
        .or_else(|| {
            ["/proc/sys/kernel/hostname", "/etc/hostname"]
                .iter()
                .find_map(|path| std::fs::read_to_string(path).ok())
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_names_the_client_only_when_whole() {
        let id = Identity::new("svc").host("h");
        let values: Vec<Option<String>> = id.card_values().into_iter().map(Some).collect();
        assert_eq!(Identity::from_card(&values), Some(id));
        assert_eq!(Identity::from_card(&[Some("svc".into()), None, None]), None);
        assert!(!host_name().is_empty());
    }
}
