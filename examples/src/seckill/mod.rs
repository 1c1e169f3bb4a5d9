//! The flash sale ("seckill") of the reference articles: a voucher with limited stock, many
//! users firing order requests at once, across several instances of the service.
//!
//! Two rules must hold whatever the concurrency: **one order per user**, and **no oversold
//! stock**. The order path is the reference articles' own, on a SQL database (SQLite by
//! default, PostgreSQL when `--database` or `DATABASE_URL` names one): read the user's
//! orders, and if there are none, take one from the stock and write the order in one
//! transaction. Between the check and the write the service does its own work (pricing, a
//! call to the payment service: 1 to 2 ms here).
//!
//! - **No oversold stock** is the database's: `UPDATE … SET stock = stock - 1 WHERE stock >
//!   0` is atomic, so the stock needs no lock, lock or not.
//! - **One order per user** is the lock's: the check reads one set of rows and the write adds
//!   another, and nothing in the transaction ties them. Unguarded, a user's concurrent
//!   requests all pass the check before any of them writes, and the orders table ends up
//!   with several orders for one user. `order:<user_id>` (the `#[distributed_lock]` on
//!   [`Shop::place_order_locked`]) is held around the whole path, so one user's requests run
//!   one at a time, on whichever instance they land; the second one sees the first one's
//!   order. It does not wait: a concurrent duplicate is turned away as busy, which is what a
//!   double-clicked "buy" button deserves.
//!
//! A unique index on `(voucher_id, user_id)` would enforce this one rule too, and the tables
//! have none on purpose: the lock is the general answer, for the rules an index cannot
//! express (at most three orders per user, one per household, a daily limit).
//!
//! The check sits before the write transaction, not inside it: SQLite lets one writer in at
//! a time and refuses a transaction that read before another's write committed
//! (`SQLITE_BUSY_SNAPSHOT`), so a check inside it would fail loudly rather than let a
//! duplicate in. PostgreSQL's default isolation (read committed) lets the duplicate in
//! either way.
//!
//! The outcome is counted by SQL from the orders table after the run, never from the
//! requests' own view of what they did.
//!
//! The lesson is [`Shop`], here; `store` holds the tables, `cli` the command line, and `sale`
//! runs a sale over worker tasks or processes and reports what the tables hold afterwards.

mod cli;
mod sale;
mod store;

use std::fmt;
use std::time::Duration;

use rlock_runtime::{BoxError, LockClient, LockError, distributed_lock};

use crate::database::DatabaseError;

pub use cli::{Command, Config, parse_args};
pub use sale::{Report, Tally, Workers, run, run_worker, stdout_is_terminal};
pub use store::{Orders, Store};

/// The service's own work between the check and the write that depends on it: 1 to 2 ms.
const OWN_WORK_MICROS: std::ops::RangeInclusive<u64> = 1_000..=2_000;

/// Why one order request did not create an order.
#[derive(Debug)]
pub enum OrderError {
    /// The stock is gone.
    SoldOut,
    /// This user already has an order for this voucher.
    AlreadyOrdered,
    /// No such voucher.
    UnknownVoucher,
    /// A lock could not be taken (busy, Redis down) or was lost.
    Lock(LockError),
    /// The database failed or did not answer in time.
    Store(BoxError),
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SoldOut => f.write_str("the voucher is sold out"),
            Self::AlreadyOrdered => f.write_str("this user already ordered this voucher"),
            Self::UnknownVoucher => f.write_str("no such voucher"),
            Self::Lock(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "the order database failed: {e}"),
        }
    }
}

impl std::error::Error for OrderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Lock(e) => Some(e),
            Self::Store(e) => Some(&**e),
            _ => None,
        }
    }
}

impl From<DatabaseError> for OrderError {
    fn from(e: DatabaseError) -> Self {
        Self::Store(Box::new(e))
    }
}

impl From<LockError> for OrderError {
    fn from(e: LockError) -> Self {
        Self::Lock(e)
    }
}

/// The order service of one instance: its database, its lock client, and whether it locks.
#[derive(Debug, Clone)]
pub struct Shop {
    /// Vouchers and orders.
    pub store: Store,
    /// The locks, shared with every other instance through the backend.
    pub locks: LockClient,
    /// Whether [`order`](Self::order) takes the locks.
    pub lock: bool,
}

impl Shop {
    /// A shop on `store` locking with `locks` (when `lock` is true).
    pub fn new(store: Store, locks: LockClient, lock: bool) -> Self {
        Self { store, locks, lock }
    }

    /// One order request, through the locks unless they are turned off. Returns the order
    /// number.
    pub async fn order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        if self.lock {
            self.place_order_locked(voucher_id, user_id).await
        } else {
            self.place_order(voucher_id, user_id).await
        }
    }

    /// [`place_order`](Self::place_order) while holding `order:<user_id>`: one request per
    /// user at a time, across all instances. A concurrent request of the same user gets
    /// [`LockError::Busy`] at once.
    #[distributed_lock(key = "order:<user_id>", client = self.locks, ttl = "10s")]
    pub async fn place_order_locked(
        &self,
        voucher_id: u64,
        user_id: u64,
    ) -> Result<u64, OrderError> {
        self.place_order(voucher_id, user_id).await
    }

    /// The order path of the reference articles, unguarded: read the stock, check that the
    /// user has no order, then take one from the stock and write the order in one
    /// transaction. Concurrent callers interleave between the check and the write unless a
    /// lock is held.
    pub async fn place_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        // A cheap early answer once the sale is over; not authoritative (the transaction's
        // conditional update is).
        match self.store.stock(voucher_id).await? {
            None => return Err(OrderError::UnknownVoucher),
            Some(stock) if stock <= 0 => return Err(OrderError::SoldOut),
            Some(_) => {}
        }
        if self.store.has_ordered(voucher_id, user_id).await? {
            return Err(OrderError::AlreadyOrdered);
        }
        own_work().await;
        self.store.create_order(voucher_id, user_id).await
    }
}

/// The service's own work between a check and the write that depends on it.
async fn own_work() {
    tokio::time::sleep(Duration::from_micros(fastrand::u64(OWN_WORK_MICROS))).await;
}
