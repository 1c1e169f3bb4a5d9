//! A method of a trait impl, and a trait whose futures must be `Send`.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use std::future::Future;

use rlock_runtime::{LockClient, LockError, distributed_lock};

trait Handler {
    fn handle(&self, job: u64) -> impl Future<Output = Result<u64, LockError>> + Send;
}

struct Worker {
    locks: LockClient,
}

impl Handler for Worker {
    #[distributed_lock(key = "job:<job>", client = self.locks)]
    async fn handle(&self, job: u64) -> Result<u64, LockError> {
        tokio::task::yield_now().await;
        Ok(job * 2)
    }
}

trait Plain {
    async fn run(&mut self, name: &str) -> Result<String, LockError>;
}

impl Plain for Worker {
    #[distributed_lock(key = "plain:<name>", client = self.locks)]
    async fn run(&mut self, name: &str) -> Result<String, LockError> {
        Ok(name.to_uppercase())
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut worker = Worker {
            locks: LockClient::in_memory(),
        };
        assert_eq!(worker.handle(21).await.unwrap(), 42);
        assert_eq!(worker.run("a").await.unwrap(), "A");
    });
}
