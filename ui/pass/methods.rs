//! Inherent methods taking `&self`, `&mut self` and `self`, with `client = self.locks`.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]
// `self: &Self` is one of the receivers under test.
#![allow(clippy::needless_arbitrary_self_type)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

struct Account {
    locks: LockClient,
    id: u64,
    balance: i64,
}

impl Account {
    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    pub async fn balance(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", client = self.locks, fence = fence)]
    async fn deposit(&mut self, amount: i64) -> Result<u64, LockError> {
        self.balance += amount;
        Ok(fence)
    }

    #[distributed_lock(key = "account:<self.id>:close", client = &self.locks)]
    async fn close(self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>:<other>", client = self.locks)]
    async fn transfer(self: &Self, other: u64) -> Result<u64, LockError> {
        Ok(other)
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut account = Account {
            locks: LockClient::in_memory(),
            id: 7,
            balance: 0,
        };
        account.deposit(5).await.unwrap();
        assert_eq!(account.balance().await.unwrap(), 5);
        assert_eq!(account.transfer(8).await.unwrap(), 8);
        assert_eq!(account.close().await.unwrap(), 5);
    });
}
