//! Where vouchers and orders live: a SQL database through sqlx, SQLite by default (a file,
//! nothing to install) or PostgreSQL when the URL names one.
//!
//! ```sql
//! seckill_vouchers (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL)
//! seckill_orders   (id <generated> PRIMARY KEY, voucher_id BIGINT NOT NULL, user_id BIGINT NOT NULL)
//! ```
//!
//! There is no unique constraint on `(voucher_id, user_id)`: one order per user is the
//! lock's job here, as it is for every rule an index cannot express (at most three orders
//! per user, one order per household). The index on the pair is there for the check's read.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Executor as _, Row as _};

use super::OrderError;

/// How long one statement (or getting a connection for it) may take before the request
/// fails.
const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long SQLite waits for another connection's write to finish before it answers busy:
/// the instances' order transactions queue on the one file.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;

/// The databases the store speaks to, for what their SQL does not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: one file, writers taking turns.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Dialect {
    /// The dialect of a `sqlite:` or `postgres:` URL.
    pub fn of(url: &str) -> Result<Self, OrderError> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Self::Postgres)
        } else {
            Err(OrderError::Store(
                format!(
                    "`{}` is not a database URL this example knows: use `sqlite://<file>` or \
                     `postgres://<user>@<host>/<database>`",
                    redact(url)
                )
                .into(),
            ))
        }
    }
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The shop's tables, shared by every instance through one database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    url: String,
}

impl Store {
    /// A store on the database at `url` (`sqlite://<file>?mode=rwc`, or `postgres://…`).
    /// Its tables are made by [`reset`](Self::reset).
    pub async fn connect(url: &str) -> Result<Self, OrderError> {
        let dialect = Dialect::of(url)?;
        install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(STORE_TIMEOUT)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        conn.execute(&*format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"))
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(url);
        let pool = bounded("connecting", pool).await?;
        Ok(Self {
            pool,
            dialect,
            url: url.to_owned(),
        })
    }

    /// The database's URL, to hand to another instance (a worker process).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Which database it is.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Makes the tables if missing, and puts the voucher on sale with `stock`, deleting its
    /// earlier orders.
    pub async fn reset(&self, voucher_id: u64, stock: u64) -> Result<(), OrderError> {
        let order_id = match self.dialect {
            // SQLite's WAL lets the instances read while one writes.
            Dialect::Sqlite => {
                bounded("PRAGMA", self.pool.execute("PRAGMA journal_mode = WAL")).await?;
                "INTEGER PRIMARY KEY AUTOINCREMENT"
            }
            Dialect::Postgres => "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        };
        let schema = [
            "CREATE TABLE IF NOT EXISTS seckill_vouchers (id BIGINT PRIMARY KEY, stock BIGINT \
             NOT NULL)"
                .to_owned(),
            format!(
                "CREATE TABLE IF NOT EXISTS seckill_orders (id {order_id}, voucher_id BIGINT NOT \
                 NULL, user_id BIGINT NOT NULL)"
            ),
            "CREATE INDEX IF NOT EXISTS seckill_orders_by_user ON seckill_orders (voucher_id, \
             user_id)"
                .to_owned(),
        ];
        for statement in &schema {
            bounded("making the tables", self.pool.execute(statement.as_str())).await?;
        }
        let (voucher, stock) = (id(voucher_id)?, id(stock)?);
        let mut tx = bounded("BEGIN", self.pool.begin()).await?;
        bounded(
            "deleting the orders",
            sqlx::query("DELETE FROM seckill_orders WHERE voucher_id = $1")
                .bind(voucher)
                .execute(&mut *tx),
        )
        .await?;
        bounded(
            "deleting the voucher",
            sqlx::query("DELETE FROM seckill_vouchers WHERE id = $1")
                .bind(voucher)
                .execute(&mut *tx),
        )
        .await?;
        bounded(
            "putting the voucher on sale",
            sqlx::query("INSERT INTO seckill_vouchers (id, stock) VALUES ($1, $2)")
                .bind(voucher)
                .bind(stock)
                .execute(&mut *tx),
        )
        .await?;
        bounded("COMMIT", tx.commit()).await?;
        Ok(())
    }

    /// The remaining stock, `None` for an unknown voucher.
    pub async fn stock(&self, voucher_id: u64) -> Result<Option<i64>, OrderError> {
        let row = bounded(
            "reading the stock",
            sqlx::query("SELECT stock FROM seckill_vouchers WHERE id = $1")
                .bind(id(voucher_id)?)
                .fetch_optional(&self.pool),
        )
        .await?;
        row.map(|row| row.try_get::<i64, _>(0))
            .transpose()
            .map_err(|e| OrderError::Store(Box::new(e)))
    }

    /// Whether the user has an order for the voucher: the check the lock makes safe.
    pub async fn has_ordered(&self, voucher_id: u64, user_id: u64) -> Result<bool, OrderError> {
        let count = self
            .count(
                "reading the user's orders",
                "SELECT COUNT(*) FROM seckill_orders WHERE voucher_id = $1 AND user_id = $2",
                &[voucher_id, user_id],
            )
            .await?;
        Ok(count > 0)
    }

    /// In one transaction, takes one from the stock if any is left and records the order;
    /// returns the order's number. The stock is taken by a conditional `UPDATE`, which the
    /// database runs atomically: stock is never oversold, lock or not.
    pub async fn create_order(&self, voucher_id: u64, user_id: u64) -> Result<u64, OrderError> {
        let (voucher, user) = (id(voucher_id)?, id(user_id)?);
        // The transaction writes first: SQLite takes its write lock then, waiting its turn
        // (a transaction that read first and wrote second would be refused instead).
        let mut tx = bounded("BEGIN", self.pool.begin()).await?;
        let taken = bounded(
            "taking from the stock",
            sqlx::query(
                "UPDATE seckill_vouchers SET stock = stock - 1 WHERE id = $1 AND stock > 0",
            )
            .bind(voucher)
            .execute(&mut *tx),
        )
        .await?;
        if taken.rows_affected() == 0 {
            bounded("ROLLBACK", tx.rollback()).await?;
            return Err(OrderError::SoldOut);
        }
        let row = bounded(
            "recording the order",
            sqlx::query(
                "INSERT INTO seckill_orders (voucher_id, user_id) VALUES ($1, $2) RETURNING id",
            )
            .bind(voucher)
            .bind(user)
            .fetch_one(&mut *tx),
        )
        .await?;
        let number = row
            .try_get::<i64, _>(0)
            .map_err(|e| OrderError::Store(Box::new(e)))?;
        bounded("COMMIT", tx.commit()).await?;
        Ok(u64::try_from(number).unwrap_or(0))
    }

    /// The outcome, counted by SQL.
    pub async fn tally(&self, voucher_id: u64) -> Result<Orders, OrderError> {
        let orders = self
            .count(
                "counting the orders",
                "SELECT COUNT(*) FROM seckill_orders WHERE voucher_id = $1",
                &[voucher_id],
            )
            .await?;
        let duplicate_users = self
            .count(
                "counting the users with several orders",
                "SELECT COUNT(*) FROM (SELECT user_id FROM seckill_orders WHERE voucher_id = $1 \
                 GROUP BY user_id HAVING COUNT(*) > 1) AS several",
                &[voucher_id],
            )
            .await?;
        Ok(Orders {
            orders,
            duplicate_users,
            stock_left: self.stock(voucher_id).await?.unwrap_or(0),
        })
    }

    /// A `COUNT(*)` query's answer.
    async fn count(&self, doing: &str, sql: &str, ids: &[u64]) -> Result<u64, OrderError> {
        let mut query = sqlx::query(sql);
        for value in ids {
            query = query.bind(id(*value)?);
        }
        let row = bounded(doing, query.fetch_one(&self.pool)).await?;
        let count = row
            .try_get::<i64, _>(0)
            .map_err(|e| OrderError::Store(Box::new(e)))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

/// A SQLite file made for one run, in a directory of its own that goes with it.
#[derive(Debug)]
pub struct ScratchDatabase {
    dir: PathBuf,
}

impl ScratchDatabase {
    /// A fresh directory under the system's temporary one.
    pub fn new() -> std::io::Result<Self> {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rlock-seckill-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    /// The database to use: `named` when given, else a scratch file made now (returned, to
    /// be kept as long as the database is used).
    pub fn unless_named(named: Option<String>) -> std::io::Result<(String, Option<Self>)> {
        Ok(match named {
            Some(url) => (url, None),
            None => {
                let scratch = Self::new()?;
                (scratch.url(), Some(scratch))
            }
        })
    }

    /// The URL of its database file (made on first connection).
    pub fn url(&self) -> String {
        format!("sqlite://{}?mode=rwc", self.dir.join("shop.db").display())
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the orders table holds for a voucher, counted by SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orders {
    /// Orders created.
    pub orders: u64,
    /// Users with more than one order.
    pub duplicate_users: u64,
    /// The voucher's stock column.
    pub stock_left: i64,
}

/// An id as SQL's `BIGINT`.
fn id(value: u64) -> Result<i64, OrderError> {
    i64::try_from(value)
        .map_err(|_| OrderError::Store(format!("{value} does not fit a BIGINT column").into()))
}

/// `step` within [`STORE_TIMEOUT`], its error or its silence told as what it was doing.
async fn bounded<T>(
    step: &str,
    future: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, OrderError> {
    match tokio::time::timeout(STORE_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(OrderError::Store(format!("{step}: {e}").into())),
        Err(_) => Err(OrderError::Store(
            format!("{step}: the database did not answer within {STORE_TIMEOUT:?}").into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn urls_name_their_dialect_and_never_show_a_password() {
        assert_eq!(Dialect::of("sqlite://x.db").unwrap(), Dialect::Sqlite);
        assert_eq!(
            Dialect::of("postgres://u@127.0.0.1/db").unwrap(),
            Dialect::Postgres
        );
        let err = Dialect::of("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("u:***@h/db") && !err.contains("secret"),
            "{err}"
        );
    }
}
