//! Where stock and orders live: Redis, or an in-process stand-in with the same commands.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::OrderError;

/// How long one store command may take before the request fails.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where stock and orders live: Redis, or an in-process stand-in with the same commands
/// when there is no Redis.
#[derive(Clone)]
pub struct Store {
    inner: StoreKind,
}

#[derive(Clone)]
enum StoreKind {
    Redis(ConnectionManager),
    Memory(Arc<Mutex<HashMap<u64, MemoryVoucher>>>),
}

#[derive(Debug, Default)]
struct MemoryVoucher {
    stock: i64,
    orders: Vec<u64>,
    buyers: HashSet<u64>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.inner {
            StoreKind::Redis(_) => "Store::Redis",
            StoreKind::Memory(_) => "Store::Memory",
        })
    }
}

/// The Redis keys of one voucher.
fn keys(voucher_id: u64) -> [String; 3] {
    let base = format!("seckill:voucher:{voucher_id}");
    [
        format!("{base}:stock"),
        format!("{base}:orders"),
        format!("{base}:buyers"),
    ]
}

impl Store {
    /// A store on the Redis at `url`, reconnecting on its own; each command is bounded by a
    /// timeout.
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(STORE_TIMEOUT))
            .set_connection_timeout(Some(STORE_TIMEOUT))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self {
            inner: StoreKind::Redis(conn),
        })
    }

    /// An empty in-process store.
    pub fn in_memory() -> Self {
        Self {
            inner: StoreKind::Memory(Arc::default()),
        }
    }

    /// Runs `f` on the in-memory tables, after yielding once as a round trip would.
    async fn memory<T>(
        tables: &Mutex<HashMap<u64, MemoryVoucher>>,
        f: impl FnOnce(&mut HashMap<u64, MemoryVoucher>) -> T,
    ) -> T {
        tokio::task::yield_now().await;
        f(&mut tables.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts the voucher on sale with `stock`, deleting its earlier orders.
    pub async fn reset(&self, voucher_id: u64, stock: u64) -> Result<(), OrderError> {
        let stock = i64::try_from(stock).unwrap_or(i64::MAX);
        match &self.inner {
            StoreKind::Redis(conn) => {
                let [stock_key, orders, buyers] = keys(voucher_id);
                let mut conn = conn.clone();
                let () = redis::pipe()
                    .atomic()
                    .del(&[&stock_key, &orders, &buyers])
                    .ignore()
                    .set(&stock_key, stock)
                    .ignore()
                    .query_async(&mut conn)
                    .await?;
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    t.insert(
                        voucher_id,
                        MemoryVoucher {
                            stock,
                            ..MemoryVoucher::default()
                        },
                    )
                })
                .await;
            }
        }
        Ok(())
    }

    /// `GET stock`: the remaining stock, `None` for an unknown voucher.
    pub async fn stock(&self, voucher_id: u64) -> Result<Option<i64>, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [stock, ..] = keys(voucher_id);
                redis::cmd("GET")
                    .arg(stock)
                    .query_async(&mut conn.clone())
                    .await?
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| t.get(&voucher_id).map(|v| v.stock)).await
            }
        })
    }

    /// `SET stock n`: overwrites the stock with a value computed from an earlier read.
    pub async fn set_stock(&self, voucher_id: u64, stock: i64) -> Result<(), OrderError> {
        match &self.inner {
            StoreKind::Redis(conn) => {
                let [key, ..] = keys(voucher_id);
                let () = redis::cmd("SET")
                    .arg(key)
                    .arg(stock)
                    .query_async(&mut conn.clone())
                    .await?;
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| t.entry(voucher_id).or_default().stock = stock).await;
            }
        }
        Ok(())
    }

    /// `SISMEMBER buyers user`: whether the user has an order for the voucher.
    pub async fn has_ordered(&self, voucher_id: u64, user_id: u64) -> Result<bool, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [_, _, buyers] = keys(voucher_id);
                redis::cmd("SISMEMBER")
                    .arg(buyers)
                    .arg(user_id)
                    .query_async(&mut conn.clone())
                    .await?
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    t.get(&voucher_id)
                        .is_some_and(|v| v.buyers.contains(&user_id))
                })
                .await
            }
        })
    }

    /// `RPUSH orders user` then `SADD buyers user`: records an order; returns its number.
    pub async fn create_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [_, orders, buyers] = keys(voucher_id);
                let mut conn = conn.clone();
                let number: u64 = redis::cmd("RPUSH")
                    .arg(orders)
                    .arg(user_id)
                    .query_async(&mut conn)
                    .await?;
                let _: u64 = redis::cmd("SADD")
                    .arg(buyers)
                    .arg(user_id)
                    .query_async(&mut conn)
                    .await?;
                number
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    let v = t.entry(voucher_id).or_default();
                    v.orders.push(user_id);
                    v.buyers.insert(user_id);
                    v.orders.len() as u64
                })
                .await
            }
        })
    }

    /// `LRANGE orders 0 -1`: the user of every order created, in order.
    pub async fn orders(&self, voucher_id: u64) -> Result<Vec<u64>, OrderError> {
        Ok(match &self.inner {
            StoreKind::Redis(conn) => {
                let [_, orders, _] = keys(voucher_id);
                redis::cmd("LRANGE")
                    .arg(orders)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn.clone())
                    .await?
            }
            StoreKind::Memory(tables) => {
                Self::memory(tables, |t| {
                    t.get(&voucher_id)
                        .map(|v| v.orders.clone())
                        .unwrap_or_default()
                })
                .await
            }
        })
    }
}
