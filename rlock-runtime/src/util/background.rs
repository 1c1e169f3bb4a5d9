//! The background runtime on which rlock's own tasks run: the watchdog, renewals, background
//! releases, the release feed, and the tasks that read the replies of the connections they
//! use (and those of callers on a current-thread runtime).
//!
//! They must not live on a caller's runtime: a short-lived runtime (a `spawn_blocking` helper,
//! a per-test runtime sharing an installed client) would take them down with it, and every
//! hold of the client would go unrenewed and unwatched. A small runtime of its own runs them,
//! started on first use and kept for the life of the process; it only waits on timers and
//! sockets. Two workers, so that one client's busy watchdog pass (thousands of holds) does not
//! hold up another's release feed.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle};

static DRIVER: OnceLock<Option<Handle>> = OnceLock::new();

/// Worker threads of the background runtime.
const DRIVER_THREADS: usize = 2;

/// The background runtime, started on first use; `None` only if its thread could not start.
pub(crate) fn handle() -> Option<&'static Handle> {
    DRIVER
        .get_or_init(|| {
            let runtime = Builder::new_multi_thread()
                .worker_threads(DRIVER_THREADS)
                .thread_name("rlock-background")
                .enable_all()
                .build()
                .ok()?;
            let handle = runtime.handle().clone();
            // The runtime lives as long as the process: it is never dropped.
            std::mem::forget(runtime);
            Some(handle)
        })
        .as_ref()
}

/// Runs `task` on the background runtime. `false` when it cannot run (its thread could not start):
/// the caller must then treat what the task would have done as not done.
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> bool {
    match handle() {
        Some(runtime) => {
            runtime.spawn(task);
            true
        }
        None => false,
    }
}

/// Whether `runtime` is the background runtime.
pub(crate) fn is(runtime: &Handle) -> bool {
    DRIVER
        .get()
        .and_then(Option::as_ref)
        .is_some_and(|background| background.id() == runtime.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_tasks_without_a_caller_runtime() {
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
        }));
        let name = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        assert_eq!(name.as_deref(), Some("rlock-background"));
    }
}
