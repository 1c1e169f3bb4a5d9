//! The flash sale ("seckill") of the reference articles: a voucher with limited stock, many
//! users firing order requests at once, across several instances of the service.
//!
//! Two rules must hold whatever the concurrency: **one order per user**, and **no oversold
//! stock**. The order path is written the way it usually is, as non-atomic read-then-write
//! against a store, with a short pause between the check and the write (a database round
//! trip). Unguarded, concurrent requests all pass the checks before any of them writes, and
//! both rules break. Guarded, they hold:
//!
//! - `order:<user_id>` (the `#[distributed_lock]` on [`Shop::place_order_locked`]) is held
//!   around the whole path, so one user's requests run one at a time, on whichever instance
//!   they land; the second one sees the first one's order. It does not wait: a concurrent
//!   duplicate is turned away as busy, which is what a double-clicked "buy" button deserves.
//! - `stock:<voucher_id>` (on [`Shop::take_stock_locked`]) is held only around reading and
//!   decrementing the stock, because that read-modify-write is shared by *all* users. It
//!   waits, so that every user gets a fair try while stock lasts. Always taken inside the
//!   order lock, never the other way round, so the two locks cannot deadlock.
//!
//! A store that can decrement conditionally in one command (a Lua script, or SQL's
//! `UPDATE … SET stock = stock - 1 WHERE stock > 0`) needs no stock lock and scales better;
//! the lock is the general answer for a read-modify-write the store cannot do atomically.
//!
//! Store layout (Redis), for voucher `v`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `seckill:voucher:v:stock` | string | remaining stock |
//! | `seckill:voucher:v:orders` | list | one user id per order created (the orders table) |
//! | `seckill:voucher:v:buyers` | set | users who have ordered (the index the check reads) |
//!
//! The outcome is counted from the orders list after the run, never from the requests' own
//! view of what they did.
//!
//! The lesson is [`Shop`], here; `store` holds the store, `cli` the command line, and `sale`
//! runs a sale over worker tasks or processes and reports what the store holds afterwards.

mod cli;
mod sale;
mod store;

use std::fmt;
use std::time::Duration;

use rlock_runtime::{BoxError, LockClient, LockError, distributed_lock};

pub use cli::{Command, Config, parse_args};
pub use sale::{Report, Tally, Workers, run, run_worker, stdout_is_terminal};
pub use store::Store;

/// The pause between a check and the write that depends on it, as a database round trip
/// would cause: 1 to 2 ms.
const DB_LATENCY_MICROS: std::ops::RangeInclusive<u64> = 1_000..=2_000;

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
    /// The store failed or did not answer in time.
    Store(BoxError),
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SoldOut => f.write_str("the voucher is sold out"),
            Self::AlreadyOrdered => f.write_str("this user already ordered this voucher"),
            Self::UnknownVoucher => f.write_str("no such voucher"),
            Self::Lock(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "the order store failed: {e}"),
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

impl From<LockError> for OrderError {
    fn from(e: LockError) -> Self {
        Self::Lock(e)
    }
}

impl From<redis::RedisError> for OrderError {
    fn from(e: redis::RedisError) -> Self {
        Self::Store(Box::new(e))
    }
}

/// The order service of one instance: its store, its lock client, and whether it locks.
#[derive(Debug, Clone)]
pub struct Shop {
    /// Stock and orders.
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

    /// The order path of the reference articles, unguarded: read the stock, check the user
    /// has no order, take one from the stock, create the order. Every step is a separate
    /// store command, so concurrent callers interleave between them unless a lock is held.
    pub async fn place_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        // A cheap early answer once the sale is over; not authoritative (checked again below).
        match self.store.stock(voucher_id).await? {
            None => return Err(OrderError::UnknownVoucher),
            Some(stock) if stock <= 0 => return Err(OrderError::SoldOut),
            Some(_) => {}
        }
        if self.store.has_ordered(voucher_id, user_id).await? {
            return Err(OrderError::AlreadyOrdered);
        }
        if self.lock {
            self.take_stock_locked(voucher_id).await?;
        } else {
            self.take_stock(voucher_id).await?;
        }
        self.store.create_order(voucher_id, user_id).await
    }

    /// [`take_stock`](Self::take_stock) while holding `stock:<voucher_id>`. All users share
    /// this lock, so it is held as briefly as possible and waited for.
    #[distributed_lock(key = "stock:<voucher_id>", client = self.locks, ttl = "5s", wait = "20s")]
    pub async fn take_stock_locked(&self, voucher_id: u64) -> Result<(), OrderError> {
        self.take_stock(voucher_id).await
    }

    /// Reads the stock and writes it back one lower: a read-modify-write that loses updates
    /// and sells stock that is gone when two callers interleave.
    pub async fn take_stock(&self, voucher_id: u64) -> Result<(), OrderError> {
        let stock = self
            .store
            .stock(voucher_id)
            .await?
            .ok_or(OrderError::UnknownVoucher)?;
        if stock <= 0 {
            return Err(OrderError::SoldOut);
        }
        db_latency().await;
        self.store.set_stock(voucher_id, stock - 1).await
    }
}

/// The pause a database round trip puts between a check and the write that depends on it.
async fn db_latency() {
    tokio::time::sleep(Duration::from_micros(fastrand::u64(DB_LATENCY_MICROS))).await;
}
